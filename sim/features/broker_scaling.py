"""Broker scaling at run time in the model (`scenario.broker_scaling`): the controller of
workloads.broker_scaling on the model's clock and brokers, deciding as the emulation's
(emu.features.broker_scaling) from the same measure.

- Spares: no node takes a spare as its broker at the start (sim.model.Model.broker_for picks
  among workloads.broker_scaling.first_brokers less `BrokerScaling.spares`, for publishers
  and readers alike).
- Measure: every `probe` seconds from the run's start, a probe (a 64 B QoS 0 message) goes
  through the watched broker: a job of the broker's service time admitted to its node's CPU,
  behind what the broker has queued, and for a kafka-like broker held by a flush as a message
  is (sim.pubsub.Broker). Its delay is its finish less its admission, known at admission: no
  event for the probe's end. Every `interval` the controller takes the probes sent in the
  interval just gone, one not back yet with its age then (as emu's controller: the broker is
  at least that slow); their 95th percentile (workloads.replication.percentile) is the
  broker's figure. A probe costs the broker what a message does, as a real probe would: the
  probe rate over the broker's capacity, 0.05 % for the default 50 us every 100 ms, too
  little to move its queue; a slow broker feels it (2 ms a message: 2 %). The node's sampled
  utilisation and queue length count the probes.
- Decision: workloads.broker_scaling.Scaler, one per entry; an entry whose broker's figure
  stays over `bound` for `up` intervals in a row joins its spare, once (not at the run's end:
  the last interval's figure is recorded, and nothing starts then).
- Join: the broker's publishers at the decision, in the topology's order: the gateways
  running drivers and the devices publishing straight to it, whose broker is the watched one
  (less those moved already). `movers` of them (a `share`, the nearest the spare first) are
  told, one coordinator command each (sim.migration's Coordinator.command, all at once, as
  emu's controller asks the agents), and each switches when its command is done
  (sim.model.Model.move_publisher): a gateway's driver publishes through the spare from
  then on (its readings' routing plans, made again through the spare; the gateway's
  operators keep their broker, as on emu, where only the drivers' session moves), a
  device's path to its broker leads to the spare. What is already
  on its way (on a link, in the broker's queue, a QoS 1 resend) finishes where it is; what
  the driver converts after the switch goes to the spare. The spare hands the moved
  messages to every reading group as any broker does (its own turns in a shared
  subscription), so the readers keep their subscriptions.
- Recorded: a row of the `replicas` table per join (experiments.schema; with sim.
  features.replication's rows when both run, in time order): t when the last mover switched,
  operator the watched broker, action `broker_join`, node the spare, instances the brokers
  then serving the watched broker's publishers (the broker and its joined spares), latency
  the deciding figure, slo the bound. In the run's facts, `broker_scaling` per entry, as
  emu.features.broker_scaling writes them: joined, t_join, moved, `probes` ([t, figure] per
  interval, figure None: no probe in it) for a plot, errors (none on sim) and spare_received (what
  the spare received in the run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sim.features.base import Feature
from sim.features.replication import COLUMNS  # one replicas table: its columns once
from sim.pubsub import Broker
from workloads.broker_scaling import (
    ACTION,
    PROBE_SIZE,
    BrokerScalingSpec,
    Scaler,
    movers,
)
from workloads.replication import percentile

EPSILON = 1e-9  # a probe and a decision due at one instant: the decision comes first


@dataclass
class Entry:
    """One entry of scenario.broker_scaling: its Scaler, the probes of the interval going
    on, and what it did."""

    spec: BrokerScalingSpec
    scaler: Scaler
    probes: list[tuple[float, float]] = field(default_factory=list)  # (sent, delay)
    figures: list[list] = field(default_factory=list)  # [t, figure or None] per interval
    t_join: float | None = None
    moved: list[str] = field(default_factory=list)
    next_probe: int = 0  # the next probe is at next_probe x probe
    next_decision: int = 1  # the next decision is at next_decision x interval


class BrokerScaling(Feature):
    """Probes watched brokers and joins their spares (sim.model.Model).

    It is its own event, as a sim.sources.Source is: one event object scheduled again at each
    probe or decision, the earliest of all entries', rather than a process and an event each.
    """

    dynamic = True  # publishers move to a spare: new paths

    @staticmethod
    def spares(spec: list[BrokerScalingSpec]) -> set[str]:
        return {entry.spare for entry in spec}

    def __init__(self, model, specs: list[BrokerScalingSpec]):
        super().__init__(model, specs)
        self.callbacks = None
        self._ok = True
        self._value = None
        self.env = model.env
        self.entries = [Entry(spec, Scaler(spec)) for spec in specs]
        self.rows: list[tuple] = []
        self.broker_of: dict[str, str] = {}  # a moved publisher -> the spare it publishes to
        self._direct: dict[str, list] = {}  # a device -> its sources publishing to a broker
        for source in model.sources:
            if isinstance(getattr(source.deliver, "__self__", None), Broker):
                device = model.node_names[source.device_index]
                self._direct.setdefault(device, []).append(source)
        self.end = model.settings.duration
        self._on_tick = [self._tick]
        self._arm()

    # -- the clock ------------------------------------------------------------------------

    def _due(self, entry: Entry) -> float:
        """The entry's next probe or decision, whichever is first (inf: none left)."""
        spec = entry.spec
        probe = entry.next_probe * spec.probe
        decision = entry.next_decision * spec.interval
        probe = probe if probe < self.end else math.inf
        decision = decision if decision <= self.end + EPSILON else math.inf
        return min(probe, decision)

    def _arm(self) -> None:
        t = min(self._due(entry) for entry in self.entries)
        if t < math.inf:
            self.callbacks = self._on_tick
            self.env.at(self, max(t, self.env.now))

    def _tick(self, _event) -> None:
        now = self.env.now
        for entry in self.entries:
            spec = entry.spec
            if entry.next_decision * spec.interval <= now + EPSILON:
                self._decide(entry, now)
                entry.next_decision += 1
            if entry.next_probe * spec.probe <= now + EPSILON and now < self.end:
                entry.probes.append((now, self._probe(spec.broker, now)))
                entry.next_probe += 1
        self._arm()

    def _probe(self, name: str, now: float) -> float:
        """A probe's time through the broker, sent now: queue, service (and a flush)."""
        return self.model.brokers[name].admit(now, PROBE_SIZE) - now

    # -- deciding and joining -------------------------------------------------------------

    def _decide(self, entry: Entry, now: float) -> None:
        # A probe not back yet counts with its age (a probe sent now is the next interval's).
        delays = [min(delay, now - sent) for sent, delay in entry.probes]
        figure = percentile(delays) if delays else None
        entry.probes = []
        entry.figures.append([round(now, 3), None if figure is None else round(figure, 6)])
        # The run's last interval is measured, but nothing starts at its end.
        if entry.scaler.observe(figure) and now < self.end:
            self.env.process(self._join(entry, figure))

    def publishers(self, broker: str) -> list[str]:
        """The nodes whose devices' readings go through `broker` now, in the topology's
        order: gateways running drivers, devices publishing straight to a broker."""
        model = self.model
        return [node for node in model.node_names
                if (node in model.drivers or node in self._direct)
                and (self.broker_of.get(node) or model.broker_for(node)) == broker]

    def _join(self, entry: Entry, figure: float | None):
        """Tell the movers, each of them switching when its command is done; the row when
        the last one has."""
        model, spec = self.model, entry.spec
        moving = movers(self.publishers(spec.broker), spec.spare, spec.share,
                        model.network.routes)
        start = self.env.now
        done = sorted((start + model.coordinator.command(node), order, node)
                      for order, node in enumerate(moving))
        for t, _, node in done:
            if t > self.env.now:
                yield self.env.event_at(t)
            self._switch(node, spec.spare)
        entry.t_join, entry.moved = self.env.now, moving
        serving = 1 + sum(1 for other in self.entries
                          if other.spec.broker == spec.broker and other.t_join is not None)
        self.rows.append((self.env.now, spec.broker, ACTION, spec.spare, serving,
                          math.nan if figure is None else figure, spec.bound))

    def _switch(self, node: str, spare: str) -> None:
        """A publisher's readings go to the spare from now on."""
        self.broker_of[node] = spare
        self.model.move_publisher(node, spare)

    # -- the record -----------------------------------------------------------------------

    def finish(self, tables: dict, facts: dict) -> None:
        """The joins in the replicas table (after replication's rows, in time order), and
        each entry's course in the facts."""
        facts["broker_scaling"] = [
            {"broker": entry.spec.broker, "spare": entry.spec.spare,
             "joined": entry.t_join is not None,
             "t_join": None if entry.t_join is None else round(entry.t_join, 3),
             "moved": entry.moved, "probes": entry.figures, "errors": [],
             "spare_received": self.model.brokers[entry.spec.spare].received}
            for entry in self.entries]
        floats = ("t", "latency", "slo")
        columns = list(zip(*self.rows, strict=True)) or [()] * len(COLUMNS)
        ours = {name: np.array(values, dtype=float if name in floats
                               else np.int64 if name == "instances" else object)
                for name, values in zip(COLUMNS, columns, strict=True)}
        theirs = tables.get("replicas")
        if theirs is not None:
            ours = {name: np.concatenate([theirs[name], ours[name]]) for name in COLUMNS}
            order = np.argsort(ours["t"], kind="stable")
            ours = {name: values[order] for name, values in ours.items()}
        tables["replicas"] = ours
