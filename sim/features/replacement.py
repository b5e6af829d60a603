"""Re-placement at run time in the model (`placement.replace`): every period, what the run
observed goes to the re-placement's planner (workloads.placement.replace.Replanner), and the
moves it decides go by the model's migration coordinator.

The observation is each stream's rate at each gateway its devices publish through (the
messages its sources emitted over the period; a device's gateway as the topology has it) and
the nodes down now (sim.model.Model.down), with the moves that failed since the last period.
A move is an operator's instance on one node sent to another: for every group of the
operator (one; sim.model.Model.groups_of), its instance on the source, through the queue
that runs one group's moves one after another (sim.migration.OneAtATime), by
placement.replace.strategy or scenario.migration.strategy. Nothing is decided at or after the
run's duration. The planner's steps become the `replacements` table and the `placements`
table's rows at run time (experiments.runner adds the first decision's).

The planner comes ready from the experiment layer (experiments.placement: the policy, the
problem, the first decision); this feature only observes and acts. Dynamic: it moves
instances while the run goes on.
"""

from __future__ import annotations

from sim.features.base import Feature
from sim.migration import OneAtATime
from topologies.routing import gateway_of
from workloads.placement.replace import Move, Observation, Replanner


class Replacement(Feature):
    """The planner asked every `period`; its moves made by the coordinator."""

    dynamic = True

    def __init__(self, model, spec: Replanner):
        super().__init__(model, spec)
        self.planner = spec
        self.queue = OneAtATime(model)
        self.period = spec.settings.period
        self.strategy = spec.settings.strategy
        topology = model.topology
        # Each source's (stream, the gateway its device publishes through), and its count.
        self.sources = [(source, (source.stream.name,
                                  gateway_of(topology, model.node_names[source.device_index])))
                        for source in model.sources]
        self.failed: list[Move] = []
        model.env.process(self._watch())

    def _emitted(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for source, key in self.sources:
            if key[1] is not None:
                counts[key] = counts.get(key, 0) + source.emitted
        return counts

    def _watch(self):
        env, duration = self.model.env, self.model.settings.duration
        last = self._emitted()
        while env.now + self.period < duration:  # nothing is decided at the run's end
            yield env.timeout(self.period)
            now = self._emitted()
            rates = {key: (count - last.get(key, 0)) / self.period
                     for key, count in now.items()}
            last = now
            observation = Observation(env.now, rates, frozenset(self.model.down),
                                      tuple(self.failed))
            self.failed = []
            for move in self.planner.step(observation).moves:
                self._move(move)

    def _move(self, move: Move) -> None:
        """The operator's instance on move.source, in each of its groups, to move.target."""
        moving = [(group, group.on_node[move.source])
                  for group in self.model.groups_of(move.operator)
                  if move.source in group.on_node]
        if not moving:
            self._ended(move, False)
            return
        left, ok = [len(moving)], [True]

        def then(done: bool) -> None:
            ok[0] = ok[0] and done
            left[0] -= 1
            if left[0] == 0:
                self._ended(move, ok[0])

        for group, instance in moving:
            self.queue.start(group, instance, move.target, self.strategy, then)

    def _ended(self, move: Move, ok: bool) -> None:
        failed = self.planner.ended(move, ok)
        if failed is not None:
            self.failed.append(failed)

    def finish(self, tables: dict, facts: dict) -> None:
        self.planner.record(tables, facts, len(self.failed))
