"""The optimal placement of small problems: an integer program after ODP, solved by HiGHS.

ODP is the Optimal Distributed stream processing Placement of Cardellini, Grassi, Lo Presti and
Nardelli ("Optimal operator placement for distributed stream processing applications", DEBS
2016). Simplified here: a binary x[j, n] puts operator j (one instance) on node n of its
candidates; a pinned operator keeps its pins. The objective is evaluate's, linear: processing
time and power per x, and per pair of consecutive operators (u writes to k) the latency,
network usage and joules of the transfer between their nodes (0 on one node, else through
the writer's node's broker: tables.route, as evaluate routes it) through y[u, k, a, b] =
x[u, a] x x[k, b], linearised as y >= 0 with each row and column of y summing to the x it
stands beside (the standard tight form: with binary x, y is the product). A node's idle
watts come in through h[n] >= x[j, n]. Capacities are constraints: the answer never
overloads a node.

The pinned operators whose writers are all pinned are the fixed part: their flows, load and
figures are constants (evaluate on the pins alone). An operator pinned on several nodes that
reads one the program places would have its flows split by where that one goes (not linear):
refused, as are problems over MAX_VARIABLES variables; a heuristic places those.

scipy (a dependency of foglab's for this program) is imported where the solver runs: the
registry imports this module with every other policy, which need not pay its import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from workloads.placement.base import Policy, register
from workloads.placement.evaluate import measure, node_load, traffic
from workloads.placement.problem import ROOM, Decision, Problem, Unplaceable
from workloads.placement.tables import Tables

MAX_VARIABLES = 200_000


class TooLarge(ValueError):
    """The integer program would be too large to solve in reasonable time."""


@dataclass(frozen=True, eq=False)
class Program:
    """min c @ v + constant subject to lower <= A @ v <= upper, bounds, integrality: the
    columns of x (per placed operator: its first column and its nodes), y (per edge: writer,
    reader, first column) and h (per node: its column, or -1)."""

    tables: Tables
    c: np.ndarray
    constant: float
    matrix: object                 # scipy-free sparse triplets: (rows, cols, values, shape)
    lower: np.ndarray
    upper: np.ndarray
    integrality: np.ndarray
    x: dict[int, tuple[int, np.ndarray]]
    y: list[tuple[int, int, int]]
    h: np.ndarray

    def vector(self, nodes: Mapping[str, tuple[str, ...]]) -> np.ndarray:
        """The program's variables for a decision with one node per placed operator."""
        t = self.tables
        v = np.zeros(len(self.c))
        at = {}
        for j, (first, where) in self.x.items():
            node = t.index[nodes[t.problem.operators[j].name][0]]
            at[j] = int(np.flatnonzero(where == node)[0])
            v[first + at[j]] = 1.0
            if self.h[node] >= 0:
                v[self.h[node]] = 1.0
        for u, k, first in self.y:
            v[first + at[u] * len(self.x[k][1]) + at[k]] = 1.0
        return v

    def value(self, nodes: Mapping[str, tuple[str, ...]]) -> float:
        """The program's objective for such a decision (evaluate's, without overload)."""
        return float(self.c @ self.vector(nodes)) + self.constant

    def decode(self, v: np.ndarray) -> dict[str, tuple[str, ...]]:
        """Each placed operator's node in the solution `v`."""
        t = self.tables
        nodes = {}
        for j, (first, where) in self.x.items():
            chosen = int(where[np.argmax(v[first:first + len(where)])])
            nodes[t.problem.operators[j].name] = (t.names[chosen],)
        return nodes


def _split(t: Tables) -> tuple[list[int], dict[int, np.ndarray]]:
    """(the fixed operators, the placed ones with the nodes each may take)."""
    fixed: list[int] = []
    placed: dict[int, np.ndarray] = {}
    for j, op in enumerate(t.problem.operators):
        pins = t.pinned[j]
        if pins is not None and all(u in fixed for u in t.upstream[j]):
            fixed.append(j)
        elif pins is not None and len(pins) > 1:
            reads = next(u for u in t.upstream[j] if u not in fixed)
            raise ValueError(
                f"operator {op.name} is pinned on several nodes and reads "
                f"{t.problem.operators[reads].name}, which the program places: its flows "
                "would split by where that goes, beyond this integer program; use a heuristic")
        else:
            where = pins if pins is not None else np.flatnonzero(t.candidates[j])
            if not len(where):
                raise Unplaceable(op.name, "route", "it has no candidate node")
            placed[j] = where
    return fixed, placed


def _fixed_part(t: Tables, fixed: list[int]):
    """The fixed operators' figures as the objective's constant, their load and hosts, and
    their traffic."""
    ops = t.problem.operators
    flows = traffic(t, {ops[j].name: tuple(t.names[i] for i in t.pinned[j]) for j in fixed})
    figures = measure(t, flows)
    w = t.problem.weights
    constant = w.latency * figures.latency + w.network * figures.network
    constant += w.energy * figures.power if w.energy else 0.0
    return constant, node_load(t, flows), flows.instances.any(axis=0), flows


def _x_costs(t: Tables, flows, placed: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Per placed operator and node of it: processing, its input from the devices and the
    fixed part, and its share of the node's busy power."""
    w = t.problem.weights
    with np.errstate(divide="ignore", invalid="ignore"):
        per_unit = np.where(t.capacity > 0, (t.busy - t.idle) / t.capacity, 0.0)
        slowness = np.where(t.speed > 0, 1.0 / t.speed, 0.0)
    costs = {}
    for j, where in placed.items():
        mass, sent = t.ext_mass[j].copy(), t.ext_bytes[j].copy()
        for u in t.upstream[j]:
            if u not in placed:
                mass += t.fan[u] * flows.served_mass[u]
                sent += t.out_bytes[u] * flows.served_rate[u]
        route = t.route_reach[:, where]
        cost = w.latency * (mass @ route + t.mass[j] * t.cost[j] * slowness[where])
        cost += w.network * (sent @ route)
        if w.energy:
            cost += w.energy * (sent @ t.route_joules[:, where]
                                + per_unit[where] * t.demand[j])
        costs[j] = cost
    return costs


def _count(t: Tables, placed: dict[int, np.ndarray]) -> int:
    count = sum(len(w) for w in placed.values()) + len(t.names)
    for k in placed:
        count += sum(len(placed[u]) * len(placed[k]) for u in t.upstream[k] if u in placed)
    return count


def program(problem: Problem) -> Program:
    """The integer program of `problem` (see the module's docstring)."""
    t = Tables.of(problem)
    fixed, placed = _split(t)
    size = _count(t, placed)
    if size > MAX_VARIABLES:
        raise TooLarge(f"{size} variables (over {MAX_VARIABLES}) for "
                       f"{len(placed)} operators on {len(t.names)} nodes; use a heuristic "
                       "(edge-ward, latency-aware, ...)")
    constant, fixed_load, fixed_hosts, flows = _fixed_part(t, fixed)
    w = t.problem.weights
    costs, rows, cols, vals, lower, upper = [], [], [], [], [], []
    x: dict[int, tuple[int, np.ndarray]] = {}
    column = 0
    for j, cost in _x_costs(t, flows, placed).items():      # one node each
        x[j] = (column, placed[j])
        costs.append(cost)
        _row(rows, cols, vals, lower, upper, np.arange(column, column + len(cost)),
             np.ones(len(cost)), 1.0, 1.0)
        column += len(cost)
    y, column = _edges(t, placed, x, column, costs, (rows, cols, vals, lower, upper))
    h = np.full(len(t.names), -1)
    if w.energy:
        for n in np.flatnonzero(~fixed_hosts & (t.idle != 0)):
            h[n], column = column, column + 1
            costs.append(np.array([w.energy * t.idle[n]]))
    _capacity(t, x, fixed_load, h, (rows, cols, vals, lower, upper))
    n_rows = len(lower)
    integrality = np.zeros(column)
    for first, where in x.values():
        integrality[first:first + len(where)] = 1
    return Program(t, _join(costs, float), constant,
                   (_join(rows, int), _join(cols, int), _join(vals, float), (n_rows, column)),
                   np.array(lower), np.array(upper), integrality, x, y, h)


def _join(parts: list, kind) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=kind)


def _row(rows, cols, vals, lower, upper, columns, values, low, high) -> None:
    """Append the constraint low <= values @ v[columns] <= high."""
    rows.append(np.full(len(columns), len(lower)))
    cols.append(np.asarray(columns))
    vals.append(np.asarray(values, dtype=float))
    lower.append(low)
    upper.append(high)


def _edges(t: Tables, placed, x, column: int, costs: list, lists) -> tuple[list, int]:
    """y per pair of placed operators (u writes to k): cost per pair of nodes, and each row
    and column of y summing to the x beside it."""
    w = t.problem.weights
    y = []
    for k in placed:
        for u in t.upstream[k]:
            if u not in placed:
                continue
            a, b = placed[u], placed[k]
            sent = t.rate[u] * t.out_bytes[u]
            cost = ((w.latency * t.mass[u] * t.fan[u] + w.network * sent)
                    * t.route_reach[np.ix_(a, b)])
            if w.energy:
                cost = cost + w.energy * sent * t.route_joules[np.ix_(a, b)]
            costs.append(cost.ravel())
            y.append((u, k, column))
            grid = column + np.arange(len(a) * len(b)).reshape(len(a), len(b))
            for i in range(len(a)):
                _row(*lists, np.append(grid[i], x[u][0] + i),
                     np.append(np.ones(len(b)), -1.0), 0.0, 0.0)
            for i in range(len(b)):
                _row(*lists, np.append(grid[:, i], x[k][0] + i),
                     np.append(np.ones(len(a)), -1.0), 0.0, 0.0)
            column += len(a) * len(b)
    return y, column


def _capacity(t: Tables, x, fixed_load: np.ndarray, h: np.ndarray, lists) -> None:
    """Per node: the placed operators' demand within the room the fixed part leaves; and
    h[n] >= x[j, n] where n's idle power is a variable."""
    by_node: dict[int, tuple[list, list]] = {}
    for j, (first, where) in x.items():
        for i, n in enumerate(where.tolist()):
            columns, demands = by_node.setdefault(n, ([], []))
            columns.append(first + i)
            demands.append(t.demand[j])
            if h[n] >= 0:
                _row(*lists, [first + i, h[n]], [1.0, -1.0], -np.inf, 0.0)
    for n, (columns, demands) in sorted(by_node.items()):
        if any(demands):
            room = max(0.0, t.capacity[n] - fixed_load[n]) + ROOM
            _row(*lists, columns, demands, -np.inf, room)


@register("optimal")
class Optimal(Policy):
    """The integer program solved by HiGHS (scipy.optimize.milp). Settings: `time_limit`
    (s, default 5) and `gap` (the relative MIP gap it may stop at, default 0)."""

    exact = True

    def __init__(self, time_limit: float = 5.0, gap: float = 0.0) -> None:
        if not (time_limit > 0 and math.isfinite(time_limit)):
            raise TypeError(f"time_limit must be a positive number of seconds, "
                            f"given {time_limit!r}")
        if not 0 <= gap < 1:
            raise TypeError(f"gap must be in [0, 1), given {gap!r}")
        self.time_limit, self.gap = float(time_limit), float(gap)

    def place(self, problem: Problem) -> Decision:
        # scipy when a program is solved: its import (~0.3 s) the other policies need not pay.
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_array

        p = program(problem)
        if not p.x:                                     # every operator pinned
            return Decision({}, {}, gap=0.0)
        rows, cols, vals, shape = p.matrix
        constraints = (LinearConstraint(coo_array((vals, (rows, cols)), shape=shape).tocsr(),
                                        p.lower, p.upper),) if shape[0] else ()
        result = milp(p.c, integrality=p.integrality, bounds=Bounds(0, 1),
                      constraints=constraints,
                      options={"time_limit": self.time_limit, "mip_rel_gap": self.gap,
                               "disp": False})
        if result.x is None:
            if result.status == 2:
                heaviest = max(p.x, key=lambda j: p.tables.demand[j])
                raise Unplaceable(problem.operators[heaviest].name, "cpu", (
                    "no placement of one instance per operator fits the nodes' capacities "
                    "(the integer program is infeasible; this is its heaviest operator)"))
            raise TimeoutError(f"no placement found within {self.time_limit:g} s "
                               f"({result.message}); raise time_limit or use a heuristic")
        gap = float(getattr(result, "mip_gap", 0.0) or 0.0)
        reason = "optimal" if result.status == 0 else f"time limit, gap {gap:.4g}"
        nodes = p.decode(result.x)
        return Decision(nodes, {name: reason for name in nodes}, gap=gap)
