"""A small ZooKeeper client: one session kept alive, and the calls an agent's znodes need.

The gateway agent keeps a few ephemeral znodes, and moves an operator's state through one
(emu.agent.migration): create, exists, get, set and delete of a path, one-shot watches set by
exists and get, pings, and a new session when the old one expired. kazoo does this and much more,
and under QEMU its import (recipes, TLS, SASL) and its threads cost every gateway about half a
second of CPU and megabytes of memory; this client is a socket and one thread. Host-side code
keeps using kazoo.

The wire protocol is ZooKeeper's (jute: big-endian, length-prefixed frames). Replies come in
the order of the requests, so waiting requests are a queue.
"""

from __future__ import annotations

import contextlib
import random
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable

from emu.agent.config import local_address

CREATE, DELETE, EXISTS, GET_DATA, SET_DATA, PING, AUTH, CLOSE = 1, 2, 3, 4, 5, 11, 100, -11
WATCH_XID, PING_XID, AUTH_XID = -1, -2, -4
CONNECTION_LOSS, NO_NODE, NO_AUTH, NODE_EXISTS = -4, -101, -102, -110
EPHEMERAL = 1
# A watch's event types; LOST is ours: the connection went, and with it the server's watches.
NODE_CREATED, NODE_DELETED, NODE_DATA_CHANGED, LOST = 1, 2, 3, -1
ANY_VERSION = -1
# How long a call waits for its reply, whatever the session's timeout.
CALL_TIMEOUT = 10.0
RETRY_DELAY, RETRY_MAX_DELAY = 0.2, 2.0
_INT = struct.Struct(">i")
_HEADER = struct.Struct(">ii")         # xid, op
_REPLY = struct.Struct(">iqi")         # xid, zxid, error
_CONNECTED = struct.Struct(">iiq")     # protocol version, negotiated timeout (ms), session id
# czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner, dataLength,
# numChildren, pzxid
_STAT = struct.Struct(">qqqqiiiqiiq")


def _string(text: str) -> bytes:
    data = text.encode()
    return _INT.pack(len(data)) + data


def _buffer(data: bytes) -> bytes:
    return _INT.pack(len(data)) + data


ALL_PERMISSIONS = 31
# ZooKeeper's permissions: a child is created and deleted with its parent's CREATE and DELETE.
READ, WRITE, CREATE_CHILD, DELETE_CHILD, ADMIN = 1, 2, 4, 8, 16
READ_CREATE = READ | CREATE_CHILD
# One ACL: every permission for world:anyone (kazoo's OPEN_ACL_UNSAFE).
OPEN_ACL = _INT.pack(1) + _INT.pack(ALL_PERMISSIONS) + _string("world") + _string("anyone")
# A closed cluster's identities (emu.cluster.access), `user:password[,user:password]`, for
# every session this process makes unless told otherwise: set once by an agent (`use_auth`).
# The first is the node's own, the second the run's shared one.
_auth = ""
# The ACLs a znode gets (`ZooKeeper.create`'s `acl`), with a node's identity and the run's:
# OWN, a znode of the node's: it every permission, the run read; SHARED, a parent every node
# makes children under: the run read and create, no one delete (a node cannot delete
# another's child); HANDED, a parent of what the node hands over (a migration's state): it
# every permission, the run read and delete (the taker deletes each chunk; only the node
# creates there, so no other node can put a chunk of its own in).
OWN, SHARED, HANDED = "own", "shared", "handed"


def use_auth(auth: str) -> None:
    global _auth
    _auth = auth


def identities(auth: str) -> list[str]:
    """The `user:password` identities of a use_auth string (none: open)."""
    return [part for part in auth.split(",") if part]


def digest_id(auth: str) -> str:
    """The id ZooKeeper's digest scheme gives `user:password`: user:base64(sha1(user:password))."""
    import base64
    import hashlib

    user = auth.split(":", 1)[0]
    return f"{user}:{base64.b64encode(hashlib.sha1(auth.encode()).digest()).decode()}"


def _digest_acl(entries: list[tuple[int, str]]) -> bytes:
    return _INT.pack(len(entries)) + b"".join(
        _INT.pack(perms) + _string("digest") + _string(digest_id(auth))
        for perms, auth in entries)


def digest_acl(auth: str) -> bytes:
    """One ACL: every permission for the identity alone."""
    return _digest_acl([(ALL_PERMISSIONS, auth)])


def acls(auth: str) -> dict[str, bytes]:
    """The ACLs (OWN, SHARED, HANDED) a session with `auth`'s identities gives what it makes:
    open, every one world:anyone's; one identity (the run's, a cluster closed as before), every
    permission for it."""
    found = identities(auth)
    if not found:
        return dict.fromkeys((OWN, SHARED, HANDED), OPEN_ACL)
    if len(found) == 1:
        return dict.fromkeys((OWN, SHARED, HANDED), digest_acl(found[0]))
    own, run = found[0], found[1]
    return {OWN: _digest_acl([(ALL_PERMISSIONS, own), (READ, run)]),
            SHARED: _digest_acl([(READ_CREATE, run)]),
            HANDED: _digest_acl([(ALL_PERMISSIONS, own), (READ | DELETE_CHILD, run)])}


class ZooKeeperError(Exception):
    """A call ZooKeeper refused (`code` is its error code) or could not answer."""

    def __init__(self, code: int, path: str = "") -> None:
        super().__init__(f"ZooKeeper error {code}" + (f" on {path}" if path else ""))
        self.code = code


class ConnectionLoss(ZooKeeperError):
    def __init__(self, path: str = "") -> None:
        super().__init__(CONNECTION_LOSS, path)


class NoNodeError(ZooKeeperError):
    pass


class NodeExistsError(ZooKeeperError):
    pass


class NoAuthError(ZooKeeperError):
    """The znode's ACL does not let this session's identities do that."""


_ERRORS = {NO_NODE: NoNodeError, NODE_EXISTS: NodeExistsError, NO_AUTH: NoAuthError}


class Stat:
    """What ZooKeeper keeps about a znode, as far as the agent asks."""

    __slots__ = ("version", "ephemeral_owner", "data_length", "children")

    def __init__(self, body: bytes) -> None:
        fields = _STAT.unpack_from(body)
        self.version, self.ephemeral_owner = fields[4], fields[7]
        self.data_length, self.children = fields[8], fields[9]


class Reply:
    """A request's answer, filled in by the connection thread."""

    __slots__ = ("xid", "path", "code", "body", "done")

    def __init__(self, path: str) -> None:
        self.xid = 0
        self.path = path
        self.code = 0
        self.body = b""
        self.done = threading.Event()

    def get(self, timeout: float = CALL_TIMEOUT) -> bytes:
        """The reply's body; the call's error as an exception, ConnectionLoss after timeout."""
        if not self.done.wait(timeout):
            raise ConnectionLoss(self.path)
        if self.code == CONNECTION_LOSS:
            raise ConnectionLoss(self.path)
        if self.code:
            raise _ERRORS.get(self.code, ZooKeeperError)(self.code, self.path)
        return self.body


class _Expired(Exception):
    """The server no longer knows the session."""


def parse_hosts(hosts: str) -> list[tuple[str, int]]:
    """'a:2181,[::1]:2182,b' -> [(host, port), ...]."""
    found = []
    for entry in local_address(hosts).split(","):
        host, colon, port = entry.strip().rpartition(":")
        if not colon or "]" in port:
            host, port = entry.strip(), "2181"
        found.append((host.strip("[]"), int(port)))
    return found


class ZooKeeper:
    """A session with a ZooKeeper ensemble, kept up by a connection thread.

    After each connection the thread calls `on_connected(new_session)` (not to block: the
    same thread reads the replies); new_session is true when ZooKeeper made a session, the
    first time or after the old one expired, so its ephemeral znodes are gone. A connection
    lost within the session timeout resumes the session. Calls fail with ConnectionLoss while
    there is no connection.
    """

    def __init__(self, hosts: str, timeout: float,
                 on_connected: Callable[[bool], None] = lambda new_session: None,
                 auth: str | None = None) -> None:
        self.hosts = parse_hosts(hosts)
        # A closed cluster: every connection adds the identities, every znode made names them.
        self.auth = _auth if auth is None else auth
        self._acls = acls(self.auth)
        self.timeout = timeout
        self.on_connected = on_connected
        self.session_id = 0
        self.password = bytes(16)
        self.negotiated = timeout
        self.connected = threading.Event()
        self._zxid = 0  # the last transaction seen: a server that is behind it refuses us
        self._xid = 0
        self._sock: socket.socket | None = None
        self._pending: deque[Reply] = deque()
        self._lock = threading.Lock()  # xids, the pending queue and the socket's writes
        self._closing = threading.Event()
        self._last_sent = 0.0
        self._thread: threading.Thread | None = None
        self._watches: dict[str, list[Callable[[int], None]]] = {}  # path -> one-shot callbacks

    @property
    def client_id(self) -> tuple[int, bytes]:
        """(session id, password), as kazoo names them."""
        return self.session_id, self.password

    def start(self) -> None:
        """Connect in the background, and again whenever the connection drops."""
        self._thread = threading.Thread(target=self._run, name="foglab-zookeeper", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 1.0) -> None:
        """End the session (its ephemeral znodes go at once) and stop; within timeout."""
        deadline = time.monotonic() + timeout
        self._closing.set()
        # Not connected: the session times out on the server instead.
        with contextlib.suppress(ZooKeeperError):
            self._request(CLOSE, b"").get(timeout)
        with self._lock:
            if self._sock is not None:
                _shut(self._sock)
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))

    # Calls --------------------------------------------------------------------------------------

    def create_async(self, path: str, data: bytes = b"", ephemeral: bool = False,
                     acl: str = OWN) -> Reply:
        """`acl`: OWN, SHARED or HANDED (see there)."""
        flags = EPHEMERAL if ephemeral else 0
        return self._request(CREATE, _string(path) + _buffer(data) + self._acls[acl]
                             + _INT.pack(flags), path)

    def create(self, path: str, data: bytes = b"", ephemeral: bool = False,
               makepath: bool = False, acl: str = OWN) -> None:
        """Create path; with makepath its missing parents first (persistent, empty, SHARED:
        every node of the run may make its children there)."""
        try:
            self.create_async(path, data, ephemeral, acl).get()
            return
        except NoNodeError:
            if not makepath:
                raise
        parent = ""
        for part in path.strip("/").split("/")[:-1]:
            parent += "/" + part
            with contextlib.suppress(NodeExistsError):
                self.create_async(parent, acl=SHARED).get()
        self.create_async(path, data, ephemeral, acl).get()

    def exists(self, path: str, watch: Callable[[int], None] | None = None) -> Stat | None:
        """The znode's Stat, None if there is none. `watch(event type)` is called once, on the
        connection thread (it must not block), at the next creation, deletion or change of
        path, or with LOST when the connection drops first."""
        if watch is not None:
            self._watch(path, watch)
        try:
            return Stat(self._request(EXISTS, _string(path) + (b"\1" if watch else b"\0"),
                                      path).get())
        except NoNodeError:
            return None

    def get(self, path: str, watch: Callable[[int], None] | None = None) -> bytes:
        """The znode's data (NoNodeError if there is none); `watch` as for exists."""
        if watch is not None:
            self._watch(path, watch)
        body = self._request(GET_DATA, _string(path) + (b"\1" if watch else b"\0"),
                             path).get()
        size = _INT.unpack_from(body)[0]
        return body[4:4 + size] if size > 0 else b""

    def _watch(self, path: str, callback: Callable[[int], None]) -> None:
        # Noted before the request goes: its event may come right after the reply.
        with self._lock:
            self._watches.setdefault(path, []).append(callback)

    def set_async(self, path: str, data: bytes, version: int = ANY_VERSION) -> Reply:
        return self._request(SET_DATA, _string(path) + _buffer(data) + _INT.pack(version), path)

    def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> Stat:
        return Stat(self.set_async(path, data, version).get())

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        self._request(DELETE, _string(path) + _INT.pack(version), path).get()

    def _request(self, op: int, payload: bytes, path: str = "") -> Reply:
        reply = Reply(path)
        with self._lock:
            sock = self._sock
            if sock is None:
                raise ConnectionLoss(path)
            self._xid = self._xid % 0x7FFFFFFF + 1
            reply.xid = self._xid
            self._pending.append(reply)
            self._send(sock, _HEADER.pack(reply.xid, op) + payload)
        return reply

    def _send(self, sock: socket.socket, frame: bytes) -> None:
        """Send one frame, holding the lock; a failed send ends the connection."""
        try:
            sock.sendall(_INT.pack(len(frame)) + frame)
            self._last_sent = time.monotonic()
        except OSError:
            _shut(sock)  # the reader wakes, and fails what waits

    # Connection thread ------------------------------------------------------------------------

    def _run(self) -> None:
        delay = RETRY_DELAY
        while not self._closing.is_set():
            host, port = random.choice(self.hosts)
            try:
                sock, new_session = self._connect(host, port)
            except _Expired:
                self.session_id, self.password = 0, bytes(16)
                continue  # a new session at once
            except (OSError, ValueError, struct.error):
                self._closing.wait(delay)
                delay = min(delay * 1.5, RETRY_MAX_DELAY)
                continue
            if self._closing.is_set():  # closed while connecting: the session times out
                sock.close()
                return
            delay = RETRY_DELAY
            try:
                self._serve(sock, new_session)
            except (OSError, ValueError, struct.error):
                pass
            finally:
                self._disconnected(sock)
            # Not at once: a connection dropped because another took the session over (a
            # moved session) would take it back before that one could close it.
            self._closing.wait(delay)

    def _connect(self, host: str, port: int) -> tuple[socket.socket, bool]:
        sock = socket.create_connection((host, port), timeout=min(self.timeout, CALL_TIMEOUT))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if _tls_on():  # a cluster with TLS (emu.agent.tls): only a server of the run
                from emu.agent.tls import ZOOKEEPER_NAME, context

                sock = context(ZOOKEEPER_NAME).wrap_socket(sock)
            request = (struct.pack(">iqiq", 0, self._zxid, int(self.timeout * 1000),
                                   self.session_id) + _buffer(self.password) + b"\0")
            sock.sendall(_INT.pack(len(request)) + request)
            body = _read_frame(sock)
            _, timeout_ms, session_id = _CONNECTED.unpack_from(body)
            if timeout_ms <= 0:
                raise _Expired
            size = _INT.unpack_from(body, _CONNECTED.size)[0]
            start = _CONNECTED.size + _INT.size
            password = body[start:start + size]
        except BaseException:
            sock.close()
            raise
        new_session = session_id != self.session_id
        self.session_id, self.password = session_id, password
        self.negotiated = timeout_ms / 1000
        return sock, new_session

    def _serve(self, sock: socket.socket, new_session: bool) -> None:
        """Read replies until the connection drops; ping when nothing else was sent lately.

        As kazoo does: a ping every third of the session timeout, and the connection given up
        when nothing came back for two thirds of it (the server may then give the session to
        another connection, or expire it)."""
        read_timeout = self.negotiated * 2 / 3
        ping_every = read_timeout / 2
        heard = time.monotonic()
        with self._lock:
            self._sock = sock
            self._last_sent = heard
            # Served before any request after them (a wrong one ends the session).
            for identity in identities(self.auth):
                self._send(sock, _HEADER.pack(AUTH_XID, AUTH) + _INT.pack(0)
                           + _string("digest") + _buffer(identity.encode()))
        self.connected.set()
        self.on_connected(new_session)
        buffer = bytearray()
        while True:
            now = time.monotonic()
            if now - heard > read_timeout:
                raise ConnectionError("ZooKeeper did not answer a ping")
            wait = self._last_sent + ping_every - now
            if wait <= 0:
                with self._lock:
                    self._send(sock, _HEADER.pack(PING_XID, PING))
                continue
            try:
                chunk = self._receive(sock, wait)
            except TimeoutError:
                continue
            if not chunk:
                return  # closed by the server
            heard = time.monotonic()
            buffer += chunk
            while len(buffer) >= 4:
                end = 4 + _INT.unpack_from(buffer)[0]
                if len(buffer) < end:
                    break
                self._reply(bytes(buffer[4:end]))
                del buffer[:end]

    def _receive(self, sock: socket.socket, wait: float) -> bytes:
        """What came within `wait` (TimeoutError if nothing). A TLS socket is read under the
        lock the writers hold: OpenSSL's connection may not read and write in two threads at
        once. Its record is read whole once select says it began (or OpenSSL holds some)."""
        if not hasattr(sock, "pending"):
            sock.settimeout(wait)
            return sock.recv(65536)
        if not sock.pending() and not select.select([sock], [], [], wait)[0]:
            raise TimeoutError
        with self._lock:
            sock.settimeout(CALL_TIMEOUT)
            return sock.recv(65536)

    def _reply(self, frame: bytes) -> None:
        xid, zxid, code = _REPLY.unpack_from(frame)
        if zxid > self._zxid:
            self._zxid = zxid
        if xid == WATCH_XID:
            event_type = _INT.unpack_from(frame, _REPLY.size)[0]
            size = _INT.unpack_from(frame, _REPLY.size + 8)[0]
            start = _REPLY.size + 12
            path = frame[start:start + size].decode()
            with self._lock:
                callbacks = self._watches.pop(path, [])
            for callback in callbacks:
                callback(event_type)
            return
        if xid == AUTH_XID and code:
            raise ConnectionError(f"ZooKeeper refused the identity {self.auth.split(':')[0]!r}")
        if xid in (PING_XID, AUTH_XID):
            return
        with self._lock:
            reply = self._pending.popleft() if self._pending else None
        if reply is None or reply.xid != xid:
            raise ValueError(f"ZooKeeper answered xid {xid} out of order")
        reply.code, reply.body = code, frame[_REPLY.size:]
        reply.done.set()

    def _disconnected(self, sock: socket.socket) -> None:
        self.connected.clear()
        with self._lock:
            self._sock = None
            failed = list(self._pending)
            self._pending.clear()
            # The server's watches went with the connection (no SetWatches is sent again).
            watches = [c for callbacks in self._watches.values() for c in callbacks]
            self._watches.clear()
        sock.close()
        for reply in failed:
            reply.code = CONNECTION_LOSS
            reply.done.set()
        for callback in watches:
            callback(LOST)


def _tls_on() -> bool:
    """Whether this process's sessions use TLS (emu.agent.tls), without importing ssl when
    they do not."""
    import sys

    module = sys.modules.get("emu.agent.tls")
    return module is not None and module.enabled()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # not connected any more
        sock.shutdown(socket.SHUT_RDWR)


def _read_frame(sock: socket.socket) -> bytes:
    size = _INT.unpack(_read(sock, 4))[0]
    return _read(sock, size)


def _read(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("ZooKeeper closed the connection")
        data += chunk
    return bytes(data)


def connect(hosts: str, timeout: float = 10.0) -> ZooKeeper:
    """A started session, connected within `timeout` (else TimeoutError, the session closed);
    for a node's own calls (a state transfer, its checkpoints), not its registration."""
    if not hosts:
        raise ZooKeeperError(0, "no ZooKeeper configured on this node")
    zk = ZooKeeper(hosts, timeout)
    zk.start()
    if not zk.connected.wait(timeout):
        zk.close()
        raise TimeoutError(f"ZooKeeper {hosts} did not answer within {timeout} s")
    return zk
