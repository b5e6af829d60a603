"""The plan between a running set of jobs and a desired one: what to deploy, modify, delete.

Pure: a state is a plain mapping of job name -> its expanded operators (`Operator`: name,
the nodes its instances run on, and its other fields), so it may come from an experiment file
(`state`), or be read back from a running emulation's agents and ZooKeeper. `diff(old, new)`
gives the `Plan`; `apply(old, plan)` gives `new` back, a property the tests hold.

Each modified job is classed by what its operators can keep, after the rules Spark Structured
Streaming gives for restarting a query from its checkpoint ("Recovery Semantics after Changes
in a Streaming Query") and Flink for restoring a savepoint (state is matched to an operator by
its identity, and restored only when its state schema is unchanged):

- `in-place`: only settings the running operator takes live changed (its task parameters,
  cost, selectivity, output size, SLO, checkpoint period, window jitter, and the stream it
  writes: Spark allows changing a sink's topic across a restart, and foglab's agent publishes
  to the new one at once);
- `move`: a stateful (windowed) operator changes nodes with its state schema unchanged: it
  keeps its windows through the migration machinery (Flink's savepoint restored elsewhere);
- `replace`: a restart without state: a stateless operator whose task, engine, inputs or
  nodes changed (Spark allows changing map-like operations, and a stateless one has nothing
  to keep), or a stateful one whose state schema changed: its engine, task, window size or
  inputs (Spark refuses a change of stateful operations or of the number or kind of input
  sources from a checkpoint; Flink cannot restore a changed window's state), or an operator
  added to or removed from the job.

A job's class is its strongest operator's (replace over move over in-place).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from topologies import units
from topologies.fields import unit_of
from workloads.pipeline import OperatorSpec

if TYPE_CHECKING:
    from topologies.model import Topology

DEPLOY, MODIFY, DELETE = "deploy", "modify", "delete"
IN_PLACE, MOVE, REPLACE = "in-place", "move", "replace"
_STRENGTH = {IN_PLACE: 0, MOVE: 1, REPLACE: 2}

# Fields whose change restarts an operator; for a stateful one they are its state schema.
RESTART_FIELDS = ("engine", "task", "reads", "follow", "window.size")
# Everything else (params, cost, selectivity, out_size, slo, checkpoint, writes,
# window.jitter) the operator takes live.


@dataclass(frozen=True)
class Operator:
    """One expanded operator as it runs: its name, its nodes, and its other fields (each
    field's value as canonical JSON, so two states compare exactly)."""

    name: str
    nodes: tuple[str, ...]
    fields: tuple[tuple[str, str], ...] = ()

    @property
    def stateful(self) -> bool:
        return dict(self.fields).get("window.size", "null") != "null"

    @classmethod
    def of(cls, spec: OperatorSpec, topology: Topology) -> Operator:
        """An experiment's operator as it would run on `topology` (its placement resolved)."""
        from workloads.pipeline import placement

        dumped = spec.model_dump(mode="json", exclude={"name", "on"})
        window = dumped.pop("window") or {}
        dumped["window.size"] = window.get("size")
        dumped["window.jitter"] = window.get("jitter")
        return cls(spec.name, tuple(placement(topology, spec.on)), tuple(sorted(
            (key, json.dumps(value, sort_keys=True)) for key, value in dumped.items())))


State = Mapping[str, Sequence[Operator]]


def state(jobs: Mapping[str, Sequence[OperatorSpec]], topology: Topology) -> dict[
        str, tuple[Operator, ...]]:
    """A composition's jobs (workloads.jobs) as a state; a flat pipeline is one job per
    operator (`{op.name: [op]}`)."""
    return {job: tuple(Operator.of(op, topology) for op in ops) for job, ops in jobs.items()}


@dataclass(frozen=True)
class OperatorChange:
    """What changes for one operator of a modified job: the fields (`on` for its nodes), and
    its class; `added` or `removed` when the job gains or loses it."""

    name: str
    kind: str
    changed: tuple[str, ...] = ()
    before: Operator | None = None
    after: Operator | None = None

    def describe(self) -> str:
        if self.before is None:
            return f"{self.name}: added"
        if self.after is None:
            return f"{self.name}: removed"
        shown = []
        old, new = dict(self.before.fields), dict(self.after.fields)
        for key in self.changed:
            if key == "on":
                shown.append(f"on {','.join(self.before.nodes)} -> {','.join(self.after.nodes)}")
            else:
                shown.append(f"{key} {_written(key, old.get(key))} -> "
                             f"{_written(key, new.get(key))}")
        return f"{self.name}: " + "; ".join(shown)


def _written(key: str, value: str | None) -> str:
    """A field's value (canonical JSON) as a file writes it: a quantity with its unit (`cost`
    0.0002 is `200us`; topologies.units.shown), anything else as it is."""
    unit = unit_of(OperatorSpec, key)  # window.size: the window's size
    number = json.loads(value) if value is not None and unit is not None else None
    return units.shown(number, unit) if isinstance(number, int | float) else str(value)


@dataclass(frozen=True)
class Change:
    """One job's row of the plan: its action, its class (a modification's), what it runs
    after (None for a delete) and before (None for a deploy)."""

    job: str
    action: str
    kind: str | None
    before: tuple[Operator, ...] | None
    after: tuple[Operator, ...] | None
    operators: tuple[OperatorChange, ...] = ()

    @property
    def instances(self) -> int:
        """Operator instances the change starts, changes or stops."""
        ops = self.after if self.action != DELETE else self.before
        return sum(len(op.nodes) for op in ops or ())


@dataclass(frozen=True)
class Plan:
    """The changes, a row per changed job in the order of the jobs' names; unchanged jobs
    have no row."""

    changes: tuple[Change, ...] = field(default_factory=tuple)

    def count(self, action: str) -> int:
        return sum(1 for change in self.changes if change.action == action)

    @property
    def empty(self) -> bool:
        return not self.changes

    def summary(self) -> str:
        """Terraform's line: `Plan: 2 to deploy, 1 to modify, 0 to delete.`"""
        return (f"Plan: {self.count(DEPLOY)} to deploy, {self.count(MODIFY)} to modify, "
                f"{self.count(DELETE)} to delete.")


def diff(old: State, new: State) -> Plan:
    """The plan that turns the running jobs `old` into the desired `new`: a row for exactly
    the jobs whose operators differ, sorted by job name."""
    changes = []
    for job in sorted(set(old) | set(new)):
        before = tuple(old[job]) if job in old else None
        after = tuple(new[job]) if job in new else None
        if before == after:
            continue
        if before is None:
            changes.append(Change(job, DEPLOY, None, None, after))
        elif after is None:
            changes.append(Change(job, DELETE, None, before, None))
        else:
            operators = _operator_changes(before, after)
            kind = max((o.kind for o in operators), key=_STRENGTH.__getitem__, default=IN_PLACE)
            changes.append(Change(job, MODIFY, kind, before, after, operators))
    return Plan(tuple(changes))


def _operator_changes(before: tuple[Operator, ...],
                      after: tuple[Operator, ...]) -> tuple[OperatorChange, ...]:
    old = {op.name: op for op in before}
    new = {op.name: op for op in after}
    found = []
    for name in [op.name for op in before] + [op.name for op in after if op.name not in old]:
        if name not in new:
            found.append(OperatorChange(name, REPLACE, before=old[name]))
        elif name not in old:
            found.append(OperatorChange(name, REPLACE, after=new[name]))
        elif old[name] != new[name]:
            found.append(classify(old[name], new[name]))
    if not found:  # the same operators in another order: restarted in the new order
        found = [OperatorChange(op.name, REPLACE, ("order",), op, op) for op in after]
    return tuple(found)


def classify(before: Operator, after: Operator) -> OperatorChange:
    """One operator's change and its class (the module's docstring gives the rules)."""
    old, new = dict(before.fields), dict(after.fields)
    changed = tuple(sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)))
    moved = before.nodes != after.nodes
    if moved:
        changed = ("on", *changed)
    restart = any(k in RESTART_FIELDS for k in changed)
    if restart or (moved and not (before.stateful and after.stateful)):
        kind = REPLACE
    elif moved:
        kind = MOVE
    else:
        kind = IN_PLACE
    return OperatorChange(before.name, kind, changed, before, after)


def apply(old: State, plan: Plan) -> dict[str, tuple[Operator, ...]]:
    """The state after carrying out `plan` on `old`: what an executor must reach."""
    result = {job: tuple(ops) for job, ops in old.items()}
    for change in plan.changes:
        if change.action == DELETE:
            if change.job not in result:
                raise ValueError(f"the plan deletes job {change.job}, which is not running")
            del result[change.job]
        else:
            if (change.action == DEPLOY) == (change.job in result):
                raise ValueError(f"the plan's {change.action} of job {change.job} does not "
                                 "fit the running jobs")
            result[change.job] = tuple(change.after or ())
    return result
