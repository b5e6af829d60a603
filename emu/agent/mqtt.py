"""A paho-mqtt client that works alike with Debian's paho 1.6 and with paho 2.x."""

from __future__ import annotations

import socket
from typing import Any


def new_client(client_id: str) -> Any:
    """A clean-session MQTT 3.1.1 client; on paho 2.x with the version-2 callbacks.

    Callbacks written as `on_connect(client, userdata, flags, rc, *rest)` and
    `on_disconnect(client, userdata, *rest)` suit both versions; `connected(rc)` reads rc.
    """
    import paho.mqtt.client as mqtt

    api = getattr(mqtt, "CallbackAPIVersion", None)  # only paho 2.x has it
    if api is None:
        return mqtt.Client(client_id=client_id, clean_session=True)
    return mqtt.Client(api.VERSION2, client_id=client_id, clean_session=True)


def connected(rc: Any) -> bool:
    """Whether a CONNACK's code (an int in paho 1.6, a ReasonCode in 2.x) means success."""
    failure = getattr(rc, "is_failure", None)
    return not failure if failure is not None else rc == 0


def no_delay(client: Any) -> None:
    """Send small packets at once: paho leaves Nagle's algorithm on, which holds a reply
    sent right after an acknowledgement for the peer's delayed ACK (about 40 ms)."""
    sock = client.socket()
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
