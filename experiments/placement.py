"""The experiment's placement, decided once before the run: the problem built from the
topology, the workload and the model's costs, the policy asked, the resolved spec every
backend runs, and the `placements` table it writes.

Only operators written `on: auto` are the policy's (workloads.placement.spec); each becomes
an operator `on` the nodes the policy chose, so sim, emu and hybrid run the same places and
neither imports the policy. Costs are the model's (sim.costs: the written cost, a task's
reference, a calibration's measured figure, a Spark job's per-message share), at the
operator's first candidate, so the policy sees the figures the model will charge.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from experiments.spec import ExperimentSpec
from topologies.errors import SpecError
from topologies.model import Topology
from topologies.routing import NoRoute, Routes, gateway_of, nearest
from topologies.routing import latency as path_latency
from workloads.broker_scaling import first_brokers
from workloads.energy import EnergySpec, resolve_power
from workloads.energy_power import LinkEnergy, energy_per_bit
from workloads.operator_engines import Move, operator_engine
from workloads.pipeline import KIND_WORDS, check_placement, reads_from, topic_filter
from workloads.placement import problem as pp
from workloads.placement.policy import PolicyError, decide, make_policy, policy_class
from workloads.placement.problem import PINNED
from workloads.placement.replace import PLACEMENT_COLUMNS, Replanning, placement_row
from workloads.placement.spec import AUTO


def auto_operators(spec: ExperimentSpec) -> list[int]:
    """The pipeline indices of the operators written `on: auto`."""
    return [i for i, op in enumerate(spec.pipeline) if AUTO in op.on]


@dataclass(frozen=True)
class Placed:
    """A spec as the backends run it (`on: auto` resolved), the policy's decision (None
    without a placement block) and, with placement.replace, what the run re-places from."""

    spec: ExperimentSpec
    decision: pp.Decision | None = None
    replanning: Replanning | None = None


def placed(spec: ExperimentSpec, topology: Topology) -> Placed:
    """`resolve`, or the spec as it is without placement or `on: auto`."""
    if spec.placement is None and not auto_operators(spec):
        return Placed(spec)
    return resolve(spec, topology)


def resolve(spec: ExperimentSpec, topology: Topology) -> Placed:
    """The spec with each `on: auto` operator on the nodes its policy chose, the decision
    and the re-placement's start; the spec as it is without a `placement` block. A SpecError
    names the field and value of a bad input: `on: auto` without a block, a pin outside the
    candidates, an operator that fits nowhere, a policy that cannot be had, a re-placement
    on a backend that has none."""
    autos = auto_operators(spec)
    if spec.placement is None:
        if autos:
            raise SpecError(("pipeline", autos[0], "on"), AUTO,
                            "a placement block (placement.policy) to decide `on: auto`")
        return Placed(spec)
    for i in autos:
        if spec.pipeline[i].on != [AUTO]:
            raise SpecError(("pipeline", i, "on"), spec.pipeline[i].on,
                            "auto alone (the policy decides), or nodes without auto")
    _check_pins(spec, topology)
    problem = build_problem(spec, topology)
    try:
        policy = make_policy(spec.placement.policy, _settings(spec))
    except PolicyError as error:
        raise SpecError(("placement", "policy"), spec.placement.policy, str(error)) from None
    try:
        decision = decide(policy, problem)
    except pp.Unplaceable as error:
        index = next(i for i, op in enumerate(spec.pipeline) if op.name == error.operator)
        raise SpecError(("pipeline", index), error.operator,
                        f"an operator that fits on a candidate node: {error.what} "
                        f"({error.detail})") from None
    except PolicyError as error:  # what a policy refuses, in its own words (decide)
        raise SpecError(("placement", "policy"), spec.placement.policy,
                        f"a policy that can place this pipeline: {error}") from None
    pipeline = [op.model_copy(update={"on": list(decision.nodes[op.name]), "among": None})
                if i in autos else op for i, op in enumerate(spec.pipeline)]
    return Placed(spec.model_copy(update={"pipeline": pipeline}), decision,
                  _replanning(spec, problem, decision))


# The backends that re-place at run time (sim.features.replacement, emu.features.replacement).
# Hybrid's model drives the containers' migrations by its own policies (experiments.hybrid).
REPLACED_ON = ("sim", "emu")


def _replanning(spec: ExperimentSpec, problem: pp.Problem,
                decision: pp.Decision) -> Replanning | None:
    """With placement.replace: the re-placement's start, the operators it may move (those
    the policy placed, `on: auto`, that the migrations can move: not a follow operator's,
    not one an engine other than the agents' runs: workloads.operator_engines); refused on a
    backend without re-placement."""
    replace = spec.placement.replace
    if replace is None:
        return None
    if spec.run.backend not in REPLACED_ON:
        raise SpecError(("placement", "replace"), replace.model_dump(mode="json"),
                        f"run.backend {' or '.join(REPLACED_ON)}: re-placement at run time "
                        f"runs on the model and on the containers; on {spec.run.backend} the "
                        "placement stays as decided before the run (leave placement.replace "
                        "out)")
    placed = {op.name for op in problem.operators if op.pinned is None}
    movable = frozenset(op.name for op in spec.pipeline if op.name in placed
                        and op.follow is None
                        and operator_engine(op.engine).moves_by is Move.AGENTS)
    return Replanning(spec.placement.policy, _settings(spec), problem, decision, replace,
                      movable)


def _check_pins(spec: ExperimentSpec, topology: Topology) -> None:
    """Every pinned operator's nodes among placement.candidates: the nodes the experiment
    lets operators run on (a pin elsewhere is a mistake the block would hide)."""
    allowed: dict[str, None] = {}
    for j, where in enumerate(spec.placement.candidates):
        allowed.update(dict.fromkeys(_named(topology, ("placement", "candidates", j), where)))
    for i, op in enumerate(spec.pipeline):
        if AUTO in op.on:
            continue
        for j, where in enumerate(op.on):
            outside = [n for n in check_placement(topology, ("pipeline", i, "on", j), where)
                       if n not in allowed]
            if outside:
                raise SpecError(("pipeline", i, "on", j), where,
                                "nodes among placement.candidates ("
                                + ", ".join(list(allowed)[:8])
                                + (", ..." if len(allowed) > 8 else "")
                                + f"); {outside[0]} is not")


def _settings(spec: ExperimentSpec) -> dict:
    """The policy's settings, with the solver's limits for a policy that takes them."""
    settings = dict(spec.placement.settings)
    if policy_class(spec.placement.policy).exact:
        settings.setdefault("time_limit", spec.placement.solver.time_limit)
        settings.setdefault("gap", spec.placement.solver.gap)
    return settings


def build_problem(spec: ExperimentSpec, topology: Topology) -> pp.Problem:
    """The frozen problem: operators in pipeline order with their flows and the model's
    costs, the candidate nodes with their hardware and power, the paths between them."""
    from sim.costs import Costs  # the model's cost rule, the one source of every figure
    from workloads import calibration

    placement = spec.placement
    cal = calibration.load(spec.run.calibration).calibration if spec.run.calibration else None
    costs = Costs(topology, spec.run.driver_cost, cal)
    candidates = _candidates(spec, topology)
    entries = {stream.name: _entries(stream, topology) for stream in spec.workload.streams}
    hosts = {n for nodes in candidates.values() for n in nodes} | {
        at for found in entries.values() for at, _ in found}
    # The brokers publishers take at the start (spares join later), as the backends pick them.
    brokers = first_brokers(topology, {entry.spare for entry in spec.scenario.broker_scaling})
    names = [n for n in topology.nodes if n in hosts or n in brokers]
    routes = Routes(topology)
    operators = tuple(_operator(spec, i, op, entries, costs, candidates[i])
                      for i, op in enumerate(spec.pipeline))
    weights = pp.Weights(placement.objective.latency, placement.objective.network,
                         placement.objective.energy)
    latency, bandwidth, joules = _paths(topology, routes, names, spec)
    hosting = [n for n in names if n in hosts]
    batteries = _batteries(spec, topology)
    nodes = tuple(_node(topology, name, costs, routes, hosting, spec, batteries,
                        nearest(routes, name, brokers) if brokers else None) for name in names)
    return pp.Problem(operators, nodes, latency, bandwidth, joules, weights, spec.run.seed)


def _candidates(spec: ExperimentSpec, topology: Topology) -> dict[int, list[str]]:
    """Each operator's candidate nodes: its pins, or (auto) its `among` or the block's."""
    found: dict[int, list[str]] = {}
    for i, op in enumerate(spec.pipeline):
        if AUTO in op.on:
            among, path = ((op.among, ("pipeline", i, "among")) if op.among is not None
                           else (spec.placement.candidates, ("placement", "candidates")))
        else:
            among, path = op.on, ("pipeline", i, "on")
        nodes: list[str] = []
        for j, where in enumerate(among):
            nodes += _named(topology, (*path, j), where)
        if not nodes:
            raise SpecError(path, among, "candidates that name nodes of the topology")
        found[i] = list(dict.fromkeys(nodes))
    return found


def _named(topology: Topology, path: tuple, where: str) -> list[str]:
    """The nodes a candidate names (check_placement's rules), none for a kind word of which
    the topology has none (the default candidates name cloud VMs a topology may lack)."""
    if where in KIND_WORDS and not topology.of_kind(KIND_WORDS[where]):
        return []
    return check_placement(topology, path, where)


def _entries(stream, topology: Topology) -> list[tuple[str, int]]:
    """(gateway, devices) a stream's readings enter the network through."""
    counts: dict[str, int] = {}
    for pattern in stream.sources:
        for device in topology.match(pattern):
            gateway = gateway_of(topology, device)
            if gateway is not None:
                counts[gateway] = counts.get(gateway, 0) + 1
    return list(counts.items())


def _operator(spec: ExperimentSpec, index: int, op, entries: dict[str, list[tuple[str, int]]],
              costs, candidates: list[str]) -> pp.Operator:
    """One operator of the problem: its upstream operators, its flows, its model cost."""
    upstream = tuple(other.name for other in spec.pipeline[:index]
                     if other.writes is not None and _reads(op.reads, other.writes))
    flows = []
    for stream in spec.workload.streams:
        if _reads(op.reads, stream.name):
            flows += [pp.Flow(at, stream.rate * devices, stream.size, stream.name)
                      for at, devices in entries[stream.name]]
    cost = costs.operator(op, candidates[0])
    per_message = cost.message + (cost.batch.per_message if cost.batch is not None else 0.0)
    in_size = next((s.size for s in spec.workload.streams if _reads(op.reads, s.name)), 200)
    pinned = None if AUTO in op.on else tuple(candidates)
    return pp.Operator(op.name, per_message, op.selectivity, in_size,
                       op.out_size or in_size, 0, upstream, tuple(flows), tuple(candidates),
                       pinned)


def _reads(reads: Iterable[str], stream: str) -> bool:
    """Whether an operator reading `reads` takes what is written to stream `stream`."""
    return any(reads_from(topic_filter(read), stream) for read in reads)


def _paths(topology: Topology, routes: Routes, names: list[str], spec: ExperimentSpec):
    """Latency (s), the narrowest link (bit/s) and joules per bit of every pair's path."""
    energy = spec.scenario.energy
    links = energy.links if energy is not None else LinkEnergy()
    latency, bandwidth, joules = [], [], []
    for a in names:
        row_l, row_b, row_j = [], [], []
        for b in names:
            try:
                path = routes.path(a, b)
            except NoRoute:
                row_l.append(math.inf), row_b.append(0.0), row_j.append(math.inf)
                continue
            edges = [topology.graph.edges[x, y] for x, y in zip(path, path[1:], strict=False)]
            row_l.append(path_latency(topology, path))
            row_b.append(min((e["link"].bandwidth or math.inf for e in edges), default=math.inf))
            row_j.append(sum(energy_per_bit(links, topology, x, y)[1]
                             for x, y in zip(path, path[1:], strict=False)))
        latency.append(tuple(row_l)), bandwidth.append(tuple(row_b)), joules.append(tuple(row_j))
    return tuple(latency), tuple(bandwidth), tuple(joules)


def _node(topology: Topology, name: str, costs, routes: Routes, hosts: list[str],
          spec: ExperimentSpec, batteries: dict[str, float], broker: str | None) -> pp.Node:
    """A node of the problem: the model's cores and speed, its parent toward the cloud among
    the hosts (candidates and flow nodes, not the brokers added for routing), power, and its
    broker (the nearest, topologies.routing.nearest's rule, as sim.model's broker_for)."""
    node = topology.nodes[name]
    cpu = costs.cpu(node)
    power = _power(spec, node)
    return pp.Node(name, node.kind, cpu.speed, cpu.cores, node.site,
                   _parent(topology, routes, name, hosts), power[0], power[1],
                   batteries.get(name), max(0, node.profile.memory - node.profile.base_memory),
                   broker)


def _parent(topology: Topology, routes: Routes, name: str, names: list[str]) -> str | None:
    """The next node of the problem on the way from `name` to its nearest cloud VM."""
    clouds = [n.name for n in topology.of_kind("cloud_vm")]
    if not clouds or topology.nodes[name].kind == "cloud_vm":
        return None
    cloud = nearest(routes, name, clouds)
    if cloud is None:
        return None
    known = set(names)
    return next((n for n in routes.path(name, cloud)[1:] if n in known), None)


def _power(spec: ExperimentSpec, node) -> tuple[float, float]:
    """(idle, busy) watts as the energy feature resolves them (workloads.energy.resolve_power:
    the experiment's profile over the shipped one); (0, 0) where neither knows the hardware."""
    power = resolve_power(spec.scenario.energy or EnergySpec(), node.profile_name)
    return (power.idle, power.max) if power is not None else (0.0, 0.0)


def _batteries(spec: ExperimentSpec, topology: Topology) -> dict[str, float]:
    """The gateways on a battery (scenario.energy.offload) -> its joules; none on mains."""
    energy = spec.scenario.energy
    offload = energy.offload if energy is not None else None
    if offload is None:
        return {}
    return dict.fromkeys(topology.select(offload.gateways), offload.capacity)


def table(decision: pp.Decision | None, later: dict[str, list] | None = None
          ) -> dict[str, list]:
    """The `placements` table's columns: one row per operator the decision placed, at t = 0,
    then `later`'s rows (a run's re-placements: workloads.placement.replace)."""
    rows: dict[str, list] = {k: [] for k in PLACEMENT_COLUMNS}
    if decision is not None:
        _first_rows(decision, rows)
    for key, values in (later or {}).items():
        rows[key] = list(rows[key]) + list(values)
    return rows


def _first_rows(decision: pp.Decision, rows: dict[str, list]) -> None:
    for operator, nodes in decision.nodes.items():
        placement_row(rows, 0.0, operator, nodes, decision.policy, decision.objective,
                      decision.seconds, decision.reasons.get(operator, ""))


def described(decision: pp.Decision, replanning: Replanning | None = None) -> str:
    """A decision in a line a person reads: the policy, its objective and time, where each
    operator it placed went (pins left out), and how it re-places at run time, if it does."""
    placed = "; ".join(f"{op} on {_few(nodes)}" for op, nodes in decision.nodes.items()
                       if decision.reasons.get(op) != PINNED)
    gap = "" if decision.gap is None else f", gap {decision.gap:.3g}"
    line = (f"placement by {decision.policy} (objective {decision.objective:.4g}{gap}, "
            f"{decision.seconds * 1000:.1f} ms): {placed or 'every operator pinned'}")
    if replanning is None:
        return line
    replace = replanning.replace
    movable = ", ".join(sorted(replanning.movable & set(decision.nodes))) or "none movable"
    return (f"{line}; asked again every {replace.period:g} s (hysteresis "
            f"{replace.hysteresis:.0%}, at most {replace.moves} move(s) a period: {movable})")


def _few(nodes: tuple[str, ...]) -> str:
    return ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
