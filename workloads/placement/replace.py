"""Re-placement at run time (`placement.replace`): the problem as observed, the policy asked
again, the hysteresis and the move budget, and the record that replays it.

Every `period` a backend observes what the run did over it (`Observation`: each stream's
rate at each node it entered, the nodes down, the moves that failed since) and calls
`Replanner.step`. The step builds the problem as observed (`observed`: every operator's
flows at the rates measured, down nodes out of its candidates), asks the policy's `replace`
(workloads.placement.base.Policy: by default it places again) and checks the answer as
`decide` does (pins kept, candidates only). The answer is taken when it lowers the objective
(workloads.placement.evaluate) by more than `hysteresis` of the objective now, and would
overload no node at (1 + hysteresis) times the rates seen (or less than the placement in
force overloads them now): a load that hovers at a node's capacity does not send an
operator there and away again every period, as the objective alone would. Then at most
`moves` instances move, operators in pipeline order, each instance the answer takes off a
node paired with a node it adds (an operator whose answer has more or fewer instances moves
only as many as pair up: a move takes one instance to one node). An operator moving is not
moved again until its move has ended (`ended`). The backend carries each move out by its
migrations and says how it ended; a failed move is undone in the current placement and told
in the next observation.

The same policy, problem, first decision and observations give the same steps:
`replay(...)` runs them offline from the run's `replacements` table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from dataclasses import replace as with_fields

from workloads.placement.base import Policy
from workloads.placement.evaluate import metrics, objective
from workloads.placement.policy import PolicyError, asked, make_policy
from workloads.placement.problem import ROOM, Decision, Flow, Problem, Unplaceable


@dataclass(frozen=True)
class Move:
    """One instance of `operator` from node `source` to node `target`."""

    operator: str
    source: str
    target: str

    def __str__(self) -> str:
        return f"{self.operator}: {self.source} -> {self.target}"


@dataclass(frozen=True)
class Observation:
    """What a run saw over the period ending at `t`: messages per second of each (stream,
    node it entered at), the nodes down at `t`, and the moves that failed since the last
    observation (undone: the instance stayed on its source)."""

    t: float
    rates: Mapping[tuple[str, str], float]
    down: frozenset[str] = frozenset()
    failed: tuple[Move, ...] = ()
    # The operators with a move not ended at `t` (the planner fills it in as it steps).
    moving: frozenset[str] = frozenset()

    def to_json(self) -> str:
        return json.dumps({"t": self.t,
                           "rates": [[s, n, r] for (s, n), r in sorted(self.rates.items())],
                           "down": sorted(self.down),
                           "failed": [[m.operator, m.source, m.target] for m in self.failed],
                           "moving": sorted(self.moving)})

    @classmethod
    def from_json(cls, text: str) -> Observation:
        data = json.loads(text)
        return cls(data["t"], {(s, n): r for s, n, r in data["rates"]},
                   frozenset(data["down"]), tuple(Move(*m) for m in data["failed"]),
                   frozenset(data["moving"]))


@dataclass(frozen=True)
class Step:
    """One period's outcome: the objective of the placement in force on the problem as
    observed, the answer's (nan: none), whether it was taken, the moves begun, and why."""

    observation: Observation
    objective: float
    proposed: float
    taken: bool
    moves: tuple[Move, ...]
    reason: str
    decision_time: float = 0.0
    nodes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # each moved operator's


def scaled(problem: Problem, factor: float) -> Problem:
    """The problem with every flow's rate times `factor`."""
    return with_fields(problem, operators=tuple(
        with_fields(op, flows=tuple(with_fields(f, rate=f.rate * factor) for f in op.flows))
        for op in problem.operators))


def observed(problem: Problem, observation: Observation) -> Problem:
    """The problem with every operator's flows at the observed rates (a flow per (stream,
    node) it reads that carried messages; a stream's message size as the problem had it) and
    the down nodes out of its candidates (all of them down: it keeps its candidates)."""
    by_stream: dict[str, list[tuple[str, float]]] = {}
    known = {node.name for node in problem.nodes}
    for (stream, at), rate in sorted(observation.rates.items()):
        if rate > 0 and at in known:
            by_stream.setdefault(stream, []).append((at, rate))
    operators = []
    for op in problem.operators:
        sizes = {flow.stream: flow.size for flow in op.flows}
        flows = tuple(Flow(at, rate, sizes[stream], stream) for stream in sizes
                      for at, rate in by_stream.get(stream, ()))
        up = tuple(n for n in op.candidates if n not in observation.down) or op.candidates
        operators.append(with_fields(op, flows=flows, candidates=up))
    return with_fields(problem, operators=tuple(operators))


class Replanner:
    """The run's re-placement: `step(observation)` each period, `ended(move, ok)` as each move
    ends. `settings`: the experiment's placement.replace (hysteresis, moves); `movable`: the
    operators the backend can move (None: every one the policy places)."""

    def __init__(self, policy: Policy, problem: Problem, decision: Decision, settings,
                 movable: Iterable[str] | None = None) -> None:
        self.policy, self.problem, self.settings = policy, problem, settings
        self.current: dict[str, tuple[str, ...]] = dict(decision.nodes)
        placed = {op.name for op in problem.operators if op.pinned is None}
        self.movable = placed if movable is None else placed & set(movable)
        self.moving: dict[str, int] = {}  # operator -> its moves not ended
        self.order = problem.index()
        self.steps: list[Step] = []

    def step(self, observation: Observation) -> Step:
        for move in observation.failed:
            self._undo(move)
        observation = with_fields(observation, moving=frozenset(
            op for op, count in self.moving.items() if count))
        problem = observed(self.problem, observation)
        now = objective(problem, Decision(self.current))
        step = self._step(problem, observation, now)
        self.steps.append(step)
        return step

    def _step(self, problem: Problem, observation: Observation, now: float) -> Step:
        current = Decision(dict(self.current))
        try:
            answer = asked(self.policy, problem,
                           lambda: self.policy.replace(problem, observation, current))
        except (Unplaceable, PolicyError) as refused:
            return Step(observation, now, math.nan, False, (), f"kept: {refused}")
        if answer is None:
            return Step(observation, now, math.nan, False, (), "kept: the policy keeps it")
        saved, margin = _saving(now, answer.objective), self.settings.hysteresis
        if saved <= margin:
            return Step(observation, now, answer.objective, False, (),
                        f"kept: the answer saves {saved:.1%} of the objective, not more "
                        f"than the hysteresis {margin:.1%}", answer.seconds)
        over = metrics(scaled(problem, 1 + margin), answer).overload
        if over > max(ROOM, metrics(problem, current).overload):
            return Step(observation, now, answer.objective, False, (),
                        f"kept: the answer would overload its nodes by {over:.3g} "
                        f"reference-vCPU s/s at {1 + margin:g} times the rates seen",
                        answer.seconds)
        moves, why = self._moves(answer)
        for move in moves:
            self._apply(move)
        reason = (f"re-placed: the answer saves {saved:.1%} of the objective" if moves else
                  f"kept: the answer moves no instance now ({why})")
        return Step(observation, now, answer.objective, bool(moves), moves, reason,
                    answer.seconds, {m.operator: self.current[m.operator] for m in moves})

    def _moves(self, answer: Decision) -> tuple[tuple[Move, ...], str]:
        """Up to settings.moves instance moves toward `answer`, in pipeline order, and what
        held back the changes that do not move (for a step that moves nothing)."""
        moves: list[Move] = []
        held: list[str] = []
        for op in self.problem.operators:
            name = op.name
            have, want = self.current[name], answer.nodes[name]
            if have == want:
                continue
            if name not in self.movable or self.moving.get(name):
                held.append(f"{name} {'is moving' if self.moving.get(name) else 'is not movable'}")
                continue
            off = [n for n in have if n not in want]
            on = [n for n in want if n not in have]
            if not (off and on):
                held.append(f"{name} on {len(want)} nodes where it runs on {len(have)}: a move "
                            "takes one instance to one node")
            for source, target in zip(off, on, strict=False):
                if len(moves) == self.settings.moves:
                    return tuple(moves), ""
                moves.append(Move(name, source, target))
        return tuple(moves), "; ".join(held)

    def _apply(self, move: Move) -> None:
        nodes = [move.target if n == move.source else n for n in self.current[move.operator]]
        self.current[move.operator] = tuple(sorted(nodes, key=self.order.__getitem__))
        self.moving[move.operator] = self.moving.get(move.operator, 0) + 1

    def _undo(self, move: Move) -> None:
        nodes = [move.source if n == move.target else n for n in self.current[move.operator]]
        self.current[move.operator] = tuple(sorted(nodes, key=self.order.__getitem__))

    def ended(self, move: Move, ok: bool) -> Move | None:
        """A move has ended; the move to tell the next observation as failed, if it did."""
        self.moving[move.operator] -= 1
        return None if ok else move

    def columns(self) -> dict[str, list]:
        """The `replacements` table: a row per step."""
        rows: dict[str, list] = {k: [] for k in REPLACEMENT_COLUMNS}
        for step in self.steps:
            rows["t"].append(step.observation.t)
            rows["objective"].append(step.objective)
            rows["proposed"].append(step.proposed)
            rows["taken"].append(step.taken)
            rows["moves"].append("; ".join(map(str, step.moves)))
            rows["reason"].append(step.reason)
            rows["observation"].append(step.observation.to_json())
        return rows

    def placements(self) -> dict[str, list]:
        """The `placements` table's rows of the run: one per operator a step moved, its
        nodes as the step left them."""
        rows: dict[str, list] = {k: [] for k in PLACEMENT_COLUMNS}
        name = self.policy.name or type(self.policy).__name__
        for step in self.steps:
            for operator, nodes in step.nodes.items():
                placement_row(rows, step.observation.t, operator, nodes, name, step.proposed,
                              step.decision_time, step.reason)
        return rows


    def record(self, tables: dict, facts: dict, failed_since: int = 0) -> None:
        """A run's record of its re-placement, as every backend writes it: the
        `replacements` table, the `placements` rows at run time and the facts (steps,
        those taken, moves, moves that failed: those told in observations, and
        `failed_since` more the run's end left untold)."""
        tables["replacements"] = self.columns()
        tables["placements"] = self.placements()
        facts["replacement"] = {
            "period": self.settings.period, "hysteresis": self.settings.hysteresis,
            "steps": len(self.steps), "taken": sum(step.taken for step in self.steps),
            "moves": sum(len(step.moves) for step in self.steps),
            "failed": sum(len(step.observation.failed) for step in self.steps) + failed_since}


REPLACEMENT_COLUMNS = ("t", "objective", "proposed", "taken", "moves", "reason", "observation")
PLACEMENT_COLUMNS = ("t", "operator", "nodes", "policy", "objective", "decision_time", "reason")


def placement_row(rows: dict[str, list], t: float, operator: str, nodes: tuple[str, ...],
                  policy: str, objective: float, seconds: float, reason: str) -> None:
    """One row of the `placements` table (PLACEMENT_COLUMNS) added to `rows`."""
    for key, value in zip(PLACEMENT_COLUMNS, (t, operator, ",".join(nodes), policy, objective,
                                              seconds, reason), strict=True):
        rows[key].append(value)


def _saving(now: float, then: float) -> float:
    """The share of `now` that `then` saves (1 from an unroutable to a routable one)."""
    if math.isinf(now):
        return 0.0 if math.isinf(then) else 1.0
    if now <= 0:
        return 0.0
    return (now - then) / now


def replay(policy: Policy, problem: Problem, decision: Decision, settings,
           observations: Iterable[Observation], movable: Iterable[str] | None = None
           ) -> list[Step]:
    """The steps a run took, taken again offline from its observations (the `replacements`
    table's `observation` column, which says which operators were still moving and which
    moves had failed)."""
    planner = Replanner(policy, problem, decision, settings, movable)
    for observation in observations:
        planner.moving = dict.fromkeys(observation.moving, 1)
        planner.step(observation)
    return planner.steps


@dataclass(frozen=True)
class Replanning:
    """What a run's re-placement starts from, decided before the run (experiments.placement):
    the policy by name and settings, the problem over the candidates, the first decision, the
    experiment's placement.replace, the operators the backend can move. `planner()`: a fresh
    Replanner for one run (a run's steps are its own)."""

    policy: str
    settings: Mapping
    problem: Problem
    decision: Decision
    replace: object
    movable: frozenset[str]

    def planner(self) -> Replanner:
        return Replanner(make_policy(self.policy, self.settings), self.problem, self.decision,
                         self.replace, self.movable)
