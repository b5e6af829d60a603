"""Ask a cluster's servers whether they answer: Mosquitto a CONNACK, ZooKeeper `ruok` -> `imok`."""

from __future__ import annotations

import socket

PROBE_TIMEOUT_S = 2.0
# An MQTT 3.1.1 CONNECT: clean session, keep-alive 10 s, empty client id.
MQTT_CONNECT = bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([4, 0x02, 0, 10, 0, 0])
MQTT_CONNACK = bytes([0x20, 2])
# Return codes that mean the broker is up: accepted, or (a closed cluster's, which this
# anonymous probe cannot log in to: emu.cluster.access) bad login or not authorised.
MQTT_UP_CODES = (0, 4, 5)


def _exchange(host: str, port: int, request: bytes, size: int) -> bytes:
    """The server's answer to `request`, in plain TCP, or in TLS when the server hangs up on
    plain TCP without a word (a cluster with TLS, emu.cluster.tls: the probe asks whether the
    server answers, not who it is, so it checks no certificate)."""
    sock = socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S)
    try:
        answer = _ask(sock, request, size)
    except (ConnectionResetError, TimeoutError):  # a TLS server: reset, or waiting for TLS
        answer = b""
    if answer:
        return answer
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        sock = context.wrap_socket(socket.create_connection((host, port),
                                                            timeout=PROBE_TIMEOUT_S))
    except ssl.SSLError:
        return b""
    return _ask(sock, request, size)


def _ask(sock: socket.socket, request: bytes, size: int) -> bytes:
    with sock:
        sock.sendall(request)
        answer = b""
        while len(answer) < size:
            data = sock.recv(size - len(answer))
            if not data:
                break
            answer += data
        return answer


def mqtt_answers(host: str, port: int) -> bool:
    """The broker answers an MQTT connection: accepts it, or refuses it for its login."""
    try:
        answer = _exchange(host, port, MQTT_CONNECT, 4)
    except OSError:
        return False
    return answer[:2] == MQTT_CONNACK and len(answer) == 4 and answer[3] in MQTT_UP_CODES


def zookeeper_answers(host: str, port: int, quorum: bool = False) -> bool:
    """The server says `imok`; with quorum, it also serves as leader, follower or standalone."""
    try:
        if _exchange(host, port, b"ruok", 4) != b"imok":
            return False
        if not quorum:
            return True
        return b"Mode: " in _exchange(host, port, b"srvr", 4096)
    except OSError:
        return False

