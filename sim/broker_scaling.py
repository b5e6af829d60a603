"""Broker scaling at run time in the model (`scenario.broker_scaling`): the controller of
workloads.broker_scaling on the model's clock and brokers, deciding as the emulation's
(emu.broker_scaling) from the same measure.

- Spares: no node takes a spare as its broker at the start (sim.model.Model.broker_for picks
  among workloads.broker_scaling.first_brokers, for publishers and readers alike).
- Measure: every `probe` seconds from the run's start, a probe (a 64 B QoS 0 message) goes
  through the watched broker: a job of the broker's service time admitted to its node's CPU,
  behind what the broker has queued, and for a kafka-like broker held by a flush as a message
  is (sim.pubsub.Broker). Its delay is its finish less its admission, known at admission: no
  event for the probe's end. Every `interval` the controller takes the probes sent in the
  interval just gone; their 95th percentile (workloads.replication.percentile) is the
  broker's delay. A probe costs the broker what a message does, as a real probe would: the
  probe rate over the broker's capacity, 0.05 % for the default 50 us every 100 ms, too
  little to move its queue; a slow broker feels it (2 ms a message: 2 %). The node's sampled
  utilisation and queue length count the probes.
- Decision: workloads.broker_scaling.Scaler, one per entry; an entry whose broker's figure
  stays over `bound` for `up` intervals in a row joins its spare, once.
- Join: the broker's publishers, the gateways running drivers and the devices publishing
  straight to it (in the topology's order), whose broker is the watched one at the join;
  `movers` of them (a `share`, the nearest the spare first) publish to the spare from then
  on: their cached broker, their routing plans and a device's path to its broker change (a
  node has one broker: operators on a moved gateway publish to the spare too).
  Messages already on their way (on a link, in a driver's or the broker's queue, a QoS 1
  resend) finish where they are. The spare hands the moved messages to every reading group
  as any broker does (its own turns in a shared subscription), so the readers keep their
  subscriptions. The switch takes effect at the decision (the controller's command to the
  publishers is not modelled).
- Recorded: a row of the `replicas` table per join (experiments.schema; appended to
  sim.replication's rows when both run): t the join, operator the watched broker, action
  `broker_join`, node the spare, instances the brokers then serving the watched broker's
  publishers (the broker and its joined spares), latency the deciding interval's delay,
  slo the bound. In the run's facts, `broker_scaling` per entry: joined, t_join, moved, and
  `probes`, [t, delay] per interval (delay None: no probe in it) for a plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from topologies.routing import gateway_of
from workloads.broker_scaling import (
    ACTION,
    PROBE_SIZE,
    BrokerScalingSpec,
    Scaler,
    movers,
)
from workloads.replication import percentile

COLUMNS = ("t", "operator", "action", "node", "instances", "latency", "slo")
EPSILON = 1e-9  # a probe and a decision due at one instant: the decision comes first


@dataclass
class Entry:
    """One entry of scenario.broker_scaling: its Scaler, the probes of the interval going
    on, and what it did."""

    spec: BrokerScalingSpec
    scaler: Scaler
    probes: list[float] = field(default_factory=list)  # delays of this interval's probes
    figures: list[list] = field(default_factory=list)  # [t, delay or None] per interval
    t_join: float | None = None
    moved: list[str] = field(default_factory=list)
    next_probe: int = 0  # the next probe is at next_probe x probe
    next_decision: int = 1  # the next decision is at next_decision x interval


class BrokerScaling:
    """Probes watched brokers and joins their spares (sim.model.Model).

    It is its own event, as a sim.sources.Source is: one event object scheduled again at each
    probe or decision, the earliest of all entries', rather than a process and an event each.
    """

    def __init__(self, model, specs: list[BrokerScalingSpec]):
        self.callbacks = None
        self._ok = True
        self._value = None
        self.model = model
        self.env = model.env
        self.entries = [Entry(spec, Scaler(spec)) for spec in specs]
        self.rows: list[tuple] = []
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
                entry.probes.append(self._probe(spec.broker, now))
                entry.next_probe += 1
        self._arm()

    def _probe(self, name: str, now: float) -> float:
        """A probe's time through the broker, sent now: queue, service (and a flush)."""
        broker = self.model.brokers[name]
        done = broker.cpu.admit(now, broker._service)
        if broker._flushing:
            done = broker._after_flush(done, PROBE_SIZE)
        return done - now

    # -- deciding and joining -------------------------------------------------------------

    def _decide(self, entry: Entry, now: float) -> None:
        delay = percentile(entry.probes) if entry.probes else None
        entry.probes = []
        entry.figures.append([round(now, 3), None if delay is None else round(delay, 6)])
        if entry.scaler.observe(delay):
            self._join(entry, now, delay)

    def publishers(self, broker: str) -> list[str]:
        """The nodes that publish devices' readings through `broker` now, in the topology's
        order: gateways running drivers, devices publishing straight to a broker."""
        model = self.model
        brokers = list(model.brokers.values())
        direct = {model.node_names[source.device_index] for source in model.sources
                  if getattr(source.deliver, "__self__", None) in brokers}
        return [node for node in model.node_names
                if (node in model.drivers or node in direct)
                and model.broker_for(node) == broker]

    def _join(self, entry: Entry, now: float, delay: float | None) -> None:
        model, spec = self.model, entry.spec
        moving = movers(self.publishers(spec.broker), spec.spare, spec.share,
                        model.network.routes)
        spare = model.brokers[spec.spare]
        for node in moving:
            model._nearest_broker[node] = spec.spare
            for key in [key for key in model._plans if key[0] == node]:
                del model._plans[key]  # made again, through the spare, at its next publish
        for source in model.sources:
            device = model.node_names[source.device_index]
            if device in moving and gateway_of(model.topology, device) is None:
                source.path = model.path(device, spec.spare)
                source.deliver = spare.receive
        entry.t_join, entry.moved = now, moving
        serving = 1 + sum(1 for other in self.entries
                          if other.spec.broker == spec.broker and other.t_join is not None)
        self.rows.append((now, spec.broker, ACTION, spec.spare, serving,
                          math.nan if delay is None else delay, spec.bound))

    # -- the record -----------------------------------------------------------------------

    def finish(self, tables: dict, facts: dict) -> None:
        """The joins in the replicas table (after replication's rows, in time order), and
        each entry's course in the facts."""
        facts["broker_scaling"] = [
            {"broker": entry.spec.broker, "spare": entry.spec.spare,
             "joined": entry.t_join is not None, "t_join": entry.t_join,
             "moved": entry.moved, "probes": entry.figures}
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
