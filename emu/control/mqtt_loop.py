"""paho's network loop on a selector (epoll), for MQTT clients in the host's process.

paho's own loop (`loop_start`) waits in `select()`, which cannot watch a descriptor numbered
1024 or above: the call fails inside paho's thread, the thread ends, and the client goes
silent (no CONNACK, no SUBACK, no message). The process that holds a cluster's relays has two
or three descriptors per link, so from about 170 gateways on, a controller it opened there
never heard its broker. This loop watches the client's socket with `selectors`, which has no
such limit: paho's external-loop interface (`loop_read`, `loop_write`, `loop_misc`). paho's
write-registration callback, once set, makes paho queue what another thread publishes rather
than write it there; the callback wakes the loop through a socket pair, and the loop writes
while `want_write()`.

paho's own loop reconnects after a lost connection; an external loop must do it itself: while
the client has no socket and was not told to disconnect, this one calls `reconnect()` with a
growing delay (`Backoff`, as paho's `reconnect_delay_set`), so a broker restart costs a
persistent client (emu.agent.mqtt) only the time the broker was away.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from typing import Any

MISC_INTERVAL_S = 1.0  # keepalive pings and retries: paho asks for loop_misc about once a second
RECONNECT_MIN_S, RECONNECT_MAX_S = 0.5, 4.0


class Backoff:
    """When to try a connection again: at once the first time after a connection that worked
    (a CONNACK), then `low` later, doubling at each attempt up to `high`; a peer that accepts
    and closes at once (a relay whose service is down) waits as long as one that refuses."""

    def __init__(self, low: float = RECONNECT_MIN_S, high: float = RECONNECT_MAX_S) -> None:
        self.low, self.high = low, high
        self.delay = 0.0
        self.next_try = 0.0
        self.attempts = 0  # since the last connection that worked

    def due(self, now: float) -> bool:
        return now >= self.next_try

    def wait(self, now: float) -> float:
        """Seconds until the next attempt is due."""
        return max(0.0, self.next_try - now)

    def attempt(self, now: float) -> None:
        self.attempts += 1
        self.delay = self.low if self.delay == 0.0 else min(self.delay * 2, self.high)
        self.next_try = now + self.delay

    def connected(self) -> None:
        self.delay = 0.0
        self.next_try = 0.0
        self.attempts = 0


class SelectorLoop:
    """Runs one paho client's network traffic on a thread of its own until `stop`; reconnects
    a lost connection until `disconnect` (or `stop`)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.backoff = Backoff()
        self.reconnects = 0  # connections made again after one was lost
        self._leaving = threading.Event()  # disconnect() called: no more reconnections
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        client.on_socket_register_write = lambda *args: self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # the loop has stopped
            self._wake_write.send(b"\0")

    def start(self) -> SelectorLoop:
        self._thread = threading.Thread(target=self._run, name="mqtt-selector", daemon=True)
        self._thread.start()
        return self

    def disconnect_with(self, **kwargs: Any) -> None:
        """Disconnect the client for good (disconnect()'s arguments): the loop does not
        reconnect it."""
        self._leaving.set()
        self.client.disconnect(**kwargs)

    def stop(self, timeout: float = 5.0) -> None:
        """End the loop once what is queued (a DISCONNECT) is written, or after `timeout`."""
        self._leaving.set()
        deadline = time.monotonic() + timeout
        while self.client.want_write() and self._running() and time.monotonic() < deadline:
            time.sleep(0.01)
        self._stopping.set()
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()

    def _running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        watched: socket.socket | None = None
        while not self._stopping.is_set():
            sock = self.client.socket()
            if sock is None and not self._leaving.is_set():
                sock = self._reconnect()
            elif self.backoff.attempts and self.client.is_connected():
                self.backoff.connected()
            if sock is not watched:
                if watched is not None:
                    with contextlib.suppress(KeyError, ValueError):
                        self._selector.unregister(watched)
                watched = sock
                if sock is not None:
                    self._selector.register(sock, selectors.EVENT_READ)
            if sock is not None:
                events = selectors.EVENT_READ | (
                    selectors.EVENT_WRITE if self.client.want_write() else 0)
                self._selector.modify(sock, events)
            wait = MISC_INTERVAL_S if sock is not None else min(
                MISC_INTERVAL_S, self.backoff.wait(time.monotonic()))
            for key, mask in self._selector.select(wait):
                if key.fileobj is self._wake_read:
                    with contextlib.suppress(BlockingIOError):
                        self._wake_read.recv(4096)
                    continue
                if mask & selectors.EVENT_READ:
                    self.client.loop_read()
                    # TLS (emu.cluster.tls): what OpenSSL read ahead is no longer the socket's.
                    while getattr(self.client.socket(), "pending", int)():
                        self.client.loop_read()
                if mask & selectors.EVENT_WRITE:
                    self.client.loop_write()
            self.client.loop_misc()

    def _reconnect(self) -> Any:
        """Try to connect again if the backoff allows; the new socket, or None."""
        now = time.monotonic()
        if not self.backoff.due(now):
            return None
        self.backoff.attempt(now)
        try:
            self.client.reconnect()
        except (OSError, ValueError):  # refused, unreachable, timed out: the broker is away
            return None
        self.reconnects += 1
        return self.client.socket()
