"""The placement problem as numpy arrays: what the policies and the objective compute with.

`Tables.of(problem)` turns the frozen numbers into arrays once: the nodes' speeds, capacities
and power, the latency and energy matrices, each operator's candidates as a mask and its
readers and writers as indices, the external flows as per-node rates, and the totals that do
not depend on where anything runs (an operator's input rate, its input bytes, its share of the
latency weight). Node i is column i, operator j row j, as in the problem.

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

import numpy as np

from workloads.placement.problem import Problem

# A finite stand-in for "no route" where a sum or a solver needs one (s): large against any
# path's latency, small enough to keep a float's precision when added to them.
NO_ROUTE = 1e6


@dataclass(frozen=True, eq=False)
class Tables:
    """The problem's numbers as arrays (N nodes, J operators); see the module's docstring."""

    problem: Problem
    names: tuple[str, ...]                  # node names, in the problem's order
    index: dict[str, int]                   # node name -> column
    latency: np.ndarray                     # (N, N) s, inf: no route
    reach: np.ndarray                       # (N, N) latency with NO_ROUTE for inf
    joules_per_byte: np.ndarray             # (N, N) J/B
    broker: np.ndarray                      # (N,) each node's broker, -1: none
    route: np.ndarray                       # (N, N) s from a to an instance on k (see above)
    route_reach: np.ndarray                 # (N, N) route with NO_ROUTE for inf
    route_joules: np.ndarray                # (N, N) J/B from a to an instance on k
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
    ext_rate: np.ndarray                    # (J, N) messages/s entering from devices
    ext_bytes: np.ndarray                   # (J, N) bytes/s entering from devices
    ext_mass: np.ndarray                    # (J, N) latency weight entering
    rate: np.ndarray                        # (J,) messages/s in, wherever it runs
    in_bytes: np.ndarray                    # (J,) bytes/s in
    mass: np.ndarray                        # (J,) latency weight through it
    fan: np.ndarray                         # (J,) share of its mass each reader gets
    entry_rate: float                       # messages/s entering the pipeline

    @property
    def demand(self) -> np.ndarray:
        """(J,) reference-vCPU s/s each operator needs in all (rate x cost)."""
        return self.rate * self.cost

    @property
    def out_bytes(self) -> np.ndarray:
        """(J,) bytes each operator writes per input message (selectivity x out_size)."""
        return self.selectivity * self.out_size

    @classmethod
    def of(cls, problem: Problem) -> Tables:
        names = tuple(node.name for node in problem.nodes)
        index = {name: i for i, name in enumerate(names)}
        node_arrays = _node_arrays(problem, index)
        op_arrays = _operator_arrays(problem, index)
        flows = _flow_arrays(problem, index, op_arrays["upstream"], op_arrays["selectivity"],
                             op_arrays["out_size"], op_arrays["fan"])
        return cls(problem=problem, names=names, index=index, **node_arrays, **op_arrays,
                   **flows)


def _matrix(rows, n: int, default: float) -> np.ndarray:
    if not rows:
        return np.full((n, n), default)
    return np.array(rows, dtype=float).reshape(n, n)


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
    latency = _matrix(problem.latency, n, 0.0)
    parent = tuple(index.get(node.parent, -1) if node.parent else -1 for node in nodes)
    depth = np.zeros(n, dtype=int)
    for i in range(n):
        k, seen = parent[i], {i}
        while k >= 0 and k not in seen:     # a loop of parents ends where it closes
            seen.add(k)
            depth[i] += 1
            k = parent[k]
    joules = 8.0 * _matrix(problem.joules_per_bit, n, 0.0)
    broker = np.array([index[node.broker] if node.broker is not None else -1
                       for node in nodes], dtype=int)
    route = via_broker(latency, broker)
    return dict(
        latency=latency, reach=np.where(np.isinf(latency), NO_ROUTE, latency),
        joules_per_byte=joules, broker=broker, route=route,
        route_reach=np.where(np.isinf(route), NO_ROUTE, route),
        route_joules=via_broker(joules, broker),
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


def _flow_arrays(problem: Problem, index: dict[str, int], upstream, selectivity, out_size,
                 fan) -> dict:
    """The devices' flows per node, and the totals through each operator (in pipeline order,
    each operator's input is its flows plus its writers' output)."""
    ops = problem.operators
    shape = (len(ops), len(index))
    ext_rate, ext_bytes = np.zeros(shape), np.zeros(shape)
    fed = [j for j, op in enumerate(ops) if op.flows]   # most operators read no device
    for j in fed:
        for flow in ops[j].flows:
            ext_rate[j, index[flow.at]] += flow.rate
            ext_bytes[j, index[flow.at]] += flow.rate * flow.size
    entry = float(ext_rate.sum())
    ext_mass = np.zeros(shape)
    if entry > 0:
        ext_mass[fed] = ext_rate[fed] / entry
    rate, in_bytes, mass = np.zeros(len(ops)), np.zeros(len(ops)), np.zeros(len(ops))
    rate[fed], in_bytes[fed] = ext_rate[fed].sum(axis=1), ext_bytes[fed].sum(axis=1)
    mass[fed] = ext_mass[fed].sum(axis=1)
    rate, in_bytes, mass = rate.tolist(), in_bytes.tolist(), mass.tolist()
    sel, share = selectivity.tolist(), fan.tolist()
    sel_size = (selectivity * out_size).tolist()
    for j, ups in enumerate(upstream):
        if ups:
            r, b, m = rate[j], in_bytes[j], mass[j]
            for u in ups:
                ru = rate[u]
                r += sel[u] * ru
                b += sel_size[u] * ru
                m += mass[u] * share[u]
            rate[j], in_bytes[j], mass[j] = r, b, m
    return dict(ext_rate=ext_rate, ext_bytes=ext_bytes, ext_mass=ext_mass,
                rate=np.array(rate), in_bytes=np.array(in_bytes), mass=np.array(mass),
                entry_rate=entry)
