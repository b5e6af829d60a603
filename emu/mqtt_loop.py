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
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from typing import Any

MISC_INTERVAL_S = 1.0  # keepalive pings and retries: paho asks for loop_misc about once a second


class SelectorLoop:
    """Runs one paho client's network traffic on a thread of its own until `stop`."""

    def __init__(self, client: Any) -> None:
        self.client = client
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

    def stop(self, timeout: float = 5.0) -> None:
        """End the loop once what is queued (a DISCONNECT) is written, or after `timeout`."""
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
            for key, mask in self._selector.select(MISC_INTERVAL_S):
                if key.fileobj is self._wake_read:
                    with contextlib.suppress(BlockingIOError):
                        self._wake_read.recv(4096)
                    continue
                if mask & selectors.EVENT_READ:
                    self.client.loop_read()
                if mask & selectors.EVENT_WRITE:
                    self.client.loop_write()
            self.client.loop_misc()
