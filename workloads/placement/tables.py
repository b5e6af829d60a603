"""The placement problem as numpy arrays: what the policies and the objective compute with.

`Tables.of(problem)` turns the frozen numbers into arrays once: the nodes' speeds, capacities
and power, the latency and energy matrices, each operator's candidates as a mask and its
readers and writers as indices, the external flows as per-node rates, and the totals that do
not depend on where anything runs (an operator's input rate, its input bytes, its share of the
latency weight). Node i is column i, operator j row j, as in the problem. What not every
policy reads (the matrices, the device flows and what they carry through the operators) is
computed on first use, once (edge-ward reads none of it; the greedy policies one kind of flow
each).

Units: rates in messages/s, sizes in bytes, latency in s, `joules_per_byte` in J/B (8 x the
problem's joules per bit), speed relative to a reference vCPU, capacity and demand in
reference-vCPU s/s, power in W.

Routes: `route[a, k]` is the latency a message published at node a travels to an instance on
node k that is not on a: through a's broker b, latency[a, b] + latency[b, k], or latency[a, k]
when a has no broker (workloads.placement.problem); 0 on the diagonal (local delivery).
`route_reach` is it with NO_ROUTE for inf, `route_joules` the joules per byte of those legs.

The latency weight ("mass"): each message entering the pipeline carries its flow's share of
all entering messages (rate / total rate); an operator passes its mass on to its readers in
equal parts, whatever its selectivity. The mean latency per message is then the sum over every
transfer and every instance of mass x seconds (workloads.placement.evaluate).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import chain

import numpy as np

from workloads.placement.problem import Problem

# A finite stand-in for "no route" where a sum or a solver needs one (s): large against any
# path's latency, small enough to keep a float's precision when added to them.
NO_ROUTE = 1e6


@dataclass(frozen=True, eq=False)
class Tables:
    """The problem's numbers as arrays (N nodes, J operators); see the module's docstring.
    The fields are made by `of`; the properties below them on first use (cached)."""

    problem: Problem
    names: tuple[str, ...]                  # node names, in the problem's order
    index: dict[str, int]                   # node name -> column
    broker: np.ndarray                      # (N,) each node's broker, -1: none
    speed: np.ndarray                       # (N,)
    capacity: np.ndarray                    # (N,) reference-vCPU s/s
    idle: np.ndarray                        # (N,) W
    busy: np.ndarray                        # (N,) W
    battery: np.ndarray                     # (N,) bool: runs on a battery
    cloud: np.ndarray                       # (N,) bool: a cloud VM
    parent: tuple[int, ...]                 # next node north, -1 at the top
    depth: np.ndarray                       # (N,) hops to the top
    cost: np.ndarray                        # (J,) reference-vCPU s per input message
    selectivity: np.ndarray                 # (J,)
    out_size: np.ndarray                    # (J,) bytes per output message
    upstream: tuple[tuple[int, ...], ...]   # operators each reads
    downstream: tuple[tuple[int, ...], ...]  # operators reading each
    candidates: np.ndarray                  # (J, N) bool
    pinned: tuple[np.ndarray | None, ...]   # node indices of an operator's pins
    fan: np.ndarray                         # (J,) share of its mass each reader gets

    @classmethod
    def of(cls, problem: Problem) -> Tables:
        names = tuple(node.name for node in problem.nodes)
        index = {name: i for i, name in enumerate(names)}
        return cls(problem=problem, names=names, index=index, **_node_arrays(problem, index),
                   **_operator_arrays(problem, index))

    # -- the paths (N, N) ---------------------------------------------------------------------

    @cached_property
    def latency(self) -> np.ndarray:
        """(N, N) s, inf: no route."""
        return _matrix(self.problem.latency, len(self.names), 0.0)

    @cached_property
    def reach(self) -> np.ndarray:
        """(N, N) latency with NO_ROUTE for inf."""
        return np.where(np.isinf(self.latency), NO_ROUTE, self.latency)

    @cached_property
    def joules_per_byte(self) -> np.ndarray:
        """(N, N) J/B."""
        return 8.0 * _matrix(self.problem.joules_per_bit, len(self.names), 0.0)

    @cached_property
    def route(self) -> np.ndarray:
        """(N, N) s from a to an instance on k (see the module's docstring)."""
        return via_broker(self.latency, self.broker)

    @cached_property
    def route_reach(self) -> np.ndarray:
        """(N, N) route with NO_ROUTE for inf."""
        return np.where(np.isinf(self.route), NO_ROUTE, self.route)

    @cached_property
    def route_joules(self) -> np.ndarray:
        """(N, N) J/B from a to an instance on k."""
        return via_broker(self.joules_per_byte, self.broker)

    # -- the devices' flows -------------------------------------------------------------------

    @cached_property
    def fed(self) -> np.ndarray:
        """(F,) the operators reading devices' flows (most operators read none), in order;
        `fed_rate`, `fed_bytes` and `fed_mass` are their rows of ext_rate, ext_bytes and
        ext_mass."""
        return self._fed[0]

    @cached_property
    def fed_rate(self) -> np.ndarray:
        """(F, N) messages/s entering each fed operator from devices, per node."""
        return self._fed[1]

    @cached_property
    def fed_bytes(self) -> np.ndarray:
        """(F, N) bytes/s entering each fed operator from devices, per node."""
        return self._fed[2]

    @cached_property
    def _fed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ops, index = self.problem.operators, self.index
        fed = [j for j, op in enumerate(ops) if op.flows]
        rate, size = np.zeros((len(fed), len(index))), np.zeros((len(fed), len(index)))
        for i, j in enumerate(fed):
            for flow in ops[j].flows:
                rate[i, index[flow.at]] += flow.rate
                size[i, index[flow.at]] += flow.rate * flow.size
        return np.array(fed, dtype=int), rate, size

    @cached_property
    def ext_rate(self) -> np.ndarray:
        """(J, N) messages/s entering from devices."""
        return self._spread(self.fed_rate)

    @cached_property
    def ext_bytes(self) -> np.ndarray:
        """(J, N) bytes/s entering from devices."""
        return self._spread(self.fed_bytes)

    @cached_property
    def entry_rate(self) -> float:
        """Messages/s entering the pipeline."""
        return float(self.ext_rate.sum())

    @cached_property
    def fed_mass(self) -> np.ndarray:
        """(F, N) latency weight entering each fed operator, per node."""
        entry = self.entry_rate
        return self.fed_rate / entry if entry > 0 else np.zeros(self.fed_rate.shape)

    @cached_property
    def ext_mass(self) -> np.ndarray:
        """(J, N) latency weight entering."""
        return self._spread(self.fed_mass)

    def _spread(self, rows: np.ndarray) -> np.ndarray:
        """(J, N): `rows` on the fed operators' rows, 0 elsewhere."""
        spread = np.zeros((len(self.cost), len(self.names)))
        spread[self.fed] = rows
        return spread

    # -- what the flows carry through the operators (J,) -------------------------------------

    @cached_property
    def rate(self) -> np.ndarray:
        """(J,) messages/s in, wherever it runs."""
        return self._carried[0]

    @cached_property
    def in_bytes(self) -> np.ndarray:
        """(J,) bytes/s in."""
        return self._carried[1]

    @cached_property
    def _carried(self) -> tuple[np.ndarray, np.ndarray]:
        """Rate and bytes in pipeline order: each operator's input is its flows plus its
        writers' output."""
        n = len(self.cost)
        rate, in_bytes = np.zeros(n), np.zeros(n)
        rate[self.fed], in_bytes[self.fed] = self.fed_rate.sum(axis=1), self.fed_bytes.sum(
            axis=1)
        rate, in_bytes = rate.tolist(), in_bytes.tolist()
        sel = self.selectivity.tolist()
        sel_size = (self.selectivity * self.out_size).tolist()
        for j, ups in enumerate(self.upstream):
            if ups:
                r, b = rate[j], in_bytes[j]
                for u in ups:
                    ru = rate[u]
                    r += sel[u] * ru
                    b += sel_size[u] * ru
                rate[j], in_bytes[j] = r, b
        return np.array(rate), np.array(in_bytes)

    @cached_property
    def mass(self) -> np.ndarray:
        """(J,) latency weight through it (its flows' plus its share of its writers')."""
        mass = np.zeros(len(self.cost))
        mass[self.fed] = self.fed_mass.sum(axis=1)
        mass, share = mass.tolist(), self.fan.tolist()
        for j, ups in enumerate(self.upstream):
            if ups:
                m = mass[j]
                for u in ups:
                    m += mass[u] * share[u]
                mass[j] = m
        return np.array(mass)

    @property
    def demand(self) -> np.ndarray:
        """(J,) reference-vCPU s/s each operator needs in all (rate x cost)."""
        return self.rate * self.cost

    @property
    def out_bytes(self) -> np.ndarray:
        """(J,) bytes each operator writes per input message (selectivity x out_size)."""
        return self.selectivity * self.out_size


def _matrix(rows, n: int, default: float) -> np.ndarray:
    if not rows:
        return np.full((n, n), default)
    return np.fromiter(chain.from_iterable(rows), dtype=float, count=n * n).reshape(n, n)


def via_broker(matrix: np.ndarray, broker: np.ndarray) -> np.ndarray:
    """(N, N) `matrix` summed over the legs a -> a's broker -> k (a -> k where a has no
    broker), 0 on the diagonal (a message read where it is published crosses no link)."""
    n = len(broker)
    if not n:
        return matrix.copy()
    rows = np.arange(n)
    hub = np.where(broker >= 0, broker, rows)
    with np.errstate(invalid="ignore"):
        legs = matrix[rows, hub][:, None] + matrix[hub, :]
    routed = np.where((broker >= 0)[:, None], legs, matrix)
    np.fill_diagonal(routed, 0.0)
    return routed


def _node_arrays(problem: Problem, index: dict[str, int]) -> dict:
    nodes = problem.nodes
    n = len(nodes)
    parent = tuple(index.get(node.parent, -1) if node.parent else -1 for node in nodes)
    depth = np.zeros(n, dtype=int)
    for i in range(n):
        k, seen = parent[i], {i}
        while k >= 0 and k not in seen:     # a loop of parents ends where it closes
            seen.add(k)
            depth[i] += 1
            k = parent[k]
    return dict(
        broker=np.array([index[node.broker] if node.broker is not None else -1
                         for node in nodes], dtype=int),
        speed=np.array([node.speed for node in nodes], dtype=float),
        capacity=np.array([node.capacity for node in nodes], dtype=float),
        idle=np.array([node.power_idle for node in nodes], dtype=float),
        busy=np.array([node.power_busy for node in nodes], dtype=float),
        battery=np.array([node.battery is not None for node in nodes], dtype=bool),
        cloud=np.array([node.kind == "cloud_vm" for node in nodes], dtype=bool),
        parent=parent, depth=depth)
def _operator_arrays(problem: Problem, index: dict[str, int]) -> dict:
    ops = problem.operators
    position = {op.name: j for j, op in enumerate(ops)}
    find = position.__getitem__
    upstream = tuple([tuple(map(find, op.upstream)) for op in ops])
    readers: list[list[int]] = [[] for _ in ops]
    for j, ups in enumerate(upstream):
        for u in ups:
            readers[u].append(j)
    # Operators often share one candidates tuple: one mask per distinct tuple (by identity
    # first, which costs no hashing), then one row per operator picked from them.
    by_id: dict[int, int] = {}
    by_value: dict[tuple[str, ...], int] = {}
    masks: list[list[int]] = []
    which = []
    for op in ops:
        k = by_id.get(id(op.candidates))
        if k is None:
            k = by_value.setdefault(op.candidates, len(masks))
            if k == len(masks):
                masks.append([index[name] for name in op.candidates])
            by_id[id(op.candidates)] = k
        which.append(k)
    distinct = np.zeros((max(1, len(masks)), len(index)), dtype=bool)
    for k, nodes in enumerate(masks):
        distinct[k, nodes] = True
    pinned = tuple([None if op.pinned is None else
                    np.array(sorted({index[name] for name in op.pinned}), dtype=int)
                    for op in ops])
    return dict(
        cost=np.array([op.cost for op in ops], dtype=float),
        selectivity=np.array([op.selectivity for op in ops], dtype=float),
        out_size=np.array([op.out_size for op in ops], dtype=float),
        upstream=upstream, downstream=tuple(map(tuple, readers)),
        candidates=distinct[np.array(which, dtype=int)] if ops else
        np.zeros((0, len(index)), dtype=bool),
        pinned=pinned, fan=np.array([1.0 / len(r) if r else 0.0 for r in readers]))


