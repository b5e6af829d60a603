"""A node's agent: drivers and operators on one scheduler, wired to the broker and ZooKeeper."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from emu.agent.broadcast import Broadcasts, node_filter
from emu.agent.brokers import OtherBroker
from emu.agent.checkpoint import Checkpoints
from emu.agent.config import AgentConfig, DriverConfig
from emu.agent.drivers import Driver, Drivers
from emu.agent.input_session import InputSession
from emu.agent.management import Management
from emu.agent.migration import Migrations
from emu.agent.mqtt import (
    KEEPALIVE,
    connect_persistent,
    connected,
    end_session,
    new_client,
    no_delay,
    session_present,
)
from emu.agent.operators import Operator
from emu.agent.parts import AgentSurface
from emu.agent.protocol import (
    ALL_REQUESTS,
    Envelope,
    incarnation_sequence,
    load_topic,
    request_topic,
    stream_topic,
)
from emu.agent.records import Records
from emu.agent.registry import Registration, sensor_znodes
from emu.agent.scheduler import Scheduler
from emu.agent.spark_processes import SparkProcesses
from emu.agent.subscriptions import Subscriptions
from workloads.operator_engines import operator_engine

# Operators feeding each other in a ring on one node would pass a message round for ever.
MAX_HOPS = 32


class Agent(AgentSurface):
    """Runs one node of an emulated run from its AgentConfig; its parts (requests, migrations,
    checkpoints, brokers, broadcasts) see it as an AgentSurface (emu.agent.parts).

    Everything that touches drivers, operators and records runs on the scheduler's thread;
    the MQTT client's thread only hands messages and requests over. A message the node
    publishes goes in-process to the node's running operators that read its topic (a local
    read, as in the simulator); a driver's message goes to the broker only when no local
    operator took it (or the driver `forward`s), an operator's output always. Copies of the
    node's own messages coming back from the broker are ignored, so nothing is read twice.
    The readings of the node's simulated devices (drivers with `load`: the hybrid backend's
    load generator emits them on the host) come in batches on the node's load topic and go
    on exactly as its drivers' messages do.

    The broker session is persistent (a fixed client id, MQTT 5 with a session expiry): paho
    reconnects after a dropped connection or a broker restart, resends the QoS 1 messages not
    yet acknowledged, and the broker delivers what it queued for the node meanwhile; QoS 0
    messages of the outage are lost, as MQTT allows. An operator's outputs go at the QoS of
    its inputs (a window's at the highest it took), so a stream that asks for QoS 1 keeps it
    past the operators.
    """

    def __init__(self, config: AgentConfig, clock: Callable[[], float] | None = None) -> None:
        self.config = config
        self.node = config.node
        self._set_up_time(clock)
        self._set_up_drivers()
        self._set_up_operators()
        self._set_up_routing()
        self._set_up_moves()
        self.description = self._describe()
        self.management = Management(self)
        self._set_up_mqtt()
        self._set_up_registration()

    def _set_up_time(self, clock: Callable[[], float] | None) -> None:
        """The clock, the run's epoch and the scheduler everything else is set on."""
        config = self.config
        # The run's emulated clock (emu.agent.timebase; the host's at dilation 1): the drivers'
        # schedules, windows and records run on it, the scheduler waits K host seconds for one.
        self.timebase = config.timebase()
        self.clock = clock = clock or self.timebase.now
        self.started = clock()
        # No epoch given: the run starts when the agent does.
        self.epoch = config.epoch or self.started
        self.arch = os.uname().machine  # platform.machine(), without importing platform
        self.scheduler = Scheduler(clock, self.timebase.dilation)

    def _set_up_drivers(self) -> None:
        """The records, the node's drivers and its simulated devices (the load topic's)."""
        config, clock = self.config, self.clock
        at = self.scheduler.at
        self.records = Records(config.records, at, clock)
        self.drivers = Drivers([d for d in config.drivers if not d.load], self.node,
                               config.index, config.seed, self.epoch, at, clock,
                               self._from_driver, self.records.sent,
                               incarnation_sequence(config.incarnation))
        # Simulated devices (the host emits them): (stream, device) -> their driver's config.
        self.load: dict[tuple[str, str], DriverConfig] = {
            (d.stream, device): d for d in config.drivers if d.load for device in d.devices}
        self._load_topic = load_topic(self.node) if self.load else None

    def _set_up_operators(self) -> None:
        """The node's operators (an `engine: spark` job's a passthrough beside its SparkJob)
        and this VM's Spark processes."""
        config = self.config
        self.operators: dict[str, Operator] = {}
        self.spark = SparkProcesses(config)  # its jobs and its cluster daemon, if any
        self.spark_jobs = self.spark.jobs  # by work directory (emu.agent.spark)
        for operator_config in config.operators:
            if not operator_engine(operator_config.engine).in_agent:  # a job beside it
                operator_config = self.spark.job_beside(operator_config)
            operator = Operator(operator_config, self.node, self.epoch)
            if operator.name in self.operators:
                raise ValueError(f"node {self.node}: two operators are named {operator.name!r}")
            self.operators[operator.name] = operator

    def _set_up_routing(self) -> None:
        """What routes the broker's messages: the node's own topics, readers, subscriptions,
        and the counts of what was dropped on the way."""
        # Topics this node publishes on: their copies from the broker are its own echo.
        self._own_topics = self.drivers.topics | {
            op.out_topic for op in self.operators.values() if op.out_topic} | {
            stream_topic(stream, self.node, device, d.channel)
            for (stream, device), d in self.load.items()}
        self._readers: dict[str, tuple[Operator, ...]] = {}
        # The node session's filters, their identifiers, the copy taken of each message.
        self.subscriptions = Subscriptions()
        self.unreadable = 0   # broker messages that were no envelope
        self.unpublished = 0  # QoS 0 publishes the client refused (not connected)
        # Instances stopped because another took their session over (emu.agent.input_session's
        # fence): operator -> when, on the agent's clock.
        self.fenced: dict[str, float] = {}
        self.looped = 0       # outputs dropped after MAX_HOPS operators
        self.loaded = 0       # simulated devices' readings taken from the load topic

    def _set_up_moves(self) -> None:
        """The movable instances' sessions, the migrations that move them, the checkpoints."""
        config = self.config
        # Instances reading through a session of their own (emu.agent.input_session): movable.
        self.sessions: dict[str, InputSession] = {
            name: InputSession(self, op) for name, op in self.operators.items()
            if op.config.session}
        if config.kind == "cloud_vm":
            # Spark queries move between cloud VMs; a gateway never loads emu.agent.spark (it
            # starts child processes, and an idle gateway pays for each module it imports).
            from emu.agent.spark import SparkMigrations

            self.migrations: Migrations = SparkMigrations(self)
        else:
            self.migrations = Migrations(self)
        self.checkpoints = Checkpoints(self)

    def _set_up_mqtt(self) -> None:
        """The node's broker session (not connected yet: `start`), its sessions on other
        brokers to be, the broadcasts and the requests' subscription."""
        self.client = new_client(f"foglab-agent-{self.node}", persistent=True)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        # Moved to a spare broker (emu.agent.brokers): the drivers' session there; every
        # session on a spare, the readers' too (closed at the stop).
        self.drivers_client: Any = None
        self.spare_sessions: list = []
        # Its operators' sessions on the run's other brokers (emu.agent.brokers.OtherBroker).
        self.other_brokers: list = []
        self.connections = 0  # CONNACKs: 1 + reconnections
        self._stopping = False
        self._qos: dict[str, int] = {}  # operator -> the highest QoS of its inputs so far
        self.client.on_message = self.on_node_message
        self.client.on_subscribe = self._on_subscribe
        self.broadcasts = Broadcasts(self)  # scenario.broadcasts' messages (emu.agent.broadcast)
        self._requests = request_topic(self.node)
        self._requests_mid = -1
        self._operators_mids: set[int] = set()
        self.ready = threading.Event()
        self._node_subscribed = False

    def _set_up_registration(self) -> None:
        """The node's ZooKeeper registration and its sensors' znodes, if the run has one."""
        config = self.config
        self.registration: Registration | None = None
        if config.zookeeper:
            self.registration = Registration(config.zookeeper, self.node,
                                             self.host_seconds(config.session_timeout),
                                             lambda: self.description,
                                             sensor_znodes(self.node, self.drivers.all))
            if config.fence:
                self.registration.on_expired = lambda: self.scheduler.call(self._expired)

    # Time ------------------------------------------------------------------------------------

    def host_seconds(self, emulated_s: float) -> float:
        """An emulated span on the host's clock: what a timeout the agent sets on a real
        service (paho, ZooKeeper) or waits for on a thread is given."""
        return self.timebase.host_seconds(emulated_s)

    @property
    def keepalive(self) -> int:
        """Every MQTT session's keepalive (s), KEEPALIVE emulated seconds: at dilation K the
        broker hears a ping every K * KEEPALIVE host seconds (MQTT allows at most 65535)."""
        return min(65535, round(self.host_seconds(KEEPALIVE)))

    # Life -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the scheduler and connect to the broker; neither it nor ZooKeeper need be up
        yet. Once the node hears requests, its drivers start and it registers in ZooKeeper:
        a registered node can be managed."""
        self.scheduler.start(f"foglab-{self.node}")
        self.spark.start()  # a cluster's daemons and drivers not on this thread
        connect_persistent(self.client, self.config.mqtt, self.keepalive)
        for session in self.sessions.values():
            session.connect()
        if self.config.other_brokers and self.session_filters():
            self.other_brokers = [OtherBroker(self, broker, address) for broker, address
                                  in sorted(self.config.other_brokers.items())]

    def stop(self, timeout: float = 2.0) -> bool:
        """Stop emitting, flush the records, leave ZooKeeper and the broker, within timeout
        (the records first: they are what a run keeps). False if the scheduler was stuck."""
        deadline = time.monotonic() + timeout
        self._stopping = True
        stopped = self.scheduler.stop(timeout=timeout / 2)
        self.records.close()
        if self.registration is not None:
            self.registration.close(timeout=max(0.1, deadline - time.monotonic() - 0.2))
        self.client.disconnect(properties=end_session())
        self.client.loop_stop()
        for moved in [*self.spare_sessions, *self.other_brokers]:
            moved.close()
        for session in list(self.sessions.values()):
            session.close()
        self.migrations.close()
        self.checkpoints.close()
        self.spark.stop()
        return stopped

    # MQTT client's thread ---------------------------------------------------------------------

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, *rest: Any) -> None:
        if not connected(rc):
            print(f"foglab agent {self.node}: broker refused the connection: {rc}",
                  file=sys.stderr, flush=True)
            return
        self.connections += 1
        if self.connections > 1:
            resumed = "resumed" if session_present(flags) else "new (the broker lost it)"
            print(f"foglab agent {self.node}: reconnected to the broker, session {resumed}",
                  file=sys.stderr, flush=True)
        no_delay(client)
        # Also when the session resumed: a broker that lost its database forgot them.
        wanted = [(self._requests, 1), (ALL_REQUESTS, 1), (node_filter(self.node), 1)]
        if self._load_topic is not None:  # subscribed with the requests: before any epoch
            wanted.append((self._load_topic, 1))
        _, self._requests_mid = client.subscribe(wanted)

    def _on_disconnect(self, client: Any, userdata: Any, *rest: Any) -> None:
        if not self._stopping:
            print(f"foglab agent {self.node}: lost the broker; reconnecting", file=sys.stderr,
                  flush=True)

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, *rest: Any) -> None:
        # Compared on the scheduler's thread, after _on_ready has noted its subscription's mid.
        self.scheduler.call(self._acknowledged, mid)

    def on_node_message(self, client: Any, userdata: Any, message: Any) -> None:
        """paho's on_message of the node's session (and of its readers' on a spare broker):
        a request, a batch of the simulated devices' readings, or a message for operators."""
        topic = message.topic
        if topic == ALL_REQUESTS or topic == self._requests:
            self.management.received(message.payload)
        elif topic == self._load_topic:
            self.scheduler.call(self._from_load, message.payload)
        else:
            copy_of = getattr(getattr(message, "properties", None), "SubscriptionIdentifier",
                              None)
            self.scheduler.call(self._from_broker, topic, message.payload, message.qos,
                                copy_of)

    # Scheduler thread -------------------------------------------------------------------------

    def _acknowledged(self, mid: int) -> None:
        if mid == self._requests_mid:
            self._on_ready()
        elif mid in self._operators_mids:
            self._operators_mids.discard(mid)
            if not self._operators_mids:
                self._on_operators_subscribed()

    def _on_ready(self) -> None:
        """The broker passes requests on to the node now: (re)subscribe its operators, and
        wait for the broker to confirm them too."""
        self.subscriptions.forget()  # subscribed again: a broker that lost its state forgot them
        self._operators_mids = self._subscribe()
        if not self._operators_mids:
            self._on_operators_subscribed()

    def _on_operators_subscribed(self) -> None:
        self._node_subscribed = True
        self.session_ready()

    def session_ready(self) -> None:
        """The broker passes the operators' topics on, through the node's session and the
        instances' own: start the drivers; the first time, register. `ready` is set only now:
        a message published after it reaches the operators (before, the broker could pass it
        on before their subscriptions)."""
        if not self._node_subscribed:
            return
        if not all(s.subscribed.is_set() for s in self.sessions.values()):
            return
        if not all(other.ready for other in self.other_brokers):
            return
        if not self.config.hold and not self.drivers.started:
            self._start_drivers()
        if self.registration is not None and not self.ready.is_set():
            self.registration.start()
        self.ready.set()

    def _subscribe(self) -> set[int]:
        """Make the broker subscriptions those of the running operators; the new
        subscriptions' message ids (one SUBSCRIBE each: an id names a whole packet)."""
        wanted = self.session_filters()
        if not self.client.is_connected():
            return set()
        return self.subscriptions.follow(self.client, wanted, self.other_brokers)

    def session_filters(self) -> set[str]:
        """The filters the running operators read through the node's session (not those of
        instances reading through sessions of their own)."""
        return {f for op in self.operators.values()
                if op.running and op.name not in self.sessions for f in op.filters}

    def _readers_of(self, topic: str) -> tuple[Operator, ...]:
        readers = self._readers.get(topic)
        if readers is None:
            readers = self._readers[topic] = tuple(
                op for op in self.operators.values()
                if op.running and op.name not in self.sessions and op.reads(topic))
        return readers

    def _from_driver(self, topic: str, envelope: Envelope, driver: Driver) -> None:
        self._arrived(topic, envelope, driver.config)

    def _arrived(self, topic: str, envelope: Envelope, config: DriverConfig) -> None:
        """A device's message past its access link, at this node."""
        readers = self._readers_of(topic)
        for operator in readers:
            self._take(operator, envelope, config.qos)
        if not readers or config.forward:
            self._publish(topic, envelope, config.qos, self.drivers_client)

    def _from_load(self, payload: bytes) -> None:
        """A batch of the simulated devices' readings (protocol.load_batch), each past its
        access link (the generator held it there): on as the drivers' own go."""
        for line in payload.split(b"\n"):
            try:
                envelope = Envelope.decode(line)
            except ValueError:
                self.unreadable += 1
                continue
            config = self.load.get((envelope.stream, envelope.src))
            if config is None:  # not a simulated device of this node
                self.unreadable += 1
                continue
            self.loaded += 1
            self._arrived(stream_topic(config.stream, self.node, envelope.src, config.channel),
                          envelope, config)

    def _from_broker(self, topic: str, payload: bytes, qos: int = 0,
                     copy_of: list[int] | None = None) -> None:
        if topic in self._own_topics:
            return  # this node's own message, read locally when it was published
        if copy_of and self.subscriptions.another_copy(topic, copy_of):
            return
        try:
            envelope = Envelope.decode(payload)
        except ValueError:
            self.unreadable += 1
            return
        for operator in self._readers_of(topic):
            self._take(operator, envelope, qos)

    def take(self, operator: Operator, envelope: Envelope, qos: int = 0,
             record: bool = True) -> None:
        """One input for the operator (its own session's, emu.agent.migration); a sink notes
        its arrival unless `record` is false (a parallel migration's target, whose input the
        source has on record)."""
        self._take(operator, envelope, qos, record)

    def emit(self, operator: Operator, output: Envelope, qos: int | None = None) -> None:
        """An output of the operator that leaves as its own do (a parallel migration's
        checker forwarding a window output, emu.agent.parallel)."""
        self._from_operator(operator, output, self._qos.get(operator.name, 0) if qos is None
                            else qos)

    def _take(self, operator: Operator, envelope: Envelope, qos: int = 0,
              record: bool = True) -> None:
        now = self.clock()
        if qos > self._qos.get(operator.name, 0):
            self._qos[operator.name] = qos
        if operator.sink and record:
            self.records.received(envelope.id, envelope.stream, envelope.src, self.node,
                                  envelope.t, now, envelope.hops,
                                  now=operator.config.checkpoint is not None)
        outputs = operator.take(envelope, now)
        if operator.delays is not None:  # its latency bound's measure (OperatorConfig.slo)
            operator.delays.append(self.clock() - envelope.t)
        window = operator.window
        if window is not None and window.count and not window.armed:
            window.armed = True
            self.scheduler.at(window.end, self._window_ends, operator, operator.token)
        for output in outputs:
            self._from_operator(operator, output, qos)

    def _window_ends(self, operator: Operator, token: int) -> None:
        window = operator.window
        if token != operator.token or window is None:
            return  # the operator stopped or went; start sets the timer again
        window.armed = False
        qos = self._qos.get(operator.name, 0)
        for output in window.close(self.clock(), operator.name, self.node):
            self._from_operator(operator, output, qos)
        if window.count:  # counted on into a later window before the timer rang
            window.armed = True
            self.scheduler.at(window.end, self._window_ends, operator, token)

    def _from_operator(self, operator: Operator, output: Envelope, qos: int = 0) -> None:
        topic = operator.out_topic
        if topic is None:
            return  # a sink's window outputs go nowhere
        if output.hops > MAX_HOPS:
            self.looped += 1
            return
        for reader in self._readers_of(topic):
            if reader is not operator:
                self._take(reader, output, qos)
        self._publish(topic, output, qos)

    def _publish(self, topic: str, envelope: Envelope, qos: int, client: Any = None) -> None:
        info = (client or self.client).publish(topic, envelope.encode(), qos)
        if info.rc != 0 and qos == 0:  # paho keeps a QoS 1 message for the reconnection
            self.unpublished += 1

    # Changes by management (scheduler thread) ---------------------------------------------------

    def begin(self, epoch: float) -> None:
        """Start the drivers of a held node at the run's epoch, and align windows on it."""
        if self.drivers.started:
            raise ValueError("the run has begun already")
        self.epoch = self.drivers.epoch = epoch
        for operator in self.operators.values():
            if operator.window is not None:
                operator.window.epoch = epoch
        self._start_drivers()

    def _start_drivers(self) -> None:
        """The devices start emitting, and the instances' checkpoints on the run's grid."""
        self.drivers.start()
        for operator in self.operators.values():
            self.checkpoints.arm(operator)

    def operator(self, name: str) -> Operator:
        return self._operator(name)

    def arm(self, operator: Operator) -> None:
        """Set the window timer of an operator that starts with open windows (restored), and
        its checkpoints' timer."""
        self.checkpoints.arm(operator)
        window = operator.window
        if operator.running and window is not None and window.count and not window.armed:
            window.armed = True
            self.scheduler.at(window.end, self._window_ends, operator, operator.token)

    def _operator(self, name: str) -> Operator:
        operator = self.operators.get(name)
        if operator is None:
            installed = ", ".join(sorted(self.operators)) or "none"
            raise ValueError(f"unknown operator {name!r}; installed: {installed}")
        return operator

    def _changed(self) -> None:
        self._readers.clear()
        self._subscribe()
        self.description = self._describe()
        if self.registration is not None:
            self.registration.update()

    def install(self, operator: Operator) -> None:
        if operator.name in self.operators:
            raise ValueError(f"operator {operator.name!r} is installed already; update or "
                             "uninstall it")
        self.operators[operator.name] = operator
        if operator.out_topic:
            self._own_topics.add(operator.out_topic)
        if operator.config.session:
            session = self.sessions.get(operator.name)
            if session is None:
                session = self.sessions[operator.name] = InputSession(self, operator)
            session.connect()
        self._changed()

    def update(self, name: str, params: dict[str, Any]) -> None:
        operator = self._operator(name)
        try:
            stage, merged = operator.restaged(params)
        except ValueError as error:
            raise ValueError(f"operator {name!r}: {error}") from None
        operator.stage = stage
        operator.config.params = merged
        self._changed()

    def uninstall(self, name: str) -> None:
        operator = self._operator(name)
        operator.running = False
        operator.token += 1
        del self.operators[name]
        session = self.sessions.pop(name, None)
        if session is not None:
            threading.Thread(target=session.close, daemon=True).start()
        self._changed()

    def _expired(self) -> None:
        """The node's ZooKeeper session expired: the host took it for dead and re-places its
        instances that read through a session of their own (AgentConfig.fence)."""
        for name, session in list(self.sessions.items()):
            if isinstance(session, InputSession) and name in self.operators:
                session.fence()

    def set_running(self, name: str, running: bool) -> None:
        operator = self._operator(name)
        if operator.running == running:
            return
        operator.running = running
        operator.token += 1
        window = operator.window
        if window is not None:
            window.armed = False
            if running and window.count:
                window.armed = True
                self.scheduler.at(window.end, self._window_ends, operator, operator.token)
        if running:
            self.checkpoints.arm(operator)
        self._changed()

    # What the node tells ------------------------------------------------------------------------

    def _describe(self) -> bytes:
        """The gateway znode's data (its incarnation tells the host's failure detector an
        old start's loss from this one's: emu.features.recovery)."""
        return json.dumps({
            "kind": self.config.kind, "arch": self.arch, "pid": os.getpid(),
            "incarnation": self.config.incarnation,
            "started": self.started, "mqtt": self.config.mqtt,
            "operators": {name: {"task": op.config.task, "running": op.running}
                          for name, op in self.operators.items()},
        }, separators=(",", ":")).encode()

    def published_on(self, topic: str) -> None:
        """A device that joined publishes on `topic` from here: the broker's copies are echo."""
        self._own_topics.add(topic)

    def status(self) -> dict[str, Any]:
        """What a ping answers: the node's operators, rates and counts."""
        return {
            "kind": self.config.kind, "arch": self.arch, "pid": os.getpid(),
            "operators": {name: op.status() for name, op in self.operators.items()},
            "rates": {stream: d.rate for stream, d in self.drivers.by_stream.items()},
            "sent": self.records.sent_count, "received": self.records.received_count,
            "sent_by_stream": dict(self.records.sent_by_stream),
            "unreadable": self.unreadable, "unpublished": self.unpublished,
            "fenced": dict(self.fenced),
            "loaded": self.loaded,
        }
