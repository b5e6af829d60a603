"""The shipped placement heuristics: cloud-only, round-robin and the greedy latency-, network-
and energy-aware policies (edge-ward lives in workloads.placement.edgeward, imported here so
that loading this module registers every heuristic).

Each places the operators in pipeline order, one instance per operator, on a candidate with
room for its CPU demand (its input rate x cost, in reference-vCPU s/s); pinned operators stay
on their pins and take their room first. Ties go to the first node in the problem's order;
nothing is random. An operator that fits nowhere raises Unplaceable naming the CPU, its demand
and the most room left on its candidates. The greedy policies' costs route as the objective
does (workloads.placement.evaluate): input from node a to an instance on node k crosses
nothing when k is a, else the path through a's broker (tables.route).
"""

from __future__ import annotations

import numpy as np

from workloads.placement.base import Policy, register
from workloads.placement.edgeward import EdgeWard
from workloads.placement.evaluate import serve
from workloads.placement.problem import PINNED, ROOM, Decision, Problem, Unplaceable
from workloads.placement.tables import Tables

__all__ = ["CloudOnly", "EdgeWard", "EnergyAware", "LatencyAware", "NetworkAware",
           "RoundRobin"]

def no_room(tables: Tables, j: int, free: list[float], among: np.ndarray) -> Unplaceable:
    """Unplaceable for operator j: its demand and the most room on the nodes `among`."""
    return Unplaceable.no_room(tables.problem.operators[j].name, float(tables.demand[j]),
                               {tables.names[n]: free[n] for n in np.flatnonzero(among)})


class Ledger:
    """What has been placed so far: the room left on each node (a list: read one at a time),
    the idle watts of the nodes hosting nothing yet, each operator's one node (-1: pinned on
    several) and such a pinned operator's output per node."""

    def __init__(self, tables: Tables):
        self.tables = tables
        self.free: list[float] = tables.capacity.tolist()
        self.idle_left = tables.idle.astype(float).copy()
        self.demand: list[float] = tables.demand.tolist()
        self.single = [-1] * len(self.demand)
        self.rate_out: dict[int, np.ndarray] = {}   # pinned on several: served rate per node
        self.mass_out: dict[int, np.ndarray] = {}   # ... and served latency weight per node
        self.nodes: dict[str, tuple[str, ...]] = {}
        self.reasons: dict[str, str] = {}

    def room(self, j: int) -> np.ndarray:
        """(N,) bool: the nodes with room for operator j."""
        return np.asarray(self.free) >= self.demand[j] - ROOM

    def put(self, j: int, node: int, reason: str) -> None:
        t = self.tables
        self.single[j] = node
        self.free[node] -= self.demand[j]
        self.idle_left[node] = 0.0
        name = t.problem.operators[j].name
        self.nodes[name] = (t.names[node],)
        self.reasons[name] = reason

    def served(self, u: int) -> tuple[np.ndarray, np.ndarray]:
        """(rate, latency weight) operator u serves per node."""
        x = self.single[u]
        if x < 0:
            return self.rate_out[u], self.mass_out[u]
        rate, mass = np.zeros(len(self.free)), np.zeros(len(self.free))
        rate[x], mass[x] = self.tables.rate[u], self.tables.mass[u]
        return rate, mass

    def pin(self, j: int) -> None:
        """Operator j on its pins: its room taken where the flow model sends its input."""
        t = self.tables
        where = t.pinned[j]
        name = t.problem.operators[j].name
        self.nodes[name] = tuple(t.names[i] for i in where)
        self.reasons[name] = PINNED
        self.idle_left[where] = 0.0
        if len(where) == 1:
            self.single[j] = int(where[0])
            self.free[where[0]] -= self.demand[j]
            return
        rate, mass = t.ext_rate[j].copy(), t.ext_mass[j].copy()
        for u in t.upstream[j]:
            up_rate, up_mass = self.served(u)
            rate += t.selectivity[u] * up_rate
            mass += t.fan[u] * up_mass
        self.rate_out[j] = serve(where, rate)
        self.mass_out[j] = serve(where, mass)
        self.free = (np.asarray(self.free) - self.rate_out[j] * t.cost[j]).tolist()

    def decision(self) -> Decision:
        return Decision(dict(self.nodes), dict(self.reasons))


@register("cloud-only")
class CloudOnly(Policy):
    """iFogSim's ModulePlacementOnlyCloud: every operator on a cloud VM, the first of its
    candidates with room; an operator with no cloud VM among its candidates on the northmost
    (fewest parents above) with room."""

    def place(self, problem: Problem) -> Decision:
        t = Tables.of(problem)
        ledger = Ledger(t)
        clouds = t.candidates & t.cloud
        for j in range(len(t.cost)):
            if t.pinned[j] is not None:
                ledger.pin(j)
                continue
            order = np.flatnonzero(clouds[j]).tolist()
            what = "first cloud VM with room"
            if not order:
                order = np.flatnonzero(t.candidates[j])
                order = order[np.argsort(t.depth[order], kind="stable")].tolist()
                what = "no cloud VM among its candidates: the northmost with room"
            node = next((n for n in order if ledger.free[n] >= ledger.demand[j] - ROOM), -1)
            if node < 0:
                among = np.zeros(len(t.names), dtype=bool)
                among[order] = True
                raise no_room(t, j, ledger.free, among)
            ledger.put(j, node, what)
        return ledger.decision()


@register("round-robin")
class RoundRobin(Policy):
    """Operators in order, each on the next candidate in turn (one instance), skipping nodes
    that are not its candidates or have no room; the turn continues after the node taken."""

    def place(self, problem: Problem) -> Decision:
        t = Tables.of(problem)
        ledger = Ledger(t)
        n = len(t.names)
        turn = 0
        for j in range(len(t.cost)):
            if t.pinned[j] is not None:
                ledger.pin(j)
                continue
            mine = np.flatnonzero(t.candidates[j]).tolist()
            first = next((i for i, node in enumerate(mine) if node >= turn), 0)
            need = ledger.demand[j] - ROOM
            node = next((m for m in mine[first:] + mine[:first] if ledger.free[m] >= need), -1)
            if node < 0:
                raise no_room(t, j, ledger.free, t.candidates[j])
            ledger.put(j, node, f"next in turn with room (turn was at {t.names[turn]})")
            turn = (node + 1) % n
        return ledger.decision()


class Blocks:
    """A greedy's scores and choices a block of operators at a time, for the operators with
    no writer or one writer on a single node x (key -1: no writer): the next few operators'
    rows of `fast` plus their writer's output weight x `matrix[x]`, as if their writer ran on
    x, with each row's argmin, computed at once; an operator whose writer is on x reads its
    row (the same floats as the one row `Greedy.place` adds up otherwise). `Greedy.sure` says
    where the argmin is `choose`'s pick; elsewhere `choose` is asked with the row. A node's
    first operator changes `fast` (`Greedy.first_use`): the blocks are dropped then.

    A block costs about what three rows do, so a key gets one only after `often` operators in
    a row had it (a chain staying on a node): `often` rows, then twice as many as its last
    (up to `most`); until then one row at a time."""

    often, most = 4, 128

    def __init__(self, policy: Greedy, t: Tables, fast: np.ndarray, matrix: np.ndarray,
                 weight: list):
        self.policy, self.t, self.fast, self.matrix = policy, t, fast, matrix
        self.weight = np.array([weight[ups[0]] if len(ups) == 1 else 0.0
                                for ups in t.upstream])
        self.blocks: dict[int, list] = {}   # key -> [end, start, rows, argmins, least, sure, read]
        self.key, self.run = -2, 0          # the last key asked, and how many times in a row

    def clear(self) -> None:
        self.blocks.clear()

    def pick(self, ledger: Ledger, j: int, x: int) -> tuple[int, float]:
        """Operator j's (node, score) with its writers on x (-1: it has none)."""
        self.run = self.run + 1 if x == self.key else 1
        self.key = x
        block = self.blocks.get(x)
        if block is None or j >= block[0]:
            if self.run < self.often:
                row = self.fast[j] if x < 0 else self.fast[j] + self.weight[j] * self.matrix[x]
                return self.policy.choose(self.t, ledger, j, row)
            size = self.often if block is None else min(self.most, 2 * (block[0] - block[1]))
            block = self.blocks[x] = self.block(j, x, size)
        i = j - block[1]
        block[6] += 1
        if block[5][i]:
            return block[3][i], block[4][i]
        return self.policy.choose(self.t, ledger, j, block[2][i])

    def block(self, j: int, x: int, size: int) -> list:
        end = min(j + size, len(self.fast))
        rows = self.fast[j:end]
        if x >= 0:
            rows = rows + self.weight[j:end, None] * self.matrix[x]
        nodes = rows.argmin(axis=1)
        least = rows[np.arange(end - j), nodes]
        return [end, j, rows, nodes.tolist(), least.tolist(),
                self.policy.sure(rows, least).tolist(), 0]


class Greedy(Policy):
    """Operators in pipeline order, each on the candidate with room that adds the least
    `what` given where its writers are: the static part of each node's score (`static`) plus,
    per arriving message weight (`kind`: the latency weight or bytes/s) from node a, the
    `matrix` entry [a, node] (a route through a's broker, 0 from the node itself).
    Subclasses give the three; ties by the nodes' order.

    The scores of every operator's devices' flows and static part come first, as one (J, N)
    array; then only the writers' part is added before the argmin, a block of operators at a
    time for those whose one writer is on one node (Blocks), one row each for the others; the
    room is looked at on the node chosen (all nodes only when that one is full)."""

    what = ""
    kind = "mass"

    def matrix(self, t: Tables) -> np.ndarray:
        raise NotImplementedError

    def static(self, t: Tables) -> np.ndarray | float:
        return 0.0

    def allowed(self, t: Tables) -> np.ndarray:
        """(J, N) the nodes an operator is placed on while any has room."""
        return t.candidates

    def prepare(self, t: Tables) -> None:
        """Anything a subclass computes once per problem before the operators are placed."""

    def scores(self, t: Tables, matrix: np.ndarray, kind: str) -> tuple[np.ndarray, list]:
        """(J, N) each operator's score from its devices' flows, and per operator the weight
        of its output (per unit of `kind`) at its node."""
        entering = t.fed_mass if kind == "mass" else t.fed_bytes    # most read no device
        some = entering.any(axis=1)
        pre = np.zeros((len(t.cost), len(t.names)))
        pre[t.fed[some]] = entering[some] @ matrix
        if kind == "mass":
            return pre, (t.mass * t.fan).tolist()
        return pre, (t.rate * t.out_bytes).tolist()

    def place(self, problem: Problem) -> Decision:
        t = Tables.of(problem)
        self.prepare(t)
        ledger = Ledger(t)
        matrix = self.matrix(t)
        pre, weight = self.scores(t, matrix, self.kind)
        pre = pre + self.static(t)
        fast = self.base(ledger, np.where(self.allowed(t), pre, np.inf))
        blocks = Blocks(self, t, fast, matrix, weight)
        free, demand, single = ledger.free, ledger.demand, ledger.single
        pinned, choose, put, names = t.pinned, self.choose, ledger.put, t.names
        fresh, said = self.fresh, f"least added {self.what} on "
        for j, ups in enumerate(t.upstream):
            if pinned[j] is not None:
                ledger.pin(j)
                for node in pinned[j].tolist():
                    if node in fresh:
                        self.first_use(node)
                        blocks.clear()
                free = ledger.free
                continue
            if not ups or len(ups) == 1 and single[ups[0]] >= 0:
                node, value = blocks.pick(ledger, j, single[ups[0]] if ups else -1)
            else:
                score = fast[j]
                for u in ups:
                    x = single[u]
                    score = score + (weight[u] * matrix[x] if x >= 0
                                     else self.spread(t, ledger, u) @ matrix)
                node, value = choose(t, ledger, j, score)
            if node < 0 or free[node] < demand[j] - ROOM:
                node, value = self.fallback(t, ledger, j, pre[j] + self.writers(
                    t, ledger, j, matrix, weight))
            put(j, node, f"{said}{names[node]}: {value:.4g}")
            if node in fresh:
                self.first_use(node)
                blocks.clear()
        return ledger.decision()

    def sure(self, scores: np.ndarray, least: np.ndarray) -> np.ndarray:
        """(B,) bool: where `scores`' row argmin, of score `least`, is what `choose` picks
        (Blocks asks `choose` itself for the others)."""
        return least < np.inf

    def base(self, ledger: Ledger, fast: np.ndarray) -> np.ndarray:
        """The (J, N) scores the loop starts each operator from (`fast`: the static part and
        the devices' flows, inf off the allowed nodes), and `fresh`: the nodes whose first
        operator changes them (`first_use`)."""
        self.fresh: set[int] = set()
        return fast

    def first_use(self, node: int) -> None:
        """Node `node` was just given its first operator (see `base`)."""

    def writers(self, t: Tables, ledger: Ledger, j: int, matrix: np.ndarray,
                weight: list) -> np.ndarray | float:
        """Operator j's score from its writers' output alone."""
        added = 0.0
        for u in t.upstream[j]:
            x = ledger.single[u]
            added = added + (weight[u] * matrix[x] if x >= 0
                             else self.spread(t, ledger, u) @ matrix)
        return added

    def fallback(self, t: Tables, ledger: Ledger, j: int, score: np.ndarray):
        """The choice among the candidates with room, the allowed ones first."""
        room = ledger.room(j) & t.candidates[j]
        preferred = room & self.allowed(t)[j]
        node, value = self.choose(t, ledger, j, np.where(
            preferred if preferred.any() else room, score, np.inf))
        if node < 0:
            raise no_room(t, j, ledger.free, t.candidates[j])
        return node, value

    def spread(self, t: Tables, ledger: Ledger, u: int) -> np.ndarray:
        """Operator u's output weight per node (u pinned on several nodes)."""
        if self.kind == "mass":
            return ledger.mass_out[u] * t.fan[u]
        return ledger.rate_out[u] * t.out_bytes[u]

    def choose(self, t: Tables, ledger: Ledger, j: int, score: np.ndarray):
        """(the node of least score, the score), (-1, inf) when every score is inf."""
        node = int(score.argmin())
        value = float(score[node])
        return (node, value) if value < np.inf else (-1, value)


@register("latency-aware")
class LatencyAware(Greedy):
    """Each operator where its messages' latency grows least: the path latency from where its
    input arrives plus its processing time (cost / speed), weighted as evaluate's latency."""

    what = "latency (s per message)"
    kind = "mass"

    def matrix(self, t: Tables) -> np.ndarray:
        return t.route_reach

    def static(self, t: Tables) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.outer(t.mass * t.cost, 1.0 / t.speed)


@register("network-aware")
class NetworkAware(Greedy):
    """Each operator where iFogSim's network usage grows least: bytes/s of its input times
    the latency they travel."""

    what = "network usage (byte·s/s)"
    kind = "bytes"

    def matrix(self, t: Tables) -> np.ndarray:
        return t.route_reach


@register("energy-aware")
class EnergyAware(Greedy):
    """Each operator where the watts grow least: its share of the node's busy - idle power,
    the node's idle power if it hosts nothing yet, and the joules per bit of its input's
    transfers. Battery nodes only when no other candidate has room; ties by added latency."""

    what = "power (W)"
    kind = "bytes"

    def matrix(self, t: Tables) -> np.ndarray:
        return t.route_joules

    def static(self, t: Tables) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            per_unit = np.where(t.capacity > 0, (t.busy - t.idle) / t.capacity, 0.0)
        return np.outer(t.demand, per_unit)

    def allowed(self, t: Tables) -> np.ndarray:
        return t.candidates & ~t.battery

    def base(self, ledger: Ledger, fast: np.ndarray) -> np.ndarray:
        """The scores with each node's idle watts while it hosts nothing (a column goes back
        to `fast`'s when its node is first used: one copy per node, not an add per
        operator)."""
        self.plain, self.fresh = fast, set(np.flatnonzero(ledger.idle_left).tolist())
        self.scored = fast + ledger.idle_left
        return self.scored

    def first_use(self, node: int) -> None:
        """The node's idle watts leave its scores."""
        self.fresh.discard(node)
        self.scored[:, node] = self.plain[:, node]

    def fallback(self, t: Tables, ledger: Ledger, j: int, score: np.ndarray):
        return super().fallback(t, ledger, j, score + ledger.idle_left)

    def sure(self, scores: np.ndarray, least: np.ndarray) -> np.ndarray:
        """Where the least score is finite and no other is within `choose`'s tie of it."""
        near = scores <= (least + 1e-12 * np.maximum(1.0, np.abs(least)))[:, None]
        return (least < np.inf) & (near.sum(axis=1) == 1)

    def choose(self, t: Tables, ledger: Ledger, j: int, score: np.ndarray):
        """The node of least score (the idle watts in it, see `base`), ties by the latency
        its input would add."""
        node = int(score.argmin())
        best = float(score[node])
        if best == np.inf:
            return -1, best
        ties = score <= best + 1e-12 * max(1.0, abs(best))
        if np.count_nonzero(ties) == 1:
            return node, best
        with np.errstate(divide="ignore"):     # ties are rare: the latency when they come
            latency = t.mass[j] * t.cost[j] / t.speed + t.ext_mass[j] @ t.route_reach
        for u in t.upstream[j]:
            x = ledger.single[u]
            latency = latency + (t.mass[u] * t.fan[u] * t.route_reach[x] if x >= 0
                                 else ledger.mass_out[u] * t.fan[u] @ t.route_reach)
        node = int(np.where(ties, latency, np.inf).argmin())
        return node, float(score[node])
