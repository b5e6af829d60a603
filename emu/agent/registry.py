"""The node's ephemeral znodes in ZooKeeper, made again whenever its session was lost."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from emu.agent.zookeeper import (
    SHARED,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    ZooKeeper,
    ZooKeeperError,
)

GATEWAYS = "/iot/gateways"
SENSORS = "/iot/sensors"


def gateway_path(node: str) -> str:
    return f"{GATEWAYS}/{node}"


def sensor_path(stream: str, device: str, topic: str) -> str:
    """Seed 001, 3.2: /iot/sensors/<driver>/<instance>/<channel>; the driver is the stream,
    the instance the device and the channel its topic, quoted into one znode name."""
    return f"{SENSORS}/{stream}/{device}/{quote(topic, safe='')}"


def sensor_znodes(node: str, drivers: Iterable[Any]) -> list[tuple[str, bytes]]:
    """(path, data) of the znode of each device of a node's drivers (emu.agent.drivers)."""
    return [(sensor_path(driver.stream, device.name, device.topic),
             json.dumps({"node": node, "topic": device.topic,
                         "qos": driver.config.qos}).encode())
            for driver in drivers for device in driver.devices]


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
        # Sessions of this node ZooKeeper expired (it was taken for dead meanwhile); each is
        # told to `on_expired` on the connection thread, before the node registers again.
        self.expired = 0
        self.on_expired: Callable[[], None] = lambda: None
        self._lock = threading.Lock()
        self._closing = False
        self.client: ZooKeeper | None = None

    def start(self) -> None:
        """Connect in the background: ZooKeeper may come up after the agent."""
        self.client = ZooKeeper(self.hosts, self.session_timeout, self._connected)
        self.client.start()

    def _connected(self, new_session: bool) -> None:
        # Called on the client's connection thread, which reads the replies: call on another.
        if new_session:
            if self.registrations and self.registered.is_set():
                self.expired += 1
                self.on_expired()
            self.registered.clear()
        if not self._closing:
            threading.Thread(target=self._register, name="foglab-register", daemon=True).start()

    def _register(self) -> None:
        with self._lock:
            if self._closing:
                return
            if self.registered.is_set():
                self.update()  # the same session again: a change meanwhile may not have gone
                return
            client = self.client
            try:
                parents = [client.create_async(parent, acl=SHARED)
                           for parent in self._parents()]
                pending = [(path, data, client.create_async(path, data, ephemeral=True))
                           for path, data in self.sensors]
                for reply in parents:
                    with contextlib.suppress(NodeExistsError):
                        reply.get()
                for path, data, reply in pending:
                    try:
                        reply.get()
                    except (NoNodeError, NodeExistsError):  # deleted meanwhile, or an old znode
                        self._make(path, data)
                self._make(self.path, self._data())
            except (ZooKeeperError, OSError) as error:
                # Tried again on the next connection.
                print(f"foglab agent {self.node}: registration failed: {error!r}",
                      file=sys.stderr, flush=True)
                return
            self.registrations += 1
            self.registered.set()

    def _parents(self) -> list[str]:
        """Every persistent parent of the node's znodes, each after its own parent. They are
        asked for at once, the sensors' znodes right behind them (ZooKeeper serves a session's
        requests in order, so a parent exists before its child's create is read): a
        registration then takes two round trips. Making each sensor's parents one by one took
        six per sensor, which a gateway of 40 sensors behind a 50 ms link dilated 7 times did
        not finish in 3 minutes.
        """
        parents: dict[str, None] = {}
        for path in [*(path for path, _ in self.sensors), self.path]:
            parts = path.strip("/").split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                parents["/" + "/".join(parts[:depth])] = None
        return list(parents)

    def _make(self, path: str, data: bytes) -> None:
        """Make path ours, with its parents: an ephemeral znode of an earlier session (an agent
        restarted before its old session timed out) is deleted and made again; on a closed
        cluster, where no node may delete a child of the shared parents (not even its own:
        ZooKeeper checks a delete on the parent), waited for until ZooKeeper ends that
        session (`_gone`)."""
        client = self.client
        try:
            client.create(path, data, ephemeral=True, makepath=True)
            return
        except NodeExistsError:
            pass
        stat = client.exists(path)
        if stat is not None and stat.ephemeral_owner == client.session_id:
            client.set(path, data)
            return
        try:
            client.delete(path)
        except NoNodeError:
            pass
        except NoAuthError:
            self._gone(path)
        client.create(path, data, ephemeral=True, makepath=True)

    def _gone(self, path: str) -> None:
        """Until the znode an earlier session left goes with that session (its timeout, at
        most twice the node's own), watched."""
        deadline = 2 * self.session_timeout + 10
        while True:
            gone = threading.Event()
            if self.client.exists(path, watch=lambda event, gone=gone: gone.set()) is None:
                return
            if not gone.wait(deadline):
                raise ZooKeeperError(0, f"{path}: an earlier session's znode, not ours, "
                                     f"stayed {deadline:g} s")

    def update(self) -> None:
        """Publish the node's description again (its operators changed)."""
        if self.client is not None and self.registered.is_set():
            # Lost with the connection, it goes again when the session resumes.
            with contextlib.suppress(ZooKeeperError):
                self.client.set_async(self.path, self._data())

    def _data(self) -> bytes:
        """The gateway znode's data: the node's description, with the sessions it lost
        (the host's failure detector tells a loss it did not see by them)."""
        description = self.description()
        try:
            data = json.loads(description)
        except ValueError:
            return description
        if not isinstance(data, dict):
            return description
        data["expired"] = self.expired
        return json.dumps(data, separators=(",", ":")).encode()

    def close(self, timeout: float = 1.0) -> None:
        """End the session, which removes the znodes; give up waiting after timeout."""
        self._closing = True
        if self.client is not None:
            self.client.close(timeout)
