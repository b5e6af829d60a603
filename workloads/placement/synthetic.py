"""Synthetic placement problems, seeded: a fog tree and chains of operators on it (for the
tests and benchmarks/placement.py, not for experiments).

`tree` builds gateways under aggregation nodes under cloud VMs, with the path latency and
joules per bit between every two (sums over the tree's links, shortest); `chains` makes a few
chains of operators, the first of each reading the devices' flows at some gateways, now and
then one also reading another chain's operator (a DAG), the last of each on the cloud VMs, with
costs scaled so that the operators need `utilisation` of all the nodes' capacity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from workloads.placement.problem import Flow, Node, Operator, Problem, Weights

# Per link between levels: (latency s, joules per bit).
LINKS = {"gateway": (0.005, 1e-7), "aggregation": (0.020, 2e-8), "cloud": (0.001, 1e-9)}


def paths(names: list[str], links: Mapping[tuple[str, str], float]) -> np.ndarray:
    """(N, N) the least sum over links between every two nodes (links both ways, inf: no
    route; Floyd-Warshall)."""
    index = {name: i for i, name in enumerate(names)}
    best = np.full((len(names), len(names)), np.inf)
    np.fill_diagonal(best, 0.0)
    for (a, b), value in links.items():
        best[index[a], index[b]] = best[index[b], index[a]] = min(value, best[index[a],
                                                                              index[b]])
    for k in range(len(names)):
        best = np.minimum(best, best[:, k:k + 1] + best[k:k + 1, :])
    return best


def tree(gateways: int = 40, aggregations: int = 8, clouds: int = 2, battery_every: int = 5,
         cloud_cores: int = 16, brokers: bool = False,
         ) -> tuple[tuple[Node, ...], np.ndarray, np.ndarray]:
    """(nodes, latency, joules per bit): gateway i under aggregation i mod `aggregations`,
    aggregation k under cloud k mod `clouds`, the clouds linked to each other; every
    `battery_every`-th gateway on a battery. `brokers`: the cloud VMs run the brokers (as in
    smart-city, the broker beside the cloud): every node publishes through the cloud VM above
    it (a cloud VM through itself), so even neighbours' messages go up and down; else no
    node has a broker."""
    cloud = [Node(f"cloud-{c + 1}", "cloud_vm", speed=1.5, cores=cloud_cores, site="cloud",
                  power_idle=100.0, power_busy=250.0) for c in range(clouds)]
    agg = [Node(f"agg-{k + 1}", "gateway", speed=1.0, cores=8, site="aggregation",
                parent=cloud[k % clouds].name, power_idle=40.0, power_busy=120.0)
           for k in range(aggregations)]
    gws = [Node(f"gw-{i + 1}", "gateway", speed=0.5, cores=4, site="field",
                parent=agg[i % aggregations].name, power_idle=2.7, power_busy=6.4,
                battery=20_000.0 if battery_every and i % battery_every == battery_every - 1
                else None)
           for i in range(gateways)]
    if brokers:
        cloud = [replace(c, broker=c.name) for c in cloud]
        agg = [replace(a, broker=a.parent) for a in agg]
        above = {a.name: a.parent for a in agg}
        gws = [replace(g, broker=above[g.parent]) for g in gws]
    nodes = (*gws, *agg, *cloud)
    names = [node.name for node in nodes]
    level = {"field": "gateway", "aggregation": "aggregation"}
    latency: dict[tuple[str, str], float] = {}
    joules: dict[tuple[str, str], float] = {}
    for node in nodes:
        if node.parent:
            latency[node.name, node.parent], joules[node.name, node.parent] = \
                LINKS[level[node.site]]
    for a in cloud:
        for b in cloud:
            if a.name < b.name:
                latency[a.name, b.name], joules[a.name, b.name] = LINKS["cloud"]
    return nodes, paths(names, latency), paths(names, joules)


def _chain_lengths(operators: int, chains: int) -> list[int]:
    chains = max(1, min(chains, operators))
    return [operators // chains + (c < operators % chains) for c in range(chains)]


def chains(operators: int, nodes: tuple[Node, ...], latency: np.ndarray,
           joules_per_bit: np.ndarray, *, chains: int = 4, seed: int = 1,
           utilisation: float = 0.15, rates: tuple[float, float] = (2.0, 20.0),
           weights: Weights | None = None) -> Problem:
    """A problem of `chains` chains (see the module's docstring) on `nodes`, each device flow
    of a rate drawn from `rates` (messages/s)."""
    rng = np.random.default_rng(seed)
    gateways = [n.name for n in nodes if n.site == "field"] or [nodes[0].name]
    everywhere = tuple(n.name for n in nodes)
    clouds = tuple(n.name for n in nodes if n.kind == "cloud_vm") or everywhere
    ops: list[Operator] = []
    for c, length in enumerate(_chain_lengths(operators, chains)):
        at = rng.choice(gateways, size=min(len(gateways), int(rng.integers(2, 11))),
                        replace=False)
        for i in range(length):
            upstream = (ops[-1].name,) if i else ()
            if i and len(ops) - i > 0 and rng.random() < 0.1:
                other = ops[int(rng.integers(0, len(ops) - i))].name
                upstream = (*upstream, other) if other not in upstream else upstream
            flows = tuple(Flow(str(g), float(rng.uniform(*rates)), 200) for g in sorted(at)) \
                if not i else ()
            ops.append(Operator(
                f"c{c + 1}-op{i + 1}", cost=float(rng.uniform(2e-4, 2e-3)),
                selectivity=float(np.exp(rng.uniform(-0.1, 0.1))),
                out_size=int(rng.integers(50, 400)), upstream=upstream, flows=flows,
                candidates=clouds if i == length - 1 else everywhere))
    problem = Problem(tuple(ops), tuple(nodes), _rows(latency), joules_per_bit=_rows(
        joules_per_bit), weights=weights or Weights(1.0, 1e-5, 1e-4), seed=seed)
    return _scaled(problem, utilisation)


def _rows(matrix: np.ndarray) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(row) for row in matrix.tolist())


def _scaled(problem: Problem, utilisation: float) -> Problem:
    """The problem with every cost scaled so the operators need `utilisation` of all the
    capacity (the input rates do not depend on the placement)."""
    rate: dict[str, float] = {}
    selectivity = {op.name: op.selectivity for op in problem.operators}
    for op in problem.operators:
        rate[op.name] = sum(f.rate for f in op.flows) + sum(
            selectivity[u] * rate[u] for u in op.upstream)
    demand = sum(rate[op.name] * op.cost for op in problem.operators)
    capacity = sum(node.capacity for node in problem.nodes)
    factor = utilisation * capacity / demand if demand > 0 else 1.0
    ops = tuple(replace(op, cost=op.cost * factor) for op in problem.operators)
    return replace(problem, operators=ops)
