"""Broker scaling at run time on the emulation (`scenario.broker_scaling`; workloads.
broker_scaling says what is measured and how the controller decides, for the model too).

A spare broker runs from the start, idle, as a warm standby VM would (emu.cluster.plan: no
agent takes it, every agent of the broker it backs has a link to it); it "joins" when the
broker's readers subscribe there too and publishers move to it, so the spare hands the moved
readings to the readers itself and the watched broker carries them no more (no bridge: one
would route them through the watched broker again). The host is the controller, on a
thread of its own while the run measures, per entry:

- Probe: once in every `probe` seconds from the epoch, at a random moment of the slot, it
  publishes a 64 B QoS 0 message to the watched broker and takes its delay until the broker
  sends it back on the same client's subscription. Random, not on a grid: a broker at its
  CPU limit runs in bursts of the kernel's 100 ms CFS period, and probes every 100 ms on a
  grid met it at one moment of that period each time, all in a burst (9 ms) or all in a
  stall (100 ms) for seconds on end (a CI run never saw two figures over the bound in a row
  from a broker throttled all the time, its readings 4 s late). The host is the monitor,
  outside the emulated links: its client talks to the broker container's own address on its
  Docker network, so the delay is the broker's queue and service (and the bridge network's
  and the host's own scheduling, sub-millisecond on an idle host), not a topology path.
- Figure: at each `interval` from the epoch, the 95th percentile
  (workloads.replication.percentile) of the probes sent in the interval just gone; one still
  out counts with its age then (the broker is at least that slow); none sent: no figure.
- Decision: workloads.broker_scaling.Scaler (no join at or after the run's end: the last
  interval's figure is recorded, and starts nothing). On a join the readers (the agents of the
  watched broker that run operators) get `readers.broker` (emu.agent.brokers: their node
  session's subscriptions on the spare too), and once all have answered, `movers` of the
  publishers (the agents whose broker is the watched one and that run drivers, in the
  topology's order, less those moved already) get `drivers.broker`: their drivers publish
  through the spare from when each answers, connected there. An operator that reads through
  a session of its own cannot follow yet: `check_readers` refuses such a run before it
  starts. A row of the `replicas` table
  (t: when the last mover answered, by its clock, from the epoch: its answer reaches the host
  later, through the slow broker, 2 s later once; operator: the broker; action
  `broker_join`; node: the spare; instances: the brokers now serving the broker's publishers;
  latency: the deciding figure; slo: the bound), and in the facts (`broker_scaling`, per
  entry as sim.features.broker_scaling writes them): joined, t_join, moved, probes ([t, figure] per
  interval), and what went wrong (errors).

At a dilation K (emu.agent.timebase) `probe`, `interval`, the request timeout and every time and
delay recorded are emulated seconds: the probes are K times as far apart on the host, and a
probe's delay is its host delay over K (the broker gets K times its CPU per emulated second).
The probe's connection (its timeout, its keepalive) is the host's own business with a broker
on the host's clock, and stays undilated.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from emu.agent.mqtt import connected, new_client, no_delay
from emu.agent.timebase import UNDILATED, TimeBase
from emu.cluster.tls import tls_login
from emu.features.base import Feature
from topologies.model import Topology
from topologies.routing import Routes
from workloads.broker_scaling import ACTION, PROBE_SIZE, BrokerScalingSpec, Scaler, movers
from workloads.operator_engines import operator_engine
from workloads.replication import percentile

REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
PROBE_TOPIC = "foglab/probe"
# Mosquitto's count of the PUBLISH packets it received since it started (its $SYS tree,
# retained, published when it changed at each sys_interval: 1 s on a spare,
# emu.cluster.broker_kinds.spare_files).
RECEIVED_TOPIC = "$SYS/broker/publish/messages/received"
SYS_TIMEOUT_S = 3.0
COLUMNS = ("t", "operator", "action", "node", "instances", "latency", "slo")


class Probe:
    """A host's MQTT client on one broker: `send()` a probe, `take(since)` the delays of the
    probes sent since (at `now`, those still out with their age)."""

    def __init__(self, address: str, name: str, clock: Callable[[], float],
                 credentials: tuple[str, str] | None = None) -> None:
        from emu.agent.mqtt import broker_address

        self.clock = clock
        self.topic = f"{PROBE_TOPIC}/{name}"
        self._lock = threading.Lock()
        self._sent: dict[int, float] = {}      # sequence -> sent
        self._back: dict[int, float] = {}      # sequence -> delay
        self._next = 0
        self._ready = threading.Event()
        self.client = new_client(f"foglab-probe-{name}-{time.time_ns() % 10**9}",
                                 credentials=credentials)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *args: self._ready.set()
        self.client.on_message = self._on_message
        host, port = broker_address(address)
        self.client.connect(host, port, keepalive=30)
        self.client.loop_start()
        if not self._ready.wait(CONNECT_TIMEOUT_S):
            self.close()
            raise TimeoutError(f"the probe's client got no subscription on {address} within "
                               f"{CONNECT_TIMEOUT_S:g} s")

    def _on_connect(self, client, userdata, flags, rc, *rest) -> None:
        if connected(rc):
            no_delay(client)
            client.subscribe(self.topic, 0)

    def _on_message(self, client, userdata, message) -> None:
        now = self.clock()
        sequence = int(message.payload[:16])
        with self._lock:
            sent = self._sent.get(sequence)
            if sent is not None and sequence not in self._back:
                self._back[sequence] = now - sent

    def send(self) -> None:
        with self._lock:
            sequence, self._next = self._next, self._next + 1
            self._sent[sequence] = self.clock()
        self.client.publish(self.topic, f"{sequence:016d}".encode().ljust(PROBE_SIZE, b"."), 0)

    def take(self, since: float, until: float) -> list[float]:
        """The delays of the probes sent in [since, until), forgotten then; one not back has
        its age at `until` (a later answer is ignored)."""
        with self._lock:
            taken = [s for s, t in self._sent.items() if since <= t < until]
            delays = [self._back.pop(s) if s in self._back else until - self._sent[s]
                      for s in taken]
            for s in taken:
                del self._sent[s]
        return delays

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def received(address: str, timeout: float = SYS_TIMEOUT_S,
             credentials: tuple[str, str] | None = None) -> int | None:
    """The PUBLISH packets the broker at `address` has received since it started, as it last
    published the count (a sys_interval after the last message at most); None if it said
    nothing within `timeout`."""
    from emu.agent.mqtt import broker_address

    figures: list[int] = []
    heard = threading.Event()

    def on_message(client, userdata, message) -> None:
        figures.append(int(message.payload))
        heard.set()

    client = new_client(f"foglab-sys-{time.time_ns() % 10**9}", credentials=credentials)
    client.on_message = on_message
    client.on_connect = lambda c, *rest: c.subscribe(RECEIVED_TOPIC, 0)
    host, port = broker_address(address)
    try:
        client.connect(host, port, keepalive=30)
    except OSError:
        return None
    client.loop_start()
    try:
        return figures[0] if heard.wait(timeout) else None
    finally:
        client.disconnect()
        client.loop_stop()


class BrokerScaling:
    """`start(epoch)` as the run begins, `finish()` at its end, then `columns()` and
    `facts()`. `addresses`: each watched broker's address as the host reaches it;
    `brokers`: each agent's broker at the start; `publishers`: the agents running drivers,
    in the topology's order; `standing`: the topology node an agent stands at where it is
    not one (a device group's container stands at its first device, emu.cluster.plan).
    `timebase`: the run's; `epoch` and `clock` (its emulated clock by default) on it."""

    def __init__(self, control, entries: list[BrokerScalingSpec], topology: Topology,
                 addresses: dict[str, str], brokers: dict[str, str], publishers: list[str],
                 standing: dict[str, str] | None = None,
                 clock: Callable[[], float] | None = None, readers: list[str] = (),
                 timebase: TimeBase = UNDILATED,
                 credentials: tuple[str, str] | None = None,
                 duration: float = math.inf) -> None:
        self.control = control
        self.duration = duration  # the run's, from the epoch: no join at or after it
        self.credentials = credentials  # the host's login on a closed cluster's brokers
        self.entries = list(entries)
        self.routes = Routes(topology)
        self.addresses = addresses
        self.first = dict(brokers)  # agent -> its broker at the start (its readers' too)
        self.brokers = dict(brokers)  # agent -> the broker its drivers publish through now
        self.publishers = list(publishers)
        self.readers = list(readers)  # the agents running operators
        self.standing = dict(standing or {})
        self.timebase = timebase
        self.clock = clock or timebase.now
        self.scalers = [Scaler(entry) for entry in self.entries]
        self.figures: list[list[list]] = [[] for _ in self.entries]
        self.joins: list[tuple[float, list[str]] | None] = [None] * len(self.entries)
        self.rows: list[dict] = []
        self.errors: list[list[str]] = [[] for _ in self.entries]
        self.epoch = 0.0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True,
                                          name=f"foglab-broker-scaling-{i}")
                         for i in range(len(self.entries))]
        self._lock = threading.Lock()  # the agents' brokers, the rows: entries on one broker
        self._joining: list[threading.Thread] = []

    def start(self, epoch: float) -> None:
        self.epoch = epoch
        for thread in self._threads:
            thread.start()

    def _run(self, i: int) -> None:
        entry = self.entries[i]
        try:
            probe = Probe(self.addresses[entry.broker], f"{entry.broker}-{i}", self.clock,
                          self.credentials)
        except Exception as error:  # noqa: BLE001 - recorded, the run goes on
            self.errors[i].append(f"probe: {error}")
            return
        try:
            self._watch(i, probe)
        except Exception as error:  # noqa: BLE001 - recorded, the run goes on
            self.errors[i].append(f"{type(error).__name__}: {error}")
        finally:
            probe.close()

    def _watch(self, i: int, probe: Probe) -> None:
        """Probe once in each `probe` slot from the epoch, at a random moment of it (one
        random stream per entry: a run's moments are the same each time), decide on the
        `interval` grid."""
        entry, scaler = self.entries[i], self.scalers[i]
        moments = random.Random(f"broker_scaling:{i}")
        k, n = 1, 0  # the next decision's and probe's numbers
        offset = moments.random() * entry.probe
        while True:
            decision = self.epoch + k * entry.interval
            sending = self.epoch + n * entry.probe + offset
            due = min(decision, sending)
            if self.timebase.wait(self._stop, max(0.0, due - self.clock())):
                return
            if sending <= decision:
                probe.send()
                n = max(n + 1, math.floor((self.clock() - self.epoch) / entry.probe) + 1)
                offset = moments.random() * entry.probe
                continue
            delays = probe.take(decision - entry.interval, decision)
            figure = percentile(delays) if delays else None
            self.figures[i].append([round(decision - self.epoch, 3),
                                    None if figure is None else round(figure, 6)])
            # The run's last interval is measured, but no join starts at or after its end.
            if scaler.observe(figure) and self.clock() - self.epoch < self.duration:
                # Its own thread: the request goes through the slow broker, and the probes
                # go on meanwhile.
                joining = threading.Thread(target=self._join_noting, args=(i, figure),
                                           daemon=True, name=f"foglab-broker-join-{i}")
                self._joining.append(joining)
                joining.start()
            k += 1

    def _join_noting(self, i: int, figure: float | None) -> None:
        try:
            self._join(i, figure)
        except Exception as error:  # noqa: BLE001 - recorded, the run goes on
            self.errors[i].append(f"join: {type(error).__name__}: {error}")

    def _join(self, i: int, figure: float | None) -> None:
        entry = self.entries[i]
        # The watched broker's readers subscribe on the spare first: nothing moved there may
        # find nobody to take it. A reader that did not is an error, and nobody moves.
        readers = [a for a in self.readers if self.first.get(a) == entry.broker]
        result = self.control.send(readers, "readers.broker", {"broker": entry.spare},
                                   timeout=REQUEST_TIMEOUT_S)
        failed = {node: problem for node in readers
                  if (problem := result.problem(node)) is not None}
        self.errors[i].extend(f"readers.broker on {node}: {problem}"
                              for node, problem in failed.items())
        if failed:
            return
        with self._lock:
            publishers = [a for a in self.publishers if self.brokers.get(a) == entry.broker]
        at = {self.standing.get(agent, agent): agent for agent in publishers}
        moving = [at[node] for node in movers(list(at), entry.spare, entry.share, self.routes)]
        result = self.control.send(moving, "drivers.broker", {"broker": entry.spare},
                                   timeout=REQUEST_TIMEOUT_S)
        moved = []
        for node in moving:
            if (problem := result.problem(node)) is None:
                moved.append(node)
            else:
                self.errors[i].append(f"drivers.broker on {node}: {problem}")
        # When the last mover switched, by its clock (the host's: containers share it); its
        # answer comes later through the slow broker.
        switched = [result.replies[node].result.get("t") for node in moved
                    if isinstance(result.replies[node].result, dict)]
        t = (max(switched) if switched and None not in switched else self.clock()) - self.epoch
        with self._lock:
            for node in moved:
                self.brokers[node] = entry.spare
            self.joins[i] = (t, moved)
            serving = 1 + sum(1 for j, other in enumerate(self.entries)
                              if other.broker == entry.broker and self.joins[j] is not None)
            self.rows.append({"t": t, "operator": entry.broker, "action": ACTION,
                              "node": entry.spare, "instances": serving,
                              "latency": math.nan if figure is None else figure,
                              "slo": entry.bound})

    def finish(self, timeout: float = 2 * REQUEST_TIMEOUT_S) -> None:
        self._stop.set()
        timeout = self.timebase.host_seconds(timeout)
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout)
        for thread in list(self._joining):  # a join under way at the end is waited for
            thread.join(timeout)

    def columns(self, replicas: dict[str, list] | None = None) -> dict[str, list]:
        """The replicas table's columns: `replicas` (replication's, if it ran) and the joins,
        in time order."""
        rows = [dict(zip(COLUMNS, values, strict=True)) for values in zip(
            *(replicas[name] for name in COLUMNS), strict=True)] if replicas else []
        rows = sorted(rows + self.rows, key=lambda row: row["t"])
        return {name: [row[name] for row in rows] for name in COLUMNS}

    def facts(self) -> list[dict]:
        """Per entry, as sim.features.broker_scaling's; what went wrong; and `spare_received`, the
        PUBLISH packets the spare had received when asked (after the run's drain: the moved
        drivers' messages, which its bridge passed on)."""
        spares = [entry.spare for entry in self.entries]
        with ThreadPoolExecutor(len(spares) or 1) as pool:
            def count(name: str) -> int | None:
                return received(self.addresses[name], credentials=self.credentials)

            counts = dict(zip(spares, pool.map(count, spares), strict=True))
        return [{"broker": entry.broker, "spare": entry.spare,
                 "joined": self.joins[i] is not None,
                 "t_join": None if self.joins[i] is None else round(self.joins[i][0], 3),
                 "moved": [] if self.joins[i] is None else self.joins[i][1],
                 "probes": self.figures[i], "errors": self.errors[i],
                 "spare_received": counts[entry.spare]}
                for i, entry in enumerate(self.entries)]


def check_readers(entries, brokers: dict[str, str], configs: dict) -> None:
    """Refuse, before anything starts, a watched broker whose readers the spare could not
    reach: an operator reading through a session of its own (a migration's, recovery's or
    replication's: emu.cluster.deployment) or a Spark query, which the readers' session on the spare
    (emu.agent.brokers) does not carry. A SpecError naming the entry."""
    from topologies.errors import SpecError

    for i, entry in enumerate(entries):
        for node, config in configs.items():
            if brokers.get(node) != entry.broker:
                continue
            for operator in config.operators:
                engine = operator_engine(operator.engine)
                if operator.session or engine.own_session:
                    raise SpecError(
                        ("scenario", "broker_scaling", i, "broker"), entry.broker,
                        f"a broker whose readers take their input through the agent's own "
                        f"session on emu: operator {operator.name!r} on {node} reads through "
                        + (f"{engine.title}'s" if engine.own_session else "a session of its "
                           "own (it may move, be recovered or replicated)")
                        + ", which the spare's readers' session does not carry yet")


class BrokerScalingFeature(Feature):
    """`scenario.broker_scaling` on a run: its spares planned idle beside the cluster, a
    watched broker's readers checked against the plan, the controller from the epoch; the
    joins as rows of the `replicas` table (after replication's), and the facts."""

    key = "broker_scaling"

    def __init__(self, spec) -> None:
        super().__init__(spec)
        self.entries: list[BrokerScalingSpec] = []
        self.scaling: BrokerScaling | None = None

    def prepare(self, setup) -> None:
        from workloads.broker_scaling import resolve

        self.entries = list(resolve(self.spec, setup.topology).entries)
        setup.spares.update({entry.spare: entry.broker for entry in self.entries})
        setup.checks.append(
            lambda plan, configs: check_readers(self.entries, plan.brokers, configs))

    def start(self, run, epoch: float) -> None:
        plan, status = run.plan, run.status
        self.scaling = BrokerScaling(
            run.control, self.entries, run.topology,
            {b: f"{status[b].ip}:1883" for b in [*plan.spares, *plan.spares.values()]},
            plan.brokers, [a.node for a in plan.agents() if a.agent.drivers],
            {a: plan.link(a, b).path[0] for a, b in plan.brokers.items()},
            readers=[a.node for a in plan.agents() if a.agent.operators], timebase=run.clock,
            credentials=tls_login(plan), duration=run.timing.duration)
        self.scaling.start(epoch)

    def stop(self) -> None:
        if self.scaling is not None:
            self.scaling.finish()

    def results(self, run, tables: dict, facts: dict) -> None:
        # Joins are replicas' rows too.
        tables["replicas"] = self.scaling.columns(tables.get("replicas"))
        facts["broker_scaling"] = self.scaling.facts()
