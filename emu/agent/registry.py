"""The node's ephemeral znodes in ZooKeeper, made again whenever its session was lost."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from urllib.parse import quote

GATEWAYS = "/iot/gateways"
SENSORS = "/iot/sensors"
# ZooKeeper's client timeout for one call; the session may last longer.
CALL_TIMEOUT = 10.0


def gateway_path(node: str) -> str:
    return f"{GATEWAYS}/{node}"


def sensor_path(stream: str, device: str, topic: str) -> str:
    """Seed 001, 3.2: /iot/sensors/<driver>/<instance>/<channel>; the driver is the stream,
    the instance the device and the channel its topic, quoted into one znode name."""
    return f"{SENSORS}/{stream}/{device}/{quote(topic, safe='')}"


class Registration:
    """Keeps `/iot/gateways/<node>` and the node's sensor znodes while the agent lives.

    The znodes are ephemeral: they go when the session ends, by a clean close or when the
    session times out after the agent died. A session lost on the way (a partition longer
    than the timeout) makes them again on the next connection. The gateway znode is made
    last, so its presence means the node is registered whole.
    """

    def __init__(self, hosts: str, node: str, session_timeout: float,
                 description: Callable[[], bytes], sensors: list[tuple[str, bytes]]) -> None:
        self.hosts = hosts
        self.node = node
        self.path = gateway_path(node)
        self.session_timeout = session_timeout
        self.description = description
        self.sensors = sensors
        self.registered = threading.Event()
        self.registrations = 0  # how many sessions this node registered in (1 + re-registrations)
        self._lock = threading.Lock()
        self._closing = False
        self.client = None

    def start(self) -> None:
        """Connect in the background: ZooKeeper may come up after the agent."""
        from kazoo.client import KazooClient

        self.client = KazooClient(hosts=self.hosts, timeout=self.session_timeout,
                                  connection_retry={"max_tries": -1, "delay": 0.2,
                                                    "backoff": 1.5, "max_delay": 2.0})
        self.client.add_listener(self._changed)
        self.client.start_async()

    def _changed(self, state: str) -> None:
        # Called on kazoo's connection thread, which must not block: register on a thread.
        if state == "LOST":
            self.registered.clear()
        elif state == "CONNECTED" and not self.registered.is_set() and not self._closing:
            threading.Thread(target=self._register, name="foglab-register", daemon=True).start()

    def _register(self) -> None:
        from kazoo.exceptions import KazooException, NodeExistsError

        with self._lock:
            if self.registered.is_set() or self._closing:
                return
            client = self.client
            try:
                pending = [(path, data, client.create_async(path, data, ephemeral=True,
                                                            makepath=True))
                           for path, data in self.sensors]
                for path, data, result in pending:
                    try:
                        result.get(timeout=CALL_TIMEOUT)
                    except NodeExistsError:
                        self._replace(path, data)
                self._replace(self.path, self.description(), create=True)
            except (KazooException, OSError) as error:
                # The listener tries again on the next connection.
                print(f"foglab agent {self.node}: registration failed: {error!r}",
                      file=sys.stderr, flush=True)
                return
            self.registrations += 1
            self.registered.set()

    def _replace(self, path: str, data: bytes, create: bool = False) -> None:
        """Make path ours: an ephemeral znode of an earlier session (an agent restarted before
        its old session timed out) is deleted and made again."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        client = self.client
        if create:
            try:
                client.create(path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                pass
        stat = client.exists(path)
        if stat is not None and stat.ephemeralOwner == client.client_id[0]:
            client.set(path, data)
            return
        with contextlib.suppress(NoNodeError):
            client.delete(path)
        client.create(path, data, ephemeral=True, makepath=True)

    def update(self) -> None:
        """Publish the node's description again (its operators changed)."""
        if self.client is not None and self.registered.is_set():
            self.client.set_async(self.path, self.description())

    def close(self, timeout: float = 1.0) -> None:
        """End the session, which removes the znodes; give up waiting after timeout."""
        self._closing = True
        client = self.client
        if client is None:
            return

        def end() -> None:
            try:
                client.stop()
                client.close()
            except Exception as error:  # closing must never keep the agent from exiting
                print(f"foglab agent {self.node}: closing ZooKeeper: {error!r}",
                      file=sys.stderr, flush=True)

        closer = threading.Thread(target=end, name="foglab-zk-close", daemon=True)
        closer.start()
        closer.join(timeout)
