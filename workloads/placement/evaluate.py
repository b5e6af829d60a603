"""The one objective every placement is scored by: where each flow goes, each node's load, and
the latency, network usage, power and overload that follow.

The flow model is the problem's (workloads.placement.problem), which is the backends' routing:
an operator's messages arriving at node a are served by its instance on a if it has one (local
delivery, latency 0); else a's broker b hands them to its K instances in turn, each instance k
serving 1/K of them over the path a -> b -> k (latency[a, b] + latency[b, k], the bytes
crossing both legs; a -> k where a has no broker: tables.route). An instance's output leaves
from its node and arrives there for each reader. `traffic` follows this through the operators
in pipeline order, one numpy pass per operator over the nodes; `assign`, `load`, `metrics`
and `objective` read it.

An operator a decision gives no node serves nothing and writes nothing (a partial decision:
workloads.placement.optimal scores its fixed part so).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from workloads.placement.problem import Decision, Flow, Problem
from workloads.placement.tables import Tables

# The objective's price of overload, per reference-vCPU s/s above a node's capacity, on top of
# a bound no feasible answer reaches (`ceiling`): an over-full answer always scores worse.
OVERLOAD_PENALTY = 1e6


@dataclass(frozen=True, eq=False)
class Traffic:
    """Arrays (J operators x N nodes): what arrives at each node for each operator (messages/s,
    bytes/s, latency weight), the latency and joules per byte one unit arriving there travels
    to the instances serving it (0 on an instance's node, or with no instance), what each
    instance serves, and where the instances are."""

    arrive_rate: np.ndarray
    arrive_bytes: np.ndarray
    arrive_mass: np.ndarray
    hop_latency: np.ndarray
    hop_joules: np.ndarray
    served_rate: np.ndarray
    served_mass: np.ndarray
    instances: np.ndarray


@dataclass(frozen=True)
class Metrics:
    """A decision's figures.

    latency: s per message entering the pipeline (mean over the devices' flows, weighted by
      rate), from its entry to the last operator of each path it takes: the latency of every
      hop between nodes (0 to an instance on the node it arrives at; else, for each of the K
      instances' 1/K share, the path through the arrival node's broker to the instance) plus
      cost / speed at every instance that processes it. Where an operator has several
      readers, its paths count in equal parts (the latency weight,
      workloads.placement.tables); a message counts as if it passed every operator, whatever
      the selectivities (the loop latency of the messages that come through, as iFogSim's).
    network: iFogSim's network usage, the sum over transfers of latency x bytes per second, in
      byte·s/s: a transfer through a broker counts its bytes on both legs (node -> broker ->
      instance); one read where it is published counts 0.
    power: W, the nodes hosting an instance (idle + (busy - idle) x min(1, load / capacity))
      plus the transfers (joules per bit x bits/s, over both legs through a broker).
    overload: reference-vCPU s/s above capacity, summed over the nodes.
    """

    latency: float
    network: float
    power: float
    overload: float


def serve(where: np.ndarray, arriving: np.ndarray) -> np.ndarray:
    """(N,) what instances on the nodes `where` (distinct indices) serve of `arriving` (N,):
    what arrives on an instance's node stays there, the rest goes to each in equal shares
    (the broker's turns)."""
    served = np.zeros(len(arriving))
    away = np.ones(len(arriving), dtype=bool)
    away[where] = False
    served[where] = arriving[where] + arriving[away].sum() / len(where)
    return served


def hops(route: np.ndarray, where: np.ndarray) -> np.ndarray:
    """(N,) per unit arriving at each node, the `route` (tables.route, route_joules) to the
    instances on `where`: 0 on their nodes, else the mean over them (equal shares)."""
    if len(where) == 1:
        return route[:, where[0]].copy()      # the route's diagonal is 0
    hop = route[:, where].mean(axis=1)
    hop[where] = 0.0
    return hop


def traffic(tables: Tables, nodes: Mapping[str, tuple[str, ...]]) -> Traffic:
    """The flows through the operators in pipeline order, given each operator's nodes."""
    arrive_rate, arrive_bytes = tables.ext_rate.copy(), tables.ext_bytes.copy()
    arrive_mass = tables.ext_mass.copy()
    shape = arrive_rate.shape
    hop_latency, hop_joules = np.zeros(shape), np.zeros(shape)
    served_rate, served_mass = np.zeros(shape), np.zeros(shape)
    instances = np.zeros(shape, dtype=bool)
    out_bytes = tables.out_bytes
    for j, op in enumerate(tables.problem.operators):
        for u in tables.upstream[j]:
            arrive_rate[j] += tables.selectivity[u] * served_rate[u]
            arrive_bytes[j] += out_bytes[u] * served_rate[u]
            arrive_mass[j] += tables.fan[u] * served_mass[u]
        where = np.array(sorted({tables.index[name] for name in nodes.get(op.name, ())}),
                         dtype=int)
        if not len(where):
            continue
        instances[j, where] = True
        hop_latency[j] = hops(tables.route, where)
        hop_joules[j] = hops(tables.route_joules, where)
        served_rate[j] = serve(where, arrive_rate[j])
        served_mass[j] = serve(where, arrive_mass[j])
    return Traffic(arrive_rate, arrive_bytes, arrive_mass, hop_latency, hop_joules,
                   served_rate, served_mass, instances)


def node_load(tables: Tables, flows: Traffic) -> np.ndarray:
    """(N,) reference-vCPU s/s each node's instances need: served rate x cost."""
    return tables.cost @ flows.served_rate


def _moved(amount: np.ndarray, hop: np.ndarray) -> float:
    """The sum of amount x hop where anything arrives (an inf hop with nothing on it: 0)."""
    moving = amount > 0
    return float((amount[moving] * hop[moving]).sum())


def measure(tables: Tables, flows: Traffic) -> Metrics:
    """The metrics of a traffic (see Metrics)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        processing = np.where(flows.served_mass > 0, flows.served_mass * tables.cost[:, None]
                              / tables.speed[None, :], 0.0)
        latency = float(_moved(flows.arrive_mass, flows.hop_latency) + processing.sum())
        network = float(_moved(flows.arrive_bytes, flows.hop_latency))
        transfers = float(_moved(flows.arrive_bytes, flows.hop_joules))
        load = node_load(tables, flows)
        share = np.where(tables.capacity > 0, load / tables.capacity, (load > 0) * 1.0)
    hosting = flows.instances.any(axis=0)
    nodes_power = (tables.idle + (tables.busy - tables.idle) * np.minimum(1.0, share))[hosting]
    overload = float(np.maximum(0.0, load - tables.capacity).sum())
    return Metrics(latency=latency, network=network, power=float(nodes_power.sum()) + transfers,
                   overload=overload)


def ceiling(tables: Tables) -> float:
    """A bound on the weighted objective of any answer without overload: every transfer at
    the longest finite route's latency and dearest finite joules (through a broker: both
    legs), every operator on the slowest node, every node at its larger power."""
    weights = tables.problem.weights
    longest = _finite_max(tables.route)
    slowest = 1.0 / tables.speed[tables.speed > 0].min() if (tables.speed > 0).any() else 0.0
    latency = float((tables.mass * (longest + tables.cost * slowest)).sum())
    network = float(tables.in_bytes.sum()) * longest
    power = (float(np.maximum(tables.idle, tables.busy).sum())
             + float(tables.in_bytes.sum()) * _finite_max(tables.route_joules))
    return weights.latency * latency + weights.network * network + weights.energy * power + 1.0


def _finite_max(matrix: np.ndarray) -> float:
    finite = matrix[np.isfinite(matrix)]
    return float(finite.max(initial=0.0))


def score(tables: Tables, figures: Metrics) -> float:
    """The weighted objective of `figures`; with overload, above `ceiling` and by the unit."""
    weights = tables.problem.weights
    value = (weights.latency * figures.latency + weights.network * figures.network
             + weights.energy * figures.power)
    if figures.overload > 1e-9 * max(1.0, float(tables.capacity.sum())):
        value += ceiling(tables) + OVERLOAD_PENALTY * figures.overload
    return value


def assign(problem: Problem, decision: Decision) -> dict[str, dict[str, tuple[Flow, ...]]]:
    """Per operator, per instance node: the flows it serves (the devices' flows, each writer
    instance's output as a Flow at the writer's node, rate x selectivity, out_size). A flow on
    an instance's node is that instance's whole; any other is split over every instance in
    equal parts (rate / K each, through the flow node's broker)."""
    tables = Tables.of(problem)
    flows = traffic(tables, decision.nodes)
    names = tables.names
    served: dict[str, dict[str, list[Flow]]] = {}
    for j, op in enumerate(problem.operators):
        mine = served[op.name] = {names[s]: [] for s in np.flatnonzero(flows.instances[j])}
        if not mine:
            continue
        entering = [(flow.at, flow.rate, flow.size) for flow in op.flows]
        for u in tables.upstream[j]:
            writer = problem.operators[u]
            entering += [(names[t], writer.selectivity * float(flows.served_rate[u, t]),
                          writer.out_size) for t in np.flatnonzero(flows.served_rate[u] > 0)]
        for at, rate, size in entering:
            if at in mine:
                mine[at].append(Flow(at, rate, size))
            else:
                for node in mine.values():
                    node.append(Flow(at, rate / len(mine), size))
    return {op: {node: tuple(f) for node, f in nodes.items()} for op, nodes in served.items()}


def load(problem: Problem, decision: Decision) -> dict[str, float]:
    """Per node, the reference-vCPU s/s its instances need (compare Node.capacity)."""
    tables = Tables.of(problem)
    return dict(zip(tables.names, node_load(tables, traffic(tables, decision.nodes)).tolist(),
                    strict=True))


def metrics(problem: Problem, decision: Decision) -> Metrics:
    tables = Tables.of(problem)
    return measure(tables, traffic(tables, decision.nodes))


def objective(problem: Problem, decision: Decision) -> float:
    """weights.latency x latency (s) + weights.network x network usage (byte·s/s) +
    weights.energy x power (W); an over-full answer scores above any feasible one (`score`)."""
    tables = Tables.of(problem)
    return score(tables, measure(tables, traffic(tables, decision.nodes)))
