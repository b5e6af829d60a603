"""The one objective every placement is scored by: where each flow goes, each node's load, and
the latency, network usage, power and overload that follow.

The flow model is the problem's (workloads.placement.problem): an operator's messages arriving
at node a are served by its instance on a if it has one, else by its instance nearest a (least
latency, ties by the nodes' order); an instance's output leaves from its node and arrives there
for each reader. `traffic` follows this through the operators in pipeline order, one numpy
pass per operator over the nodes; `assign`, `load`, `metrics` and `objective` read it.

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
    bytes/s, latency weight), the node serving it there (-1: the operator has no instance),
    what each instance serves, and where the instances are."""

    arrive_rate: np.ndarray
    arrive_bytes: np.ndarray
    arrive_mass: np.ndarray
    server: np.ndarray
    served_rate: np.ndarray
    served_mass: np.ndarray
    instances: np.ndarray


@dataclass(frozen=True)
class Metrics:
    """A decision's figures.

    latency: s per message entering the pipeline (mean over the devices' flows, weighted by
      rate), from its entry to the last operator of each path it takes: the path latency of
      every hop between nodes plus cost / speed at every instance that processes it. Where an
      operator has several readers, its paths count in equal parts (the latency weight,
      workloads.placement.tables); a message counts as if it passed every operator, whatever
      the selectivities (the loop latency of the messages that come through, as iFogSim's).
    network: iFogSim's network usage, the sum over transfers of latency x bytes per second, in
      byte·s/s (a transfer within a node: latency 0).
    power: W, the nodes hosting an instance (idle + (busy - idle) x min(1, load / capacity))
      plus the transfers (joules per bit x bits/s).
    overload: reference-vCPU s/s above capacity, summed over the nodes.
    """

    latency: float
    network: float
    power: float
    overload: float


def nearest(tables: Tables, where: np.ndarray) -> np.ndarray:
    """(N,) for each node, the node of `where` (sorted indices) serving what arrives there."""
    n = len(tables.names)
    if len(where) == 1:
        return np.full(n, where[0])
    server = where[np.argmin(tables.latency[:, where], axis=1)]
    server[where] = where
    return server


def traffic(tables: Tables, nodes: Mapping[str, tuple[str, ...]]) -> Traffic:
    """The flows through the operators in pipeline order, given each operator's nodes."""
    n = len(tables.names)
    arrive_rate, arrive_bytes = tables.ext_rate.copy(), tables.ext_bytes.copy()
    arrive_mass = tables.ext_mass.copy()
    shape = arrive_rate.shape
    server = np.full(shape, -1)
    served_rate, served_mass = np.zeros(shape), np.zeros(shape)
    instances = np.zeros(shape, dtype=bool)
    out_bytes = tables.out_bytes
    for j, op in enumerate(tables.problem.operators):
        for u in tables.upstream[j]:
            arrive_rate[j] += tables.selectivity[u] * served_rate[u]
            arrive_bytes[j] += out_bytes[u] * served_rate[u]
            arrive_mass[j] += tables.fan[u] * served_mass[u]
        where = sorted({tables.index[name] for name in nodes.get(op.name, ())})
        if not where:
            continue
        instances[j, where] = True
        server[j] = nearest(tables, np.array(where))
        served_rate[j] = np.bincount(server[j], weights=arrive_rate[j], minlength=n)
        served_mass[j] = np.bincount(server[j], weights=arrive_mass[j], minlength=n)
    return Traffic(arrive_rate, arrive_bytes, arrive_mass, server, served_rate, served_mass,
                   instances)


def _hops(tables: Tables, flows: Traffic, matrix: np.ndarray) -> np.ndarray:
    """(J, N) `matrix` from each node to the node serving its arrivals (0 where nothing
    arrives or nothing serves)."""
    moving = (flows.arrive_rate > 0) & (flows.server >= 0)
    rows = np.broadcast_to(np.arange(len(tables.names)), flows.server.shape)
    return np.where(moving, matrix[rows, np.maximum(flows.server, 0)], 0.0)


def node_load(tables: Tables, flows: Traffic) -> np.ndarray:
    """(N,) reference-vCPU s/s each node's instances need: served rate x cost."""
    return tables.cost @ flows.served_rate


def measure(tables: Tables, flows: Traffic) -> Metrics:
    """The metrics of a traffic (see Metrics)."""
    hop_latency = _hops(tables, flows, tables.latency)
    with np.errstate(divide="ignore", invalid="ignore"):
        processing = np.where(flows.served_mass > 0, flows.served_mass * tables.cost[:, None]
                              / tables.speed[None, :], 0.0)
        latency = float((flows.arrive_mass * hop_latency).sum() + processing.sum())
        network = float((flows.arrive_bytes * hop_latency).sum())
        transfers = float((flows.arrive_bytes * _hops(tables, flows, tables.joules_per_byte))
                          .sum())
        load = node_load(tables, flows)
        share = np.where(tables.capacity > 0, load / tables.capacity, (load > 0) * 1.0)
    hosting = flows.instances.any(axis=0)
    nodes_power = (tables.idle + (tables.busy - tables.idle) * np.minimum(1.0, share))[hosting]
    overload = float(np.maximum(0.0, load - tables.capacity).sum())
    return Metrics(latency=latency, network=network, power=float(nodes_power.sum()) + transfers,
                   overload=overload)


def ceiling(tables: Tables) -> float:
    """A bound on the weighted objective of any answer without overload: every transfer at
    the longest finite latency and dearest joules, every operator on the slowest node, every
    node at its larger power."""
    weights = tables.problem.weights
    finite = tables.latency[np.isfinite(tables.latency)]
    longest = float(finite.max()) if finite.size else 0.0
    slowest = 1.0 / tables.speed[tables.speed > 0].min() if (tables.speed > 0).any() else 0.0
    latency = float((tables.mass * (longest + tables.cost * slowest)).sum())
    network = float(tables.in_bytes.sum()) * longest
    power = (float(np.maximum(tables.idle, tables.busy).sum())
             + float(tables.in_bytes.sum()) * float(tables.joules_per_byte.max(initial=0.0)))
    return weights.latency * latency + weights.network * network + weights.energy * power + 1.0


def score(tables: Tables, figures: Metrics) -> float:
    """The weighted objective of `figures`; with overload, above `ceiling` and by the unit."""
    weights = tables.problem.weights
    value = (weights.latency * figures.latency + weights.network * figures.network
             + weights.energy * figures.power)
    if figures.overload > 1e-9 * max(1.0, float(tables.capacity.sum())):
        value += ceiling(tables) + OVERLOAD_PENALTY * figures.overload
    return value


def assign(problem: Problem, decision: Decision) -> dict[str, dict[str, tuple[Flow, ...]]]:
    """Per operator, per instance node: the flows it serves (the devices' flows as given, each
    writer instance's output as a Flow at the writer's node, rate x selectivity, out_size)."""
    tables = Tables.of(problem)
    flows = traffic(tables, decision.nodes)
    names = tables.names
    served: dict[str, dict[str, list[Flow]]] = {}
    for j, op in enumerate(problem.operators):
        mine = served[op.name] = {names[s]: [] for s in np.flatnonzero(flows.instances[j])}
        if not mine:
            continue
        for flow in op.flows:
            mine[names[flows.server[j, tables.index[flow.at]]]].append(flow)
        for u in tables.upstream[j]:
            writer = problem.operators[u]
            for t in np.flatnonzero(flows.served_rate[u] > 0):
                rate = writer.selectivity * float(flows.served_rate[u, t])
                mine[names[flows.server[j, t]]].append(Flow(names[t], rate, writer.out_size))
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
