"""What happens to a running pipeline over time: operator migrations and how they are carried out.

Shared by the simulated and the emulated backends, so both read one scenario the same way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from topologies.errors import SpecError
from topologies.fields import Bandwidth, Name, NonNegativeDuration, Size
from workloads.operator_engines import Move, operator_engine
from workloads.pipeline import check_placement

Strategy = Literal["pause_drain", "pause_transfer", "parallel"]


class MigrationSettings(BaseModel):
    """How migrations are carried out (thesis chapters 5 and 6) and what they cost."""

    model_config = ConfigDict(extra="forbid")

    strategy: Strategy = "pause_transfer"
    launch: NonNegativeDuration = Field(default=2.0, description="start-up of the target")
    command: NonNegativeDuration = Field(
        default=10e-3, description="an agent's handling of one coordinator command")
    housekeeping: NonNegativeDuration = Field(
        default=0.0, description="clean-up after the switch, before the migration ends")
    chunk: Size = Field(default=1024 * 1024, gt=0, description="bytes per state-store write")
    chunk_overhead: NonNegativeDuration = Field(
        default=20e-3, description="per chunk: znode write, watch notification, read, delete")
    state_per_event: Size = Field(
        default=64, description="bytes of state per event held in the open window")
    state_base: Size = 1024
    restore_bandwidth: Bandwidth = Field(
        default=400e6, description="how fast the target loads transferred state")
    sync: int = Field(default=2, ge=0, description="parallel: synchronisation factor S")
    store: str | None = Field(
        default=None, description="node of the state store (default: the first coordinator, "
                                  "else the first broker)")
    spark: Literal["checkpoint", "export"] = Field(
        default="checkpoint", description="how a Spark query's state moves with pause_transfer "
        "(emu): its checkpoint copied into a warm standby, or its per-sensor state exported "
        "into a new query's initialState")


class ScheduledMigration(BaseModel):
    """Move an operator's instance at a given time."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    at: NonNegativeDuration
    within_window: bool = Field(
        default=False, description="add a random phase in [0, window) to `at`, as a migration "
                                   "starts at any point in a window")
    operator: Name
    source: str | None = Field(default=None, alias="from",
                               description="the instance to move (default: the only one)")
    target: str = Field(alias="to")
    strategy: Strategy | None = None



class PolicySpec(BaseModel):
    """When and where a follow operator's per-user instance moves as its user moves."""

    model_config = ConfigDict(extra="forbid")

    operator: Name = Field(description="a pipeline operator with `follow: users`")
    kind: Literal["latency_threshold", "nearest_gateway"] = "latency_threshold"
    threshold: NonNegativeDuration = Field(
        default=40e-3, description="latency_threshold: move when the user's latency to its "
                                   "instance exceeds this plus the hysteresis")
    hysteresis: NonNegativeDuration = Field(
        default=10e-3, description="latency_threshold: margin above the threshold; "
                                   "nearest_gateway: none")
    capacity: int = Field(default=64, ge=1, description="follow instances a gateway may host")
    fallback: list[str] = Field(
        default_factory=lambda: ["cloud"], min_length=1,
        description="where an instance goes when no gateway fits (names, patterns, kinds)")
    strategy: Strategy | None = None


def check_settings(spec, topology) -> None:
    """`scenario.migration`: the state store on a node of the topology."""
    store = spec.scenario.migration.store
    if store is not None and store not in topology.nodes:
        raise SpecError(("scenario", "migration", "store"), store,
                        "a node of the topology to hold the state store")


def span(settings: MigrationSettings) -> float:
    """The least time a migration takes, whatever its state: the target's start-up, one
    coordinator command and the clean-up after the switch (thesis chapter 5's timeline: the
    transfer and the drain only add to it). Two migrations of one instance closer than this
    would overlap: the second would move an instance still being moved."""
    return settings.launch + settings.command + settings.housekeeping


def check_migrations(spec, topology) -> None:
    """`scenario.migrations`: each moves an operator's instance, at a time inside the run,
    from where it runs at that time (after the earlier moves) to a node where it does not,
    by a strategy its state allows, never while an earlier move of the instance may still run
    (`span`)."""
    plans = spec.scenario.migrations
    settings = spec.scenario.migration
    operators = {op.name: op for op in spec.pipeline}
    duration = spec.run.duration
    if plans and not topology.of_kind("broker"):
        raise SpecError(("scenario", "migrations"), len(plans),
                        "a topology with a broker: migrations divert an operator's input there")
    for i, plan in enumerate(plans):
        path = ("scenario", "migrations", i)
        op = operators.get(plan.operator)
        if op is None:
            raise SpecError(path + ("operator",), plan.operator,
                            f"an operator of the pipeline ({', '.join(operators)})")
        if plan.at >= duration:
            raise SpecError(path + ("at",), plan.at,
                            f"a time before the run ends (run.duration: {duration:g} s)")
        if plan.within_window and op.window is not None and (
                plan.at + op.window.size > duration):
            raise SpecError(path + ("at",), plan.at, f"a time a window ({op.window.size:g} s, "
                            f"within_window) before the run ends (run.duration: "
                            f"{duration:g} s)")
        check_placement(topology, path + ("to",), plan.target)
        if plan.target not in topology.nodes:
            raise SpecError(path + ("to",), plan.target, "one node's name")
        strategy = plan.strategy or settings.strategy
        if operator_engine(op.engine).moves_by is Move.STANDBY:
            _check_spark_move(topology, path, op.name, plan.target, strategy, settings.spark)
        elif strategy == "pause_drain" and op.stateful:
            raise SpecError(path + ("strategy",), strategy,
                            f"pause_transfer or parallel: {op.name} keeps window state, which "
                            "pause_drain would lose")
        elif strategy != "pause_drain" and not op.stateful:
            raise SpecError(path + ("strategy",), strategy,
                            f"pause_drain: {op.name} has no window state to transfer or "
                            "synchronise")
    _check_moves(spec, topology)


def _check_moves(spec, topology) -> None:
    """The moves in time order, from where each instance runs: a move's `from` is where the
    operator runs at its time, its `to` where it does not, and it starts `span` after the
    last move of that instance began (a move within a window may start up to a window
    late)."""
    operators = {op.name: op for op in spec.pipeline}
    where = {name: [n for j, w in enumerate(op.on)
                    for n in check_placement(topology, ("pipeline", j, "on"), w)]
             for name, op in operators.items()}
    least = span(spec.scenario.migration)
    last: dict[tuple[str, str], tuple[int, float]] = {}  # (operator, node) -> (index, end)
    order = sorted(range(len(spec.scenario.migrations)),
                   key=lambda i: (spec.scenario.migrations[i].at, i))
    for i in order:
        plan = spec.scenario.migrations[i]
        path = ("scenario", "migrations", i)
        op = operators[plan.operator]
        if op.follow is not None:
            continue  # per-user instances: the policy moves them
        placed = where[op.name]
        source = plan.source if plan.source is not None else placed[0]
        if plan.source is not None and plan.source not in placed:
            raise SpecError(path + ("from",), plan.source,
                            f"a node {op.name} runs on at {plan.at:g} s "
                            f"({', '.join(placed)})")
        if plan.target in placed:
            raise SpecError(path + ("to",), plan.target,
                            f"a node other than where {op.name} runs at {plan.at:g} s "
                            f"({', '.join(placed)}): a move to where it is moves nothing")
        _check_source_alive(spec, topology, path, plan, source)
        _check_target_up(spec, topology, path, plan)
        earlier = last.get((op.name, source))
        if earlier is not None and plan.at < earlier[1]:
            raise SpecError(path + ("at",), plan.at, f"a time at least {earlier[1]:g} s: "
                            f"scenario.migrations[{earlier[0]}] moves {op.name} to {source} "
                            f"and takes at least {least:g} s (scenario.migration: launch + "
                            "command + housekeeping)")
        window = op.window.size if plan.within_window and op.window is not None else 0.0
        placed[placed.index(source)] = plan.target
        last[(op.name, plan.target)] = (i, plan.at + window + least)


def _check_source_alive(spec, topology, path: tuple, plan: ScheduledMigration,
                        source: str) -> None:
    """A move starts from a live instance: not from a node a fault has crashed at its time,
    nor (with scenario.recovery, which re-places what ran there) from one crashed before."""
    from workloads.faults import resolve

    recovery = spec.scenario.recovery
    for fault in resolve(spec.scenario.faults, topology, spec.run.duration):
        if fault.kind != "crash" or source not in fault.nodes or fault.t_start > plan.at:
            continue
        down = fault.t_end is None or fault.t_end > plan.at
        # Recovery notices a crash one session timeout after it at the earliest: a shorter
        # one may pass unnoticed, a longer one has its operators re-placed elsewhere.
        replaced = recovery is not None and (
            fault.t_end is None or fault.t_end - fault.t_start >= recovery.session_timeout)
        if down or replaced:
            why = "it is down" if down else "scenario.recovery has re-placed what ran there"
            raise SpecError(path + ("at",), plan.at, f"a time when {plan.operator} still runs "
                            f"on {source}: scenario.faults[{fault.index}] is a "
                            f"{fault.describe()}, and {why}")


def _check_target_up(spec, topology, path: tuple, plan: ScheduledMigration) -> None:
    """A move goes to a node that is up when it starts (a crash there at that time would
    leave the operator on no live node)."""
    from workloads.faults import resolve

    for fault in resolve(spec.scenario.faults, topology, spec.run.duration):
        if fault.kind == "crash" and plan.target in fault.nodes and fault.t_start <= plan.at and (
                fault.t_end is None or fault.t_end > plan.at):
            raise SpecError(path + ("to",), plan.target, f"a node that is up at {plan.at:g} s: "
                            f"scenario.faults[{fault.index}] is a {fault.describe()}")


def _check_spark_move(topology, path: tuple, operator: str, target: str,
                      strategy: str, way: str) -> None:
    """A Spark query moves with its per-sensor state (emu.features.moves.spark_query; on sim, a
    pause and the target's start-up), from cloud VM to cloud VM."""
    if strategy != "pause_transfer":
        raise SpecError(path + ("strategy",), strategy,
                        f"pause_transfer: {operator} is a Spark query, whose per-sensor state "
                        f"moves with it (by {way}: scenario.migration.spark)")
    if topology.nodes[target].kind != "cloud_vm":
        raise SpecError(path + ("to",), target, f"a cloud VM: {operator} is a Spark query, "
                        f"and Spark runs on cloud VMs, not on a {topology.nodes[target].kind}")


def check_policy(spec, topology) -> None:
    """`scenario.policy`: a follow operator to move, and fallbacks that run code."""
    policy = spec.scenario.policy
    if policy is None:
        return
    names = {op.name: op for op in spec.pipeline}
    if policy.operator not in names or not names[policy.operator].follow:
        raise SpecError(("scenario", "policy", "operator"), policy.operator,
                        "a pipeline operator with `follow: users`")
    for j, where in enumerate(policy.fallback):
        check_placement(topology, ("scenario", "policy", "fallback", j), where)

