"""Dynamic task replication in the model (`scenario.replication`, an operator's `slo`): the
controller of workloads.replication on the model's clock, CPUs and broker, deciding as the
emulation's (emu.features.replication) from the same measure.

- Input: each watched operator (one with an `slo`) reads everything through the broker, as
  one shared subscription (sim.pubsub's `shared` group: no local read, even of what is
  published on a node that runs it; each message reaches one instance, in turn), as its
  instances read through sessions of their own on emu.
- Measure: every instance notes, for each input, when its processing ends and how long after
  the input's emission (its t_sent: the network, the broker's and the node's queues, and its
  service; the messages table's latency of a sink's input). Every `interval` from the run's
  start until its end, the controller takes each instance's inputs that finished in the
  interval just gone; the operator's latency is the worst instance's 95th percentile of them
  (workloads.replication.percentile), None when none finished.
- Decision: workloads.replication.Scaler, one per operator, its deployed instances as `first`;
  the reading at the run's end is recorded, but nothing starts or retires then.
- Start: on `place` over `candidates` (the nodes of `replication.to`, less those down and
  those running the operator), weighed by the path latency from the operator's input devices.
  The instance is installed into the node's running agent: one coordinator command (sim.
  migration's Coordinator.command), then it joins the subscription and takes its turns. No
  candidate left: nothing starts, no row.
- Retire: the newest replica; after one command it leaves the subscription (nothing new
  reaches it; what the broker sent it before, it processes).
- Recorded: the `replicas` table (experiments.schema), a row per start or retire when it took
  effect, with the instances after it and the latency (s, NaN: no input) that decided it;
  and in the run's facts, as emu.features.replication writes them, every reading (`samples`: t,
  operator, instances, latency, inputs) and the starts decided with no candidate left
  (`unplaced`).

An instance that a migration or a recovery puts in a watched operator's place is watched from
the next interval on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sim.features.base import Feature
from workloads.recovery import candidates, input_devices, place
from workloads.replication import ReplicationSpec, Scaler, percentile

COLUMNS = ("t", "operator", "action", "node", "instances", "latency", "slo")


@dataclass
class Watched:
    """An operator with an `slo`: its group, its Scaler, and the replicas it started."""

    name: str
    group: object
    scaler: Scaler
    sources: list[str]
    replicas: list = field(default_factory=list)  # newest last
    changing: int = 0  # instances started (+1) or retired (-1) but not yet in effect


class Replication(Feature):
    """Watches operators with an `slo`, starts and retires their replicas (sim.model.Model)."""

    dynamic = True  # replicas join and leave the operators' subscriptions

    def __init__(self, model, spec: ReplicationSpec):
        super().__init__(model, spec)
        self.env = model.env
        workload = model.workload
        self.rows: list[tuple] = []
        # Every reading, as emu.features.replication's manifest keeps them:
        # [t, operator, instances, latency (s) or None, inputs].
        self.samples: list[list] = []
        self.unplaced = 0  # replicas decided with no candidate left to run them
        self.watched: list[Watched] = []
        for operator in model.specs.values():
            if operator.slo is None:
                continue
            group = model.group(operator.name)
            group.share()
            for instance in group.instances:
                instance.latencies = []
            self.watched.append(Watched(
                operator.name, group, Scaler(spec, operator.slo, first=len(group.instances)),
                input_devices(operator.reads, workload, model.topology)))
        self.env.process(self._controller())

    def _controller(self):
        interval, k = self.spec.interval, 1
        while k * interval <= self.model.settings.duration + 1e-9:
            yield self.env.event_at(k * interval)
            for watched in self.watched:
                self._observe(watched, self.env.now)
            k += 1

    def _observe(self, watched: Watched, now: float) -> None:
        latency, inputs = self.latency(watched, now)
        instances = len(watched.group.instances) + watched.changing
        self.samples.append([round(now, 3), watched.name, instances,
                             None if latency is None else round(latency, 4), inputs])
        action = watched.scaler.observe(latency, instances)
        if now >= self.model.settings.duration:
            return  # the run's last interval measured; nothing starts at its end
        if action == "start":
            self.env.process(self._start(watched, latency))
        elif action == "retire" and watched.replicas:
            self.env.process(self._retire(watched, latency))

    def latency(self, watched: Watched, now: float) -> tuple[float | None, int]:
        """The operator's latency in the interval ending now: the worst instance's 95th
        percentile over the inputs it finished in it (None: none finished); and how many
        inputs its instances finished."""
        worst, inputs = None, 0
        for instance in watched.group.instances:
            noted = instance.latencies
            if noted is None:  # put in place by a migration or a recovery
                instance.latencies = []
                continue
            finished = [delay for done, delay in noted if done <= now]
            if len(finished) < len(noted):
                instance.latencies = [entry for entry in noted if entry[0] > now]
            else:
                noted.clear()
            if finished:
                figure = percentile(finished)
                worst = figure if worst is None else max(worst, figure)
                inputs += len(finished)
        return worst, inputs

    def _start(self, watched: Watched, latency: float | None):
        model = self.model
        coordinator = model.coordinator
        down = model.down
        hosting = [instance.node for instance in watched.group.instances]
        options = [node for node in candidates(self.spec.to, model.topology, down, hosting)
                   if node in model.cpus]
        target = place(options, watched.sources, coordinator.latency)
        if target is None:
            self.unplaced += 1
            return
        watched.changing += 1
        yield self.env.timeout(coordinator.command(target))  # installed into its agent
        instance = model.instance_on(watched.group, target, None)
        instance.latencies = []
        watched.group.join(instance)
        watched.replicas.append(instance)
        watched.changing -= 1
        self._record(watched, "start", target, latency)

    def _retire(self, watched: Watched, latency: float | None):
        instance = watched.replicas.pop()
        watched.changing -= 1
        yield self.env.timeout(self.model.coordinator.command(instance.node))
        watched.group.leave(instance)
        instance.latencies = None
        watched.changing += 1
        self._record(watched, "retire", instance.node, latency)

    def _record(self, watched: Watched, action: str, node: str, latency: float | None) -> None:
        self.rows.append((self.env.now, watched.name, action, node,
                          len(watched.group.instances),
                          math.nan if latency is None else latency, watched.scaler.slo))

    def finish(self, tables: dict, facts: dict) -> None:
        """The replicas table, and the controller's readings in the facts (as on emu)."""
        facts["replication"] = {"errors": [], "samples": self.samples,
                                "unplaced": self.unplaced}
        columns = list(zip(*self.rows, strict=True)) or [()] * len(COLUMNS)
        floats = ("t", "latency", "slo")
        tables["replicas"] = {
            name: np.array(values, dtype=float if name in floats
                           else np.int64 if name == "instances" else object)
            for name, values in zip(COLUMNS, columns, strict=True)}
