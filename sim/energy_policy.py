"""The energy-aware offload in the model: a battery gateway's operators go to the cloud when
workloads.energy_offload's rule (`offload_reason`, `offload_time`) says so.

The rule is the shared part; this only measures and acts. Every `interval` the gateway's
draw is measured from its CPU's admitted work (sim.stations.Cpu.work: the utilisation over
the interval, turned into the hardware's by workloads.energy_power.hardware_share and into
watts by its power profile), added to what it drew, and the rule asked; within an interval the
charge runs down at the last measured draw, and when `offload_time` at that draw falls inside
it the move is made then, so a gateway whose draw holds steady moves at the instant its charge
crosses the threshold, not at the next interval's end. The
move is the model's migration coordinator's (`Coordinator.start`, the strategy given or
`scenario.migration.strategy`), one per operator group with an instance on the gateway.
Attached through public parts only (model.env, model.cpus, model.topology, model.every_group,
model.coordinator); no way back (a battery does not recharge in the model). An experiment
asks for it with `scenario.energy.offload` (workloads.energy_offload.Offload), which
sim.features.energy turns into one watcher per gateway; `fact()` is what the run records.
"""

from __future__ import annotations

import math

from sim.migration import OneAtATime
from workloads.energy import EnergySpec, resolve_power
from workloads.energy_offload import EnergyPolicy, offload_reason, offload_time
from workloads.energy_power import hardware_share


class EnergyOffload:
    """One battery gateway watched by the rule; `moved_at` and `reason` once it offloaded."""

    def __init__(self, model, policy: EnergyPolicy, gateway: str, capacity: float,
                 target: str = "cloud", energy: EnergySpec | None = None,
                 strategy: str | None = None, moves: OneAtATime | None = None):
        """`moves`: the queue of moves shared by the run's watchers (its own without one)."""
        node = model.topology.nodes.get(gateway)
        if node is None or gateway not in model.cpus:
            raise ValueError(f"gateway: {gateway!r} is not a node with a CPU of the topology")
        if target not in model.topology.nodes:
            raise ValueError(f"target: {target!r} is not a node of the topology")
        if model.settings.direct_handover and not model.dynamic:
            # The model's direct hand-over is exact only for instances that never move.
            raise ValueError("a model built with direct_handover=False (or a dynamic "
                             "feature): the offload moves operators while it runs")
        power = resolve_power(energy or EnergySpec(), node.profile_name)
        if power is None:
            raise ValueError(f"gateway: {gateway!r}'s profile {node.profile_name!r} has no power "
                             f"profile")
        self.model, self.policy, self.gateway = model, policy, gateway
        self.queue = moves if moves is not None else OneAtATime(model)
        self.capacity, self.target, self.strategy, self.power = capacity, target, strategy, power
        cpu = model.cpus[gateway]
        self.cpu = cpu
        self.factor = hardware_share(cpu.capacity, cpu.speed, node.profile)
        self.drawn = 0.0
        self.watts = power.watts(0.0)
        self.moved_at = math.inf
        self.reason: str | None = None
        self.moves = 0
        self.operators: list[str] = []  # the groups it moved an instance of
        model.env.process(self._watch())

    def _watch(self):
        env, policy = self.model.env, self.policy
        duration = self.model.settings.duration
        last_t, last_work = env.now, self.cpu.work
        while last_t < duration:  # the run's time, as the energy table counts (not its drain)
            # The draw is measured over whole intervals: within one, the work comes in lumps
            # (a reading's CPU when it is admitted), and a few milliseconds' measure would say
            # idle or busy, not the draw. Between measures the charge runs down at the last
            # measured draw, as a battery gauge's reading does.
            end = min(last_t + policy.interval, duration)
            crossing = offload_time(policy, self.capacity, self.drawn, self.watts, last_t)
            if crossing < end:
                yield env.timeout(max(crossing - env.now, 0.0))
                drawn = self.drawn + (env.now - last_t) * self.watts
                # A hair of float slack: at the crossing the charge left equals the threshold.
                reason = offload_reason(policy, self.capacity, drawn + 1e-9, self.watts)
                if reason is not None:
                    self.drawn = drawn
                    self._offload(reason)
                    return
            yield env.timeout(max(end - env.now, 0.0))
            u = (self.cpu.work - last_work) / ((env.now - last_t) * self.cpu.capacity)
            self.watts = self.power.watts(u * self.factor)
            self.drawn += (env.now - last_t) * self.watts
            last_t, last_work = env.now, self.cpu.work
            if env.now >= duration:
                return  # the last interval measured; nothing is decided at the run's end
            reason = offload_reason(policy, self.capacity, self.drawn + 1e-9, self.watts)
            if reason is not None:
                self._offload(reason)
                return

    def _offload(self, reason: str) -> None:
        self.moved_at, self.reason = self.model.env.now, reason
        for group in self.model.every_group():
            for instance in list(group.instances):
                if instance.node == self.gateway:
                    self.moves += 1
                    self.operators.append(group.name)
                    self.queue.start(group, instance, self.target, self.strategy)

    def fact(self) -> dict:
        """The run's record of this gateway: when it offloaded (None: it did not) and why,
        what it had drawn by then (else over the run's duration) at what draw, what moved."""
        moved = self.moved_at < math.inf
        return {"gateway": self.gateway, "capacity_j": self.capacity,
                "t": self.moved_at if moved else None, "reason": self.reason,
                "drawn_j": self.drawn, "watts": self.watts, "target": self.target,
                "operators": list(self.operators)}
