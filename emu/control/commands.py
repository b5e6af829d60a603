"""The host's side of agent management: one command to many nodes at once, and registration."""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from emu.agent.config import OperatorConfig
from emu.agent.mqtt import end_session, new_client, no_delay, session_args, session_present
from emu.agent.protocol import (
    ALL_REQUESTS,
    NODE_LEVEL,
    Request,
    replier,
    replies_filter,
    reply_topic,
    request_topic,
)
from emu.agent.registry import GATEWAYS, gateway_path
from emu.agent.timebase import UNDILATED, TimeBase
from emu.cluster.tls import tls_login
from emu.control.mqtt_loop import SelectorLoop

CONNECT_TIMEOUT = 10.0
MQTT_PORT = 1883  # emu.cluster.plan's
# How often a command waiting for replies asks whether the nodes still missing are gone.
GONE_POLL_S = 0.5
CHECK_S = 2.0  # how often wait_registered asks its check whether to go on
# kazoo logs each dropped connection it then recovers from; without a handler of its own,
# Python would print them on stderr.
logging.getLogger("kazoo").addHandler(logging.NullHandler())


@dataclass(frozen=True)
class Reply:
    """One node's answer: when the host sent the request and got the reply, when the node
    finished, and how. All three on the run's clock (the controller's `clock`: emulated time
    at a dilation, the agents' own), so `latency` is in emulated seconds."""

    node: str
    ok: bool
    error: str | None
    t_sent: float
    t_replied: float
    t_done: float
    result: Any = None

    @property
    def latency(self) -> float:
        return self.t_replied - self.t_sent


class NotAnswered(RuntimeError):
    """A node did not answer a command (`silent`), or answered with an error."""

    def __init__(self, message: str, node: str, silent: bool) -> None:
        super().__init__(message)
        self.node, self.silent = node, silent


@dataclass
class CommandResult:
    """The replies of one command sent to many nodes, and the nodes that did not answer:
    `missing`, of which `gone` are those the sender knew dead (it stopped waiting for them)."""

    command: str
    replies: dict[str, Reply] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    t_sent: float = 0.0
    t_finished: float = 0.0
    timeout: float = 0.0  # how long the sender waited (the run's seconds)

    @property
    def ok(self) -> bool:
        return not self.missing and all(reply.ok for reply in self.replies.values())

    @property
    def failed(self) -> dict[str, str | None]:
        return {node: reply.error for node, reply in self.replies.items() if not reply.ok}

    def problem(self, node: str) -> str | None:
        """Why `node`'s part did not go through: its error, or that it did not answer; None
        when it answered ok. The one reading of a reply as done or not."""
        reply = self.replies.get(node)
        if reply is None:
            return f"no answer in {self.timeout:g} s"
        return None if reply.ok else (reply.error or "not ok")

    def answer(self, node: str, what: str | None = None) -> Any:
        """`node`'s result, or NotAnswered naming what was asked (default: the command), the
        node and why."""
        reply = self.replies.get(node)
        if reply is None:
            raise NotAnswered(f"{what or self.command}: {node} did not answer within "
                              f"{self.timeout:g} s", node, silent=True)
        if not reply.ok:
            raise NotAnswered(f"{node}: {reply.error}", node, silent=False)
        return reply.result

    @property
    def silent(self) -> list[str]:
        """Nodes that did not answer and were not known dead."""
        return [node for node in self.missing if node not in self.gone]

    @property
    def duration(self) -> float:
        """From the first request sent to the last reply (or the timeout)."""
        return self.t_finished - self.t_sent

    def summary(self) -> str:
        parts = [f"{self.command}: {len(self.replies) - len(self.failed)} ok"]
        if self.failed:
            parts.append(f"{len(self.failed)} failed (" + "; ".join(
                f"{node}: {error}" for node, error in sorted(self.failed.items())) + ")")
        if self.missing:
            parts.append(f"{len(self.missing)} did not answer (" + ", ".join(
                f"{node}: gone" if node in self.gone else node for node in self.missing) + ")")
        return ", ".join(parts) + f" in {self.duration * 1000:.0f} ms"


class _Session:
    """The controller's persistent MQTT session on one broker, subscribed to its replies."""

    def __init__(self, address: str, client_id: str, reply_topic: str,
                 on_message: Callable[..., None],
                 credentials: tuple[str, str] | None = None, mqtt5: bool = True) -> None:
        host, _, port = address.rpartition(":")
        self.host, self.port = (host, int(port)) if host else (address, 1883)
        self.reply_topic = reply_topic
        self.mqtt5 = mqtt5
        self.client = new_client(client_id, persistent=True, credentials=credentials,
                                 mqtt5=mqtt5)
        self.client.on_message = on_message
        self.client.on_connect = self._on_connect
        self.subscribed = threading.Event()
        self.client.on_subscribe = lambda *args: self.subscribed.set()
        self.connections = 0
        self.loop: SelectorLoop | None = None  # not paho's: see emu.control.mqtt_loop

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connect(self) -> None:
        self.client.connect(self.host, self.port, keepalive=30, **session_args(self.mqtt5))
        no_delay(self.client)
        self.loop = SelectorLoop(self.client).start()

    def close(self) -> None:
        if self.loop is not None:
            self.loop.disconnect_with(properties=end_session())
            self.loop.stop()
            self.loop = None
        else:
            self.client.disconnect(properties=end_session())

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    *rest: Any) -> None:
        """On the loop's thread, at every CONNACK: subscribe unless the session kept it."""
        if getattr(reason, "is_failure", False):
            return
        self.connections += 1
        no_delay(client)
        if not session_present(flags):
            client.subscribe(self.reply_topic, qos=1)


class Controller:
    """Sends management requests to agents over MQTT and collects their replies.

    `with Controller("127.0.0.1:1883") as control: control.install(nodes, operator)`:
    every request is published first, then the replies are awaited together, so N nodes
    take about as long as the slowest one, not N times one.

    Brokers are not bridged (emu.cluster.plan): an agent hears only its own broker. Given
    `{node: broker address}` (`Controller.of_plan` makes it from a cluster's plan), the
    controller holds a session on every broker named and sends each node's request through
    the node's broker, a broadcast through every broker; a node the mapping does not name
    goes through the first broker.

    `clock` is the run's time base (emu.agent.timebase): a command's `timeout` is emulated
    seconds (the agents answer in their own time: at dilation K the host waits K times
    longer) and the replies' times are emulated. The sessions' keepalive stays the host's:
    the controller and the brokers both run on the host's clock.

    Each broker session is persistent (emu.agent.mqtt.new_client): the loop reconnects after
    a lost connection or a broker restart, paho resends the requests not yet acknowledged,
    and the broker keeps the reply subscription and queues the replies meanwhile; a session
    the broker lost is subscribed again. `client_id` should be the same for the
    controller's whole life (the default is random per Controller); with several brokers
    each session's id is it with the broker's number.

    `grants` (a closed cluster's emu.cluster.grants.Grants; `of_plan` finds it): a request
    that starts an operator's instance on a node (an install, a migration's target, a
    recovery) first has the node granted the instance's reads, in every broker; one the
    grant fails for is not sent, and its reply says why. After an instance left a node (a
    migration's source released, an uninstall), what was granted to it there goes.
    """

    def __init__(self, broker: str | Mapping[str, str], client_id: str | None = None,
                 clock: TimeBase = UNDILATED,
                 credentials: tuple[str, str] | None = None, mqtt5: bool = True,
                 grants: Any = None) -> None:
        self.clock = clock
        self.grants = grants
        self._token = secrets.token_hex(4)
        # Each request names its reply topic, with the node's name in it (protocol.reply_topic).
        self.reply_topic = replies_filter(self._token)
        routes = {} if isinstance(broker, str) else dict(broker)
        addresses = [broker] if isinstance(broker, str) else list(dict.fromkeys(
            routes[node] for node in sorted(routes)))
        if not addresses:
            raise ValueError("a controller needs a broker address, or a node -> broker "
                             "address mapping naming at least one node")
        name = client_id or f"foglab-controller-{self._token}"
        self._sessions = {address: _Session(
            address, name if len(addresses) == 1 else f"{name}-{number}", self.reply_topic,
            self._on_message, credentials, mqtt5)
            for number, address in enumerate(addresses, start=1)}
        self._routes = routes
        first = self._sessions[addresses[0]]
        self.host, self.port = first.host, first.port
        self._client = first.client  # the first broker's, as with one broker
        self._lock = threading.Condition()
        self._waiting: dict[str, dict[str, Any]] = {}  # request id -> what the reply completes
        self._count = 0

    @classmethod
    def of_plan(cls, plan: Any, status: Mapping[str, Any], client_id: str | None = None,
                clock: TimeBase = UNDILATED, grants: Any = None) -> Controller:
        """A controller reaching every agent of a cluster's plan (emu.cluster.plan.ClusterPlan)
        through the broker routing gave it (`plan.brokers`), at its container's address
        (`status`: node -> its container's status, with `ip`). A closed cluster's controller
        makes the run's grants (`grants`: its engine's, emu.engines.base.Engine.grants)."""
        missing = sorted({b for b in plan.brokers.values() if b not in status})
        if missing:
            raise ValueError(f"cluster {plan.cluster}: no container status for broker "
                             f"{', '.join(missing)}")
        return cls({agent: f"{status[broker].ip}:{MQTT_PORT}"
                    for agent, broker in plan.brokers.items()}, client_id, clock,
                   tls_login(plan), plan.mqtt5, grants)

    @property
    def brokers(self) -> list[str]:
        """The addresses of the brokers the controller holds a session on."""
        return list(self._sessions)

    def broker_of(self, node: str) -> str:
        """The address through which a node's requests go."""
        return self._routes.get(node) or next(iter(self._sessions))

    def connect(self, timeout: float = CONNECT_TIMEOUT) -> Controller:
        deadline = time.monotonic() + timeout
        try:
            for session in self._sessions.values():
                session.connect()
            for session in self._sessions.values():
                if not session.subscribed.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"broker {session.address} did not confirm the reply "
                                       f"subscription within {timeout} s")
        except BaseException:
            self.close()
            raise
        return self

    @property
    def connections(self) -> int:
        return sum(session.connections for session in self._sessions.values())

    @property
    def reconnects(self) -> int:
        """Connections after each broker's first, over all brokers."""
        return sum(max(0, session.connections - 1) for session in self._sessions.values())

    def close(self) -> None:
        for session in self._sessions.values():
            with contextlib.suppress(Exception):  # one broker gone must not keep others open
                session.close()

    def __enter__(self) -> Controller:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        t_replied = self.clock.now()
        named = replier(message.topic)
        try:
            data = json.loads(message.payload)
            request_id, node = data["id"], data["node"]
        except (ValueError, KeyError, TypeError):
            return
        if named != (node, request_id):
            return  # a node answers for itself only, on the topic of the request it got
        with self._lock:
            waiting = self._waiting.get(request_id)
            if waiting is None:
                return  # an answer to a request given up on
            if waiting["node"] not in (None, node) or node in waiting["replies"]:
                return
            waiting["replies"][node] = Reply(node, bool(data.get("ok")), data.get("error"),
                                             waiting["t_sent"][waiting["node"]],
                                             t_replied, float(data.get("t", 0.0)),
                                             data.get("result"))
            self._lock.notify_all()

    def send(self, nodes: Iterable[str], command: str, args: dict[str, Any] | None = None,
             timeout: float = 10.0, broadcast: bool = False,
             gone: Callable[[], Iterable[str]] | None = None) -> CommandResult:
        """Send one command to every node and wait up to timeout (emulated s) for all replies.

        Each node gets its own request on its own topic, or with `broadcast` one request goes
        to all agents at once (foglab/mgmt/all/req) and the replies of `nodes` are awaited.
        `gone()` names nodes known dead (asked every GONE_POLL_S): the wait ends once every
        node has answered or is gone, and those are the result's `gone`.
        """
        nodes = list(dict.fromkeys(nodes))
        result = CommandResult(command, timeout=timeout)
        refused = self._grant(nodes, command, args or {})
        requests: list[tuple[str, str | None]] = []  # (request id, node or None for all)
        with self._lock:
            if broadcast:
                requests.append((self._new_id(), None))
            else:
                requests.extend((self._new_id(), node) for node in nodes
                                if node not in refused)
            collected: dict[str, Reply] = dict(refused)
            t_sent: dict[str | None, float] = {}
            for request_id, node in requests:
                self._waiting[request_id] = {"node": node, "replies": collected,
                                             "t_sent": t_sent}
        now = self.clock.now
        result.t_sent = now()
        for request_id, node in requests:
            reply = reply_topic(NODE_LEVEL if node is None else node, self._token, request_id)
            payload = Request(request_id, command, reply, args or {}).encode()
            t_sent[node] = now()
            if node is None:  # every agent hears its own broker only
                for session in self._sessions.values():
                    session.client.publish(ALL_REQUESTS, payload, qos=1)
            else:
                self._sessions[self.broker_of(node)].client.publish(
                    request_topic(node), payload, qos=1)
        deadline = time.monotonic() + self.clock.host_seconds(timeout)
        wanted = set(nodes)
        dead: set[str] = set()
        with self._lock:
            while not wanted <= set(collected) | dead:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if gone is None:
                    self._lock.wait(left)
                    continue
                self._lock.wait(min(left, GONE_POLL_S))
                if not wanted <= set(collected):
                    self._lock.release()  # gone() may be slow (the engine's API)
                    try:
                        dead = set(gone()) & wanted
                    finally:
                        self._lock.acquire()
            for request_id, _ in requests:
                del self._waiting[request_id]
            result.replies = dict(collected)
        result.t_finished = now()
        result.missing = [node for node in nodes if node not in result.replies]
        result.gone = [node for node in result.missing if node in dead]
        self._left([n for n, r in result.replies.items() if r.ok], command, args or {})
        return result

    def _grant(self, nodes: list[str], command: str, args: dict[str, Any]
               ) -> dict[str, Reply]:
        """Before a request that starts an instance on each node: its reads granted there
        (`grants`); the nodes it failed for, with a failed reply saying why."""
        if self.grants is None:
            return {}
        from emu.cluster.grants import GrantError

        try:  # one grant for every node of the request: one ACL, one reload of each broker
            self.grants.before_all(nodes, command, args)
        except GrantError as error:
            now = self.clock.now()
            return {node: Reply(node, False, f"not granted its reads: {error}", now, now, now)
                    for node in nodes}
        return {}

    def _left(self, nodes: list[str], command: str, args: dict[str, Any]) -> None:
        """After a request that ended an instance on each node: its run-time grants go; a
        failure only logged (the node keeps reading what it was granted)."""
        if self.grants is None:
            return
        from emu.cluster.grants import GrantError

        try:
            self.grants.after_all(nodes, command, args)
        except GrantError as error:
            logging.getLogger(__name__).warning("%s: grants not revoked: %s",
                                                ", ".join(nodes), error)

    def _new_id(self) -> str:
        self._count += 1
        return f"{self._token}-{self._count}"

    # The commands -------------------------------------------------------------------------------

    def ping(self, nodes: Iterable[str], timeout: float = 10.0) -> CommandResult:
        return self.send(nodes, "ping", timeout=timeout)

    def install(self, nodes: Iterable[str], operator: OperatorConfig | dict[str, Any],
                timeout: float = 10.0) -> CommandResult:
        args = asdict(operator) if isinstance(operator, OperatorConfig) else dict(operator)
        return self.send(nodes, "install", args, timeout)

    def update(self, nodes: Iterable[str], operator: str, params: dict[str, Any],
               timeout: float = 10.0) -> CommandResult:
        return self.send(nodes, "update", {"operator": operator, "params": params}, timeout)

    def uninstall(self, nodes: Iterable[str], operator: str,
                  timeout: float = 10.0) -> CommandResult:
        return self.send(nodes, "uninstall", {"operator": operator}, timeout)

    def start(self, nodes: Iterable[str], operator: str, timeout: float = 10.0) -> CommandResult:
        return self.send(nodes, "start", {"operator": operator}, timeout)

    def stop(self, nodes: Iterable[str], operator: str, timeout: float = 10.0) -> CommandResult:
        return self.send(nodes, "stop", {"operator": operator}, timeout)

    def set_rate(self, nodes: Iterable[str], rate: float, stream: str | None = None,
                 timeout: float = 10.0,
                 gone: Callable[[], Iterable[str]] | None = None) -> CommandResult:
        args: dict[str, Any] = {"key": "publish.rate", "value": rate}
        if stream is not None:
            args["stream"] = stream
        return self.send(nodes, "set", args, timeout, gone=gone)


def wait_registered(zk_hosts: str, nodes: Iterable[str], timeout: float = 60.0,
                    check: Callable[[], None] | None = None,
                    kazoo: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Wait until every node's /iot/gateways/<node> exists; their registration data.

    A children watch on /iot/gateways wakes this up at each change, no polling. A
    TimeoutError names the nodes still missing. A ZooKeeper busy with hundreds of
    registrations may drop this watcher's connection or session: its calls are retried, and
    the watch starts again, until the timeout. `check()`, called every CHECK_S while waiting,
    may raise to give up early (an agent whose container exited will never register).
    `kazoo`: the session's further options (a closed cluster's identity and ACL,
    emu.cluster.access.kazoo_options).
    """
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    wanted = set(nodes)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return _watch_registrations(zk_hosts, wanted, deadline, timeout, check,
                                        dict(kazoo or {}))
        except (KazooException, KazooTimeoutError):
            if time.monotonic() > deadline:
                raise


def _watch_registrations(zk_hosts: str, wanted: set[str], deadline: float,
                         timeout: float, check: Callable[[], None] | None = None,
                         kazoo: dict[str, Any] | None = None
                         ) -> dict[str, dict[str, Any]]:
    from kazoo.client import KazooClient
    from kazoo.recipe.watchers import ChildrenWatch

    done = threading.Event()
    present: set[str] = set()

    def changed(children: list[str]) -> bool:
        present.clear()
        present.update(children)
        if wanted <= present:
            done.set()
            return False  # stop watching
        return True

    client = KazooClient(hosts=zk_hosts, timeout=10.0,
                         command_retry={"max_tries": 5, "delay": 0.5, "max_delay": 5.0},
                         **(kazoo or {}))
    client.start(timeout=max(1.0, deadline - time.monotonic()))
    try:
        client.retry(client.ensure_path, GATEWAYS)
        ChildrenWatch(client, GATEWAYS, changed)
        while not done.wait(min(CHECK_S, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() < deadline:
                if check is not None:
                    check()
                continue
            missing = sorted(wanted - present)
            raise TimeoutError(f"{len(missing)} of {len(wanted)} nodes not registered in "
                               f"ZooKeeper after {timeout} s: {', '.join(missing)}")
        registered = {}
        for node in sorted(wanted):
            data, _ = client.retry(client.get, gateway_path(node))
            registered[node] = json.loads(data) if data else {}
        return registered
    finally:
        client.stop()
        client.close()
