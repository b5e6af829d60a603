"""A node's agent: drivers and operators on one scheduler, wired to the broker and ZooKeeper."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from emu.agent.broadcast import Broadcasts, node_filter
from emu.agent.checkpoint import Checkpoints
from emu.agent.config import AgentConfig, DriverConfig, local_address
from emu.agent.drivers import Driver, Drivers
from emu.agent.management import Management
from emu.agent.migration import InputSession, Migrations
from emu.agent.mqtt import (
    RECONNECT_DELAYS_S,
    connected,
    end_session,
    new_client,
    no_delay,
    session_args,
    session_present,
)
from emu.agent.operators import Operator
from emu.agent.protocol import (
    ALL_REQUESTS,
    Envelope,
    incarnation_sequence,
    load_topic,
    matches,
    request_topic,
    stream_topic,
)
from emu.agent.records import Records
from emu.agent.registry import Registration, sensor_path
from emu.agent.scheduler import Scheduler
from workloads.operator_engines import operator_engine

if TYPE_CHECKING:
    from emu.agent.spark import SparkJob

KEEPALIVE = 30
# Operators feeding each other in a ring on one node would pass a message round for ever.
MAX_HOPS = 32


def broker_address(address: str) -> tuple[str, int]:
    host, _, port = local_address(address).rpartition(":")
    if not host:
        return address, 1883
    return host.strip("[]"), int(port)


class Agent:
    """Runs one node of an emulated run from its AgentConfig.

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
        and this VM's Spark daemon."""
        config = self.config
        self.operators: dict[str, Operator] = {}
        self.spark_jobs: dict[str, SparkJob] = {}  # by work directory (emu.agent.spark)
        # This VM's part of a Spark standalone cluster (emu.agent.spark_cluster), if any.
        self.spark_daemon = None
        if config.spark:
            from emu.agent.spark_cluster import SparkDaemon, spark_role

            self.spark_daemon = SparkDaemon(spark_role(config.spark, self.node), config.records)
        for operator_config in config.operators:
            if not operator_engine(operator_config.engine).in_agent:  # a job beside it
                from emu.agent.spark import SparkJob  # subprocess: only nodes running Spark

                # The job reads through a session of its own; the agent records arrivals.
                self.spark_jobs[operator_config.name] = SparkJob(
                    operator_config, self.node, config.mqtt,
                    config.spark_work or config.records, len(os.sched_getaffinity(0)),
                    dilation=config.dilation, master=config.spark_master or None,
                    driver_host=self.node if config.spark_master else None)
                operator_config = replace(operator_config, engine="python", task="passthrough",
                                          params={}, writes=None)
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
        self._subscribed: set[str] = set()
        # MQTT 5 brokers send a client one copy of a message per subscription that matches
        # it (x/+ and x/#); each subscription gets an id and one copy is taken: that of the
        # lowest id that matches the topic (per topic, cached until the subscriptions change).
        self._subscription_ids: dict[str, int] = {}
        self._taken_copy: dict[str, int] = {}
        self.unreadable = 0   # broker messages that were no envelope
        self.unpublished = 0  # QoS 0 publishes the client refused (not connected)
        # Instances stopped because another took their session over (emu.agent.migration's
        # fence): operator -> when, on the agent's clock.
        self.fenced: dict[str, float] = {}
        self.looped = 0       # outputs dropped after MAX_HOPS operators
        self.loaded = 0       # simulated devices' readings taken from the load topic

    def _set_up_moves(self) -> None:
        """The movable instances' sessions, the migrations that move them, the checkpoints."""
        config = self.config
        # Instances reading through a session of their own (emu.agent.migration): movable.
        self.sessions: dict[str, InputSession] = {
            name: InputSession(self, op) for name, op in self.operators.items()
            if op.config.session}
        if config.kind == "cloud_vm":
            from emu.agent.spark import SparkMigrations  # Spark queries move between cloud VMs

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
        self.client.on_message = self._on_message
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
            sensors = [(sensor_path(driver.stream, device.name, device.topic),
                        json.dumps({"node": self.node, "topic": device.topic,
                                    "qos": driver.config.qos}).encode())
                       for driver in self.drivers.all
                       for device in driver.devices]
            self.registration = Registration(config.zookeeper, self.node,
                                             self.host_seconds(config.session_timeout),
                                             lambda: self.description, sensors)
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
        if self.spark_daemon is not None or self.config.spark_master:
            # A cluster's daemons come up in their own time (the master first), its drivers
            # once the master answers: not on this thread, which connects to the broker.
            threading.Thread(target=self._start_spark_cluster, name="foglab-spark",
                             daemon=True).start()
        else:
            for job in self.spark_jobs.values():
                job.start()
        host, port = broker_address(self.config.mqtt)
        self.client.reconnect_delay_set(*RECONNECT_DELAYS_S)
        self.client.connect_async(host, port, keepalive=self.keepalive, **session_args())
        self.client.loop_start()
        for session in self.sessions.values():
            session.connect()
        if self.config.other_brokers and self.session_filters():
            from emu.agent.brokers import OtherBroker

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
        for job in self.spark_jobs.values():
            job.stop()
        if self.spark_daemon is not None:
            self.spark_daemon.stop()
        return stopped

    def _start_spark_cluster(self) -> None:
        from emu.agent.spark_cluster import wait_master

        try:
            if self.spark_daemon is not None:
                self.spark_daemon.start()
            if self.spark_jobs:
                wait_master(self.config.spark_master)
        except (OSError, RuntimeError, TimeoutError) as error:
            # The host sees the jobs not start (emu.run.spark_jobs names them and their logs).
            print(f"foglab agent {self.node}: Spark cluster: {error}", file=sys.stderr,
                  flush=True)
            return
        for job in self.spark_jobs.values():
            job.start()

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

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
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
        self._subscribed.clear()  # subscribed again: a broker that lost its state forgot them
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
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        wanted = self.session_filters()
        if not self.client.is_connected():
            return set()
        new, gone = wanted - self._subscribed, self._subscribed - wanted
        mids = set()
        for topic_filter in sorted(new):
            properties = Properties(PacketTypes.SUBSCRIBE)
            properties.SubscriptionIdentifier = self.subscription_id(topic_filter)
            mids.add(self.client.subscribe(topic_filter, 1, properties=properties)[1])
        if gone:
            self.client.unsubscribe(sorted(gone))
        for other in self.other_brokers:
            other.follow(new, gone)
        self._subscribed = wanted
        self._taken_copy.clear()
        return mids

    def session_filters(self) -> set[str]:
        """The filters the running operators read through the node's session (not those of
        instances reading through sessions of their own)."""
        return {f for op in self.operators.values()
                if op.running and op.name not in self.sessions for f in op.filters}

    def subscription_id(self, topic_filter: str) -> int:
        """A filter's subscription identifier, the same on every session of the node."""
        return self._subscription_ids.setdefault(topic_filter, len(self._subscription_ids) + 1)

    def _another_copy(self, topic: str, copy_of: list[int]) -> bool:
        """Whether this message is the copy of a subscription other than the one taken."""
        taken = self._taken_copy.get(topic)
        if taken is None:
            taken = self._taken_copy[topic] = min(
                (self._subscription_ids[f] for f in self._subscribed if matches(f, topic)),
                default=0)
        return taken != 0 and taken not in copy_of

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
        if copy_of and self._another_copy(topic, copy_of):
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
        from emu.agent.migration import InputSession

        for name, session in list(self.sessions.items()):
            if isinstance(session, InputSession) and name in self.operators:
                self.fence(name, session)

    def fence(self, name: str, session: Any) -> None:
        """The fence: the instance leaves its input session without ending it (a half-close:
        what the broker sent before is processed here, the rest it holds for the instance the
        host re-placed), then goes; said on stderr and in `status`."""
        self.fenced[name] = self.clock()
        print(f"foglab agent {self.node}: its ZooKeeper session expired at "
              f"{self.fenced[name]:.3f} (taken for dead): {name} stops here (fenced)",
              file=sys.stderr, flush=True)

        def drained() -> None:
            if self.sessions.get(name) is not session or name not in self.operators:
                return
            operator = self.operators.pop(name)
            operator.running = False
            operator.token += 1
            del self.sessions[name]
            threading.Thread(target=session.stop_loop, daemon=True).start()
            self._changed()

        session.pause(drained)

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
            "unreadable": self.unreadable, "unpublished": self.unpublished,
            "fenced": dict(self.fenced),
            "loaded": self.loaded,
        }
