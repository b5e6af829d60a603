"""Builders of small placement problems by hand: nodes, a problem from its links, and the
seeded random small instances the optimal is checked against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from workloads.placement import synthetic
from workloads.placement.problem import Node, Operator, Problem, Weights


def node(name: str, kind: str = "gateway", speed: float = 1.0, cores: int = 1,
         **fields) -> Node:
    return Node(name, kind, speed=speed, cores=cores, **fields)


def problem(operators: Sequence[Operator], nodes: Sequence[Node],
            latency: Mapping[tuple[str, str], float],
            joules_per_bit: Mapping[tuple[str, str], float] | None = None,
            weights: Weights | None = None, seed: int = 0) -> Problem:
    """A problem whose path latency (and joules per bit) between two nodes is the least sum
    over the given links (both ways)."""
    names = [n.name for n in nodes]
    lat = synthetic.paths(names, latency)
    joules = synthetic.paths(names, joules_per_bit) if joules_per_bit else None
    return Problem(tuple(operators), tuple(nodes), tuple(map(tuple, lat.tolist())),
                   joules_per_bit=tuple(map(tuple, joules.tolist())) if joules is not None
                   else (), weights=weights or Weights(), seed=seed)


def small_random(seed: int, operators: int = 8, brokers: bool = False) -> Problem:
    """A seeded random small instance: 2-3 chains on 4 gateways, 1 aggregation node and 1
    cloud VM of 4 cores (the operators need 40 % of all the capacity, more than the cloud
    VM has), every weight in the objective; `brokers`: every node publishing through the
    cloud VM's broker (synthetic.tree)."""
    nodes, latency, joules = synthetic.tree(gateways=4, aggregations=1, clouds=1,
                                            battery_every=3, cloud_cores=8, brokers=brokers)
    return synthetic.chains(operators, nodes, latency, joules, chains=2 + seed % 2,
                            seed=seed, utilisation=0.3, rates=(50.0, 500.0),
                            weights=Weights(1.0, 1e-5, 1e-3))
