"""The energy-aware offload in the model: a battery gateway's operators go to the cloud when
workloads.energy's rule (`offload_reason`, `offload_time`) says so.

The rule is the shared part; this only measures and acts. Every `interval` the gateway's
draw is measured from its CPU's admitted work (sim.stations.Cpu.work: the utilisation over
the interval, turned into the hardware's by workloads.energy.hardware_share and into watts by
its power profile), added to what it drew, and the rule asked; between checks the next one is
brought forward to `offload_time` at the present draw, so a gateway whose draw holds steady
moves at the instant its charge crosses the threshold, not at the next interval's end. The
move is the model's migration coordinator's (`Coordinator.start`, the strategy given or
`scenario.migration.strategy`), one per operator group with an instance on the gateway.
Attached through public parts only (model.env, model.cpus, model.topology, model.every_group,
model.coordinator); no way back (a battery does not recharge in the model).
"""

from __future__ import annotations

import math

from workloads.energy import (
    EnergyPolicy,
    EnergySpec,
    hardware_share,
    offload_reason,
    offload_time,
    resolve_power,
)


class EnergyOffload:
    """One battery gateway watched by the rule; `moved_at` and `reason` once it offloaded."""

    def __init__(self, model, policy: EnergyPolicy, gateway: str, capacity: float,
                 target: str = "cloud", energy: EnergySpec | None = None,
                 strategy: str | None = None):
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
        self.capacity, self.target, self.strategy, self.power = capacity, target, strategy, power
        cpu = model.cpus[gateway]
        self.cpu = cpu
        self.factor = hardware_share(cpu.capacity, cpu.speed, node.profile)
        self.drawn = 0.0
        self.watts = power.watts(0.0)
        self.moved_at = math.inf
        self.reason: str | None = None
        self.moves = 0
        model.env.process(self._watch())

    def _watch(self):
        env, policy = self.model.env, self.policy
        last_t, last_work = env.now, self.cpu.work
        while True:
            due = min(env.now + policy.interval,
                      offload_time(policy, self.capacity, self.drawn, self.watts, env.now))
            yield env.timeout(max(due - env.now, 0.0))
            dt = env.now - last_t
            if dt > 0:
                u = (self.cpu.work - last_work) / (dt * self.cpu.capacity)
                self.watts = self.power.watts(u * self.factor)
                self.drawn += dt * self.watts
            last_t, last_work = env.now, self.cpu.work
            # A hair of float slack: at the crossing the charge left equals the threshold.
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
                    self.model.coordinator.start(group, instance, self.target, self.strategy)
