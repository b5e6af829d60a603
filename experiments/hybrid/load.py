"""Simulated load: devices the emulation does not run, published into it from the host.

`scenario.load` names devices (topology names or patterns) that a hybrid run does not emulate
one by one: a generator in the host process emits their readings and publishes them into the
real brokers, to the gateways they link to, so the emulated part carries their load. On sim
(and emu) the same file runs them as ordinary devices, so the model's prediction stays
comparable.

The schedule is the emulation's own, not a second copy: per gateway, the generator runs
emu.agent.drivers.Drivers on the gateway's driver configs for those devices (emu.cluster.deployment
marks them `load`), with the gateway's index and seed, so each device has the random streams,
emission times (rate, arrivals, shape, start), readings, sizes, QoS and access link (latency,
jitter, loss: the generator holds and drops as the gateway's agent would) that the gateway's
agent would give it, and sim's sources' schedule law. Message ids carry the gateway's index,
their sequence numbers counting from protocol.LOAD_SEQUENCE (apart from the agent's own).

How the load reaches the operators that would have read those devices: the generator publishes
each gateway's readings, batched (everything due at one wake-up in one MQTT message per
gateway and QoS), on the gateway's load topic (protocol.load_topic), which only that gateway's
agent reads through the broker; the agent takes each reading as one of its drivers' (a local
operator reads it in-process, the broker gets it when no local operator reads it or another
node's does, `forward`). So a gateway's filter or window counts them as it counts its emulated
devices', and the tables route them alike. A reading crosses the host's connection to the
broker and the gateway's link from the broker on its way, which an emulated device's does not:
its latency is the longer by that, and by the agent's decoding it (on a saturated host, CPU
pressure 96 %, a median of 110 ms to a window on the gateway against 10 ms for an emulated
device's reading read on its gateway: tests/hybrid/test_load.py's run).

Emissions go to `<records root>/hybrid-load/sent.csv` (emu.agent.records), where emu.run.tables
reads every node's records: `messages` has a row per load message with its sink, latency and
lost as for emulated devices. The generator's facts (devices, messages, achieved rate, lag of
its emissions behind their schedule) go to the manifest's `facts.hybrid.load`.

The generator runs on one scheduler thread (emu.agent.scheduler) and one paho client per
broker; `stop` ends both, flushes the records and waits for QoS 1 publishes, on every path.

At a dilation K it runs on the emulated run's clock (`timebase`, emu.agent.timebase), as the
gateways' agents do: its schedule, the device links' holds, its records and its lag are
emulated (an emission due at emulated t goes at host time timebase.host(t)), and so is the
drain at the end. Its connections to the brokers (their timeouts, keepalives) are the host's
own business with brokers on the host's clock, and stay undilated.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from array import array
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from emu.agent.config import DriverConfig
from emu.agent.drivers import Drivers
from emu.agent.protocol import LOAD_SEQUENCE, Envelope, load_batch, load_topic
from emu.agent.records import Records
from emu.agent.scheduler import Scheduler
from emu.agent.timebase import UNDILATED, TimeBase
from experiments.hybrid.figures import Measured
from topologies.errors import SpecError
from topologies.model import Topology
from topologies.routing import gateway_of

# The folder of the generator's records, beside the nodes' under the run's records root.
RECORDS = "hybrid-load"
CONNECT_TIMEOUT_S = 10.0
PUBLISH_TIMEOUT_S = 10.0
# At the end, how long the device links may still deliver what they hold (their latency):
# the emulated devices' drivers fall silent and what is under way still arrives, as here.
DRAIN_S = 5.0
# The most QoS 1 batches in flight per client: paho's default (20) would queue behind acks.
INFLIGHT = 1000


def simulated_devices(scenario, topology: Topology) -> list[str]:
    """The devices `scenario.load` names, checked: each pattern matches devices of the
    topology, none of them moves, each links to a gateway (where its readings enter). A
    SpecError names the field, the pattern and why."""
    moving: set[str] = set()
    mobility = scenario.mobility
    if mobility is not None:
        moving = set(topology.select(mobility.devices or [
            n.name for n in topology.of_kind("device")]))
    found: dict[str, None] = {}
    for j, pattern in enumerate(scenario.load):
        path = ("scenario", "load", j)
        names = topology.match(pattern)
        if not names:
            raise SpecError(path, pattern, "device names or patterns of the topology: "
                            "it matches no node")
        for name in names:
            kind = topology.nodes[name].kind
            if kind != "device":
                raise SpecError(path, pattern, f"device names or patterns that match only "
                                f"devices: {name} is a {kind}")
            if name in moving:
                why = ("" if mobility.devices else " (with no scenario.mobility.devices, "
                       "every device moves: name the moving ones there)")
                raise SpecError(path, pattern, f"devices that do not move: {name} is a "
                                f"moving device{why}")
            if gateway_of(topology, name) is None:
                raise SpecError(path, pattern, f"devices linked to a gateway, where their "
                                f"readings enter the emulation: {name} links to none")
        found.update(dict.fromkeys(names))
    return list(found)


@dataclass(frozen=True)
class Target:
    """One gateway with simulated devices: its node, index and seed (its agent's, for the
    same ids and random streams), the broker address it reads through, and its drivers with
    `load` set (emu.cluster.deployment)."""

    node: str
    index: int
    seed: int
    broker: str
    drivers: tuple[DriverConfig, ...]


def targets_of(cluster) -> list[Target]:
    """The gateways of a cluster that is up with simulated devices, and their brokers'
    addresses as the host reaches them."""
    status = {s.node: s for s in cluster.status()}
    found = []
    for container in cluster.plan.agents():
        agent = container.agent
        load = tuple(d for d in agent.drivers if d.load)
        if load:
            broker = cluster.plan.brokers[container.node]
            found.append(Target(container.node, agent.index, agent.seed,
                                f"{status[broker].ip}:1883", load))
    return found


class _Timed:
    """A scheduler's `at` that notes how late each action ran behind its time (s), and how
    many readings the device links hold (`held`: deliveries set and not yet run)."""

    def __init__(self, at: Callable[..., None], clock: Callable[[], float]) -> None:
        self._schedule = at
        self._clock = clock
        self.lags = array("d")
        self.held = 0

    def at(self, t: float, action: Callable[..., None], *args) -> None:
        if getattr(action, "delivery", False):
            self.held += 1
        self._schedule(t, self._run, t, action, args)

    def _run(self, t: float, action: Callable[..., None], args: tuple) -> None:
        self.lags.append(self._clock() - t)
        if getattr(action, "delivery", False):
            self.held -= 1
        action(*args)


class LoadGenerator:
    """The simulated devices of `targets`, from `epoch` (the run's clock) on, published to
    their gateways; `start()`, then `stop()` (on every path: it is safe to call twice, or after
    a failed start). `timebase`: the run's; `clock` its emulated clock by default."""

    def __init__(self, targets: list[Target], epoch: float, records: Path,
                 clock: Callable[[], float] | None = None, client_prefix: str = "foglab-load",
                 timebase: TimeBase = UNDILATED, credentials: tuple[str, str] | None = None):
        self.targets = list(targets)
        self.credentials = credentials  # the host's login on a closed cluster's brokers
        self.epoch = epoch
        self.timebase = timebase
        self.clock = clock = clock or timebase.now
        self.scheduler = Scheduler(clock, timebase.dilation)
        self.timed = _Timed(self.scheduler.at, clock)
        self.records = Records(records, self.scheduler.at, clock)
        self._prefix = client_prefix
        self.clients: dict[str, object] = {}
        self._batches: dict[tuple[str, int], list[bytes]] = defaultdict(list)
        self._flush_due = False
        self._pending: list = []  # QoS 1 publishes not yet acknowledged (paho's infos)
        self.published = 0        # messages handed to paho
        self.batches = 0
        self.refused = 0          # messages paho refused (not connected)
        self.drivers = [Drivers(list(t.drivers), t.node, t.index, t.seed, epoch,
                                self.timed.at, clock, self._deliver(t), self.records.sent,
                                first_sequence=LOAD_SEQUENCE) for t in self.targets]
        self._broker = {t.node: t.broker for t in self.targets}
        self.devices = sum(len(c.devices) for t in self.targets for c in t.drivers)
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self._stopped = False
        self._silent = threading.Event()
        self._running = False
        self._lock = threading.Lock()

    def _deliver(self, target: Target):
        batches, node = self._batches, target.node

        def deliver(topic: str, envelope: Envelope, driver) -> None:
            batches[node, driver.config.qos].append(envelope.encode())
            if not self._flush_due:
                self._flush_due = True
                # After every action due now (the scheduler runs its inbox after them).
                self.scheduler.call(self._flush)
        deliver.delivery = True  # what a device link holds: _Timed counts it
        return deliver

    def _silence(self) -> None:
        """No more emissions (the run's time is over); what the device links hold goes on."""
        self.stopped_at = self.clock()
        for drivers in self.drivers:
            drivers.set_rate(0.0)
        self._silent.set()

    def _flush(self) -> None:
        self._flush_due = False
        batches = list(self._batches.items())
        self._batches.clear()
        for (node, qos), items in batches:
            client = self.clients[self._broker[node]]
            info = client.publish(load_topic(node), load_batch(items), qos)
            self.batches += 1
            if info.rc != 0 and qos == 0:  # paho keeps a QoS 1 message for a reconnection
                self.refused += len(items)
                continue
            self.published += len(items)
            if qos:
                self._pending.append(info)
                if len(self._pending) > 4 * INFLIGHT:
                    self._pending = [i for i in self._pending if not i.is_published()]

    def start(self, timeout: float = CONNECT_TIMEOUT_S) -> LoadGenerator:
        """Connect to each broker, then emit from the epoch on (the scheduler's thread)."""
        from emu.agent.mqtt import connected, new_client, no_delay

        try:
            for number, broker in enumerate(sorted(set(self._broker.values()))):
                client = new_client(f"{self._prefix}-{number}-{int(self.epoch * 1000)}",
                                    credentials=self.credentials)
                client.max_inflight_messages_set(INFLIGHT)
                client.max_queued_messages_set(0)
                answered = threading.Event()
                refused: list = []

                def on_connect(client, userdata, flags, rc, *rest, done=answered,
                               why=refused) -> None:
                    if connected(rc):
                        no_delay(client)
                    else:
                        why.append(rc)
                    done.set()

                client.on_connect = on_connect
                host, _, port = broker.rpartition(":")
                self.clients[broker] = client
                client.connect_async(host, int(port), keepalive=30)
                client.loop_start()
                if not answered.wait(timeout) or refused:
                    raise RuntimeError(
                        f"the load generator could not connect to the broker at {broker}: "
                        + (f"refused ({refused[0]})" if refused
                           else f"no answer within {timeout:.0f} s"))
            self.scheduler.start("foglab-load")
            self._running = True
            for drivers in self.drivers:
                self.scheduler.call(drivers.start)
            self.started_at = self.clock()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = PUBLISH_TIMEOUT_S, drain: float = DRAIN_S) -> None:
        """Stop emitting, let the device links deliver what they hold (up to `drain` emulated
        s), publish what is batched, flush the records, wait for the QoS 1 publishes (up to
        `timeout` host s), disconnect. Safe to call more than once, and after a failed
        start."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            if self._running:
                self.scheduler.call(self._silence)
                drain = self.timebase.host_seconds(drain)
                deadline = time.monotonic() + drain
                self._silent.wait(drain)
                while self.timed.held > 0 and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(0.01)  # the flush the last delivery asked for
            self.scheduler.stop(timeout=5.0)
            if self.stopped_at is None:
                self.stopped_at = self.clock()
            if self._batches and self.clients:
                self._flush()
        finally:
            try:
                self.records.close()
            finally:
                deadline = time.monotonic() + timeout
                for info in self._pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    # Not connected: it will not go (counted below).
                    with contextlib.suppress(RuntimeError, ValueError):
                        info.wait_for_publish(left)
                self.unacknowledged = sum(not i.is_published() for i in self._pending)
                for client in self.clients.values():
                    try:
                        client.disconnect()
                    finally:
                        client.loop_stop()

    def facts(self) -> dict:
        """For the manifest: devices, messages emitted and published, the achieved rate
        (emitted per second from the epoch to the stop) and the lag of the emissions behind
        their schedule (p50/p99/max, ms, over `n` emissions; None with `unmeasured`, why,
        when none came due)."""
        lags = Measured.of(np.frombuffer(self.timed.lags, dtype="float64")
                           if len(self.timed.lags) else [],
                           "the generator emitted nothing (no emission came due)")
        end = self.stopped_at or self.clock()
        span = end - max(self.epoch, self.started_at or self.epoch)
        base = sum(c.rate * len(c.devices) for t in self.targets for c in t.drivers)
        return {"devices": self.devices, "gateways": len(self.targets),
                "sent": self.records.sent_count, "published": self.published,
                "batches": self.batches, "refused": self.refused,
                "unacknowledged": getattr(self, "unacknowledged", 0),
                "rate": round(self.records.sent_count / span, 3) if span > 0 else None,
                "base_rate": round(base, 3),
                "lag_ms": {"p50": lags.percentile(50, 1e3, 3),
                           "p99": lags.percentile(99, 1e3, 3), "max": lags.max(1e3, 3), "n": lags.n,
                           **({"unmeasured": lags.reason} if lags.reason else {})}}


def planned(target: Target, epoch: float, duration: float) -> list[tuple[int, str, str, float,
                                                                          bool]]:
    """What the generator emits for one gateway in [epoch, epoch + duration), on a virtual
    clock: (id, stream, device, t_sent, dropped) rows, as its sent records have them when it
    keeps up with its schedule."""
    heap: list = []
    order = itertools.count()
    now = [epoch]
    rows: list = []

    def at(t: float, action, *args) -> None:
        heapq.heappush(heap, (t, next(order), action, args))

    drivers = Drivers(list(target.drivers), target.node, target.index, target.seed, epoch, at,
                      lambda: now[0], lambda *delivered: None,
                      lambda *row: rows.append(row), first_sequence=LOAD_SEQUENCE)
    drivers.start()
    end = epoch + duration
    while heap and heap[0][0] < end:
        t, _, action, args = heapq.heappop(heap)
        now[0] = max(now[0], t)
        action(*args)
    return rows
