"""The energy-aware offload (`scenario.energy.offload`, issue 30, item 4): its spec, the rule
every backend applies, and its check.

One rule for every backend, as workloads.recovery's re-placement is: a node offloads its
operators to the cloud when its battery's charge left falls below `battery_low` of the
capacity, or when the energy it is predicted to draw over the next `interval` exceeds
`budget` (EnergyPolicy; `offload_reason`, `offload_time`). The model (sim.energy_policy) and
the emulation (emu.features.energy_offload) decide by it; the battery here feeds the decision only.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

from topologies.errors import SpecError
from topologies.fields import PositiveDuration, Ratio
from workloads.energy_power import CELL_VOLTAGE, battery_nodes
from workloads.faults import Patterns
from workloads.operator_engines import Move, operator_engine
from workloads.pipeline import placement
from workloads.scenario import Strategy


class EnergyPolicy(BaseModel):
    """When a battery node's operators go to the cloud: charge left below `battery_low` (a
    fraction of the capacity), or a predicted draw over the next `interval` above `budget`
    joules (the rule: offload_reason, offload_time)."""

    model_config = ConfigDict(extra="forbid")

    battery_low: Ratio = Field(default=0.2, gt=0.0, lt=1.0, description=(
        "offload when the charge left falls below this fraction of the capacity (20% or 0.2)"))
    budget: float | None = Field(default=None, gt=0.0, allow_inf_nan=False, description=(
        "offload when the present draw held over `interval` exceeds these joules"))
    interval: PositiveDuration = Field(default=1.0, description=(
        "how often the draw is measured and the budget weighed"))


class Offload(EnergyPolicy):
    """`scenario.energy.offload`: gateways on a battery (its capacity in joules, or in mAh at
    `voltage`) whose operators move to `to` when EnergyPolicy's rule says so, by `strategy`
    (default scenario.migration's). The battery here feeds the decision only: the gateway
    keeps running once it is empty (a device's battery, `batteries`, stops it); it does not
    recharge, and the operators do not come back."""

    gateways: Patterns = Field(description="gateway names or patterns, each on its own battery")
    joules: float | None = Field(default=None, allow_inf_nan=False)
    mah: float | None = Field(default=None, allow_inf_nan=False)
    voltage: float = Field(default=CELL_VOLTAGE, allow_inf_nan=False)
    to: str | None = Field(default=None, description=(
        "the node the operators go to (default: the topology's cloud VM, when it has one)"))
    strategy: Strategy | None = Field(default=None, description=(
        "how they move (default: scenario.migration.strategy)"))

    @model_validator(mode="after")
    def _one_capacity(self):
        if (self.joules is None) == (self.mah is None):
            raise ValueError("a capacity: exactly one of joules, mah")
        return self

    @property
    def capacity(self) -> float:
        """Joules."""
        return self.joules if self.joules is not None else self.mah * 3.6 * self.voltage


def offload_reason(policy: EnergyPolicy, capacity: float, drawn: float,
                   watts: float) -> str | None:
    """Why a node with `capacity` joules, `drawn` of them spent, drawing `watts` now, should
    offload: "battery_low", "budget", or None to stay. The prediction is the present draw
    held over the next interval (the node's power does not change unless its load does)."""
    if capacity - drawn < policy.battery_low * capacity:
        return "battery_low"
    if policy.budget is not None and watts * policy.interval > policy.budget:
        return "budget"
    return None


def offload_time(policy: EnergyPolicy, capacity: float, drawn: float, watts: float,
                 now: float = 0.0) -> float:
    """When, at a constant `watts`, the charge left first falls below `battery_low`: the
    time the model schedules the decision at (math.inf when the node draws nothing)."""
    if capacity - drawn < policy.battery_low * capacity:
        return now
    if watts <= 0.0:
        return math.inf
    return now + (capacity - drawn - policy.battery_low * capacity) / watts


def offload_target(offload: Offload, topology) -> str | None:
    """Where the offload sends operators: `to`, else the topology's cloud VM when it has
    exactly one (None when it has none or several: the check asks for `to`)."""
    if offload.to is not None:
        return offload.to
    clouds = topology.of_kind("cloud_vm")
    return clouds[0].name if len(clouds) == 1 else None


def check_offload(spec, topology, offload: Offload) -> None:
    """Gateways on a battery of a capacity > 0, each running an operator the coordinator can
    move (not a follow or Spark one; a strategy its state allows; not one scheduled
    migrations move from there too), to a gateway or cloud VM where it does not run."""
    base = ("scenario", "energy", "offload")
    gateways = battery_nodes(topology, base, offload, "gateways", "gateway",
                             "the battery's charge decides where their operators run")
    target = offload_target(offload, topology)
    if target is None:
        clouds = [node.name for node in topology.of_kind("cloud_vm")]
        raise SpecError(base + ("to",), None, "a node to send the operators to: topology "
                        f"{topology.name} has {len(clouds)} cloud VMs ({', '.join(clouds)}), "
                        "name one")
    node = topology.nodes.get(target)
    if node is None:
        raise SpecError(base + ("to",), target, f"a node of topology {topology.name}")
    if node.kind not in ("gateway", "cloud_vm"):
        raise SpecError(base + ("to",), target, f"a gateway or cloud VM, but {target} is a "
                        f"{node.kind}")
    if target in gateways:
        raise SpecError(base + ("to",), target, "a node other than the gateways it offloads")
    if not topology.of_kind("broker"):
        raise SpecError(base, offload.gateways, "a topology with a broker: a move diverts an "
                        "operator's input there")
    strategy = offload.strategy or spec.scenario.migration.strategy
    strategy_path = (base + ("strategy",) if offload.strategy is not None
                     else ("scenario", "migration", "strategy"))
    moved = {}
    for op in spec.pipeline:
        placed = placement(topology, op.on)
        mine = [g for g in gateways if g in placed]
        if not mine:
            continue
        moved[op.name] = mine
        if op.follow is not None:
            raise SpecError(base + ("gateways",), mine[0], f"gateways without follow "
                            f"operators: {op.name}'s instances are the policy's to move")
        engine = operator_engine(op.engine)
        if engine.moves_by is not Move.AGENTS:  # the offload moves by the agents' protocol
            raise SpecError(base + ("gateways",), mine[0], f"gateways without {engine.title} "
                            f"operators: {op.name} runs on {engine.title}, which the offload "
                            "does not move")
        if target in placed:
            raise SpecError(base + ("to",), target, f"a node {op.name} does not run on "
                            f"already ({', '.join(placed)}): it moves {op.name} from "
                            f"{mine[0]}")
        if strategy == "pause_drain" and op.stateful:
            raise SpecError(strategy_path, strategy, f"pause_transfer or parallel for the "
                            f"offload: {op.name} keeps window state, which pause_drain would "
                            "lose")
        if strategy != "pause_drain" and not op.stateful:
            raise SpecError(strategy_path, strategy, f"pause_drain for the offload: "
                            f"{op.name} has no window state to transfer or synchronise "
                            "(scenario.energy.offload.strategy: pause_drain)")
    if not moved:
        raise SpecError(base + ("gateways",), offload.gateways, "gateways an operator of the "
                        "pipeline runs on: the offload moves their operators")
    for i, plan in enumerate(spec.scenario.migrations):
        mine = moved.get(plan.operator, [])
        source = plan.source if plan.source is not None else None
        if mine and (source in mine or source is None):
            raise SpecError(("scenario", "migrations", i, "operator"), plan.operator,
                            f"an operator the offload does not move: it moves {plan.operator} "
                            f"from {', '.join(mine)} when the battery says so")
