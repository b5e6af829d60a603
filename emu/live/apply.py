"""Carrying out a plan of jobs (workloads.apply) on a cluster that is up: read, execute, verify.

The running state is read back from the agents themselves (`operators.list`: each operator's
config as it runs now, its job kept in the config), never from a copy on the host, so an
agent that restarted with its first operators, or an operator moved or updated by hand, is
seen as it is. Both states are compared in what the emulation runs (`EMU_FIELDS`, the
fields an agent's OperatorConfig holds): a field the agents do not impose (`cost`,
`window.jitter`: measured on emu, emu.cluster.deployment.ON_EMU) cannot be seen running, so it is no
change here.

The plan's rows become requests, job after job (as SpecK's coordinator): a deploy installs
and starts each instance; a delete stops and uninstalls; an in-place change updates the
task's parameters where they run (any other live setting restarts the instance: the agent
takes only `params` live); a replace stops and uninstalls the old operators and installs the
new ones; a move goes through the migration machinery (emu.features.moves.dispatch), so a windowed
operator keeps its windows. Then the state is read back and must be the desired one, or an
ApplyError names what differs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from emu.agent.config import AGENT_KINDS, OperatorConfig
from workloads.apply import (
    DELETE,
    DEPLOY,
    IN_PLACE,
    MODIFY,
    MOVE,
    Change,
    Operator,
    OperatorChange,
    Plan,
    diff,
)

# The fields of an operator the agents run and report (OperatorConfig's), as workloads.apply
# names them, so a plan classes their changes by its rules.
EMU_FIELDS = ("engine", "task", "params", "reads", "writes", "selectivity", "window.size",
              "checkpoint", "slo")
LIST_TIMEOUT_S = 10.0
STEP_TIMEOUT_S = 30.0


class ApplyError(RuntimeError):
    """An apply that cannot start (nothing was changed) or whose step failed (what was done
    is named)."""


@dataclass
class Desired:
    """What an experiment runs on a cluster: its state (job -> operators, in EMU_FIELDS)
    and each instance's config as `foglab emu up --experiment` would install it."""

    state: dict[str, tuple[Operator, ...]]
    configs: dict[tuple[str, str], OperatorConfig]  # (operator, node) -> its config


@dataclass
class Step:
    """One job's change carried out: its requests' time."""

    job: str
    action: str
    kind: str | None
    seconds: float
    requests: int


@dataclass
class Applied:
    """An apply's record: the read-back before, each job's step, the verification."""

    read_s: float = 0.0
    steps: list[Step] = field(default_factory=list)
    verify_s: float = 0.0

    @property
    def execute_s(self) -> float:
        return sum(step.seconds for step in self.steps)

    @property
    def total_s(self) -> float:
        return self.read_s + self.execute_s + self.verify_s


# -- the two states --------------------------------------------------------------------------

def _reads(config: Mapping[str, Any]) -> list[str]:
    """The topic filters as the operator wrote them: a shared subscription's prefix
    (emu.cluster.deployment.shared_reads, added for several instances) is the emulation's own."""
    prefix = f"$share/{config['name']}/"
    return [r.removeprefix(prefix) for r in config.get("reads") or []]


def emu_operator(config: Mapping[str, Any], nodes: Iterable[str]) -> Operator:
    """An operator as the emulation runs it: its config's fields (an OperatorConfig's, as
    `operators.list` answers them) and its nodes, sorted."""
    window = config.get("window")
    if isinstance(window, dict):
        window = window.get("size")
    values = {"engine": config.get("engine", "python"), "task": config.get("task"),
              "params": config.get("params") or {}, "reads": _reads(config),
              "writes": config.get("writes"), "selectivity": config.get("selectivity", 1.0),
              "window.size": window, "checkpoint": config.get("checkpoint"),
              "slo": config.get("slo")}
    return Operator(config["name"], tuple(sorted(nodes)), tuple(sorted(
        (key, json.dumps(value, sort_keys=True)) for key, value in values.items())))


def desired(loaded: Any) -> Desired:
    """The experiment's jobs as the emulation would run them (emu.cluster.deployment.agent_configs,
    as `foglab emu up --experiment` places them: every instance movable), each instance's
    config keeping its job."""
    from emu.cluster.deployment import agent_configs

    point = loaded.points[0]
    pipeline = list(point.spec.pipeline)
    grouped = point.jobs or {op.name: [op.name] for op in pipeline}  # as the loader composed
    job_of = {name: job for job, names in grouped.items() for name in names}
    agents = agent_configs(point.topology, None, pipeline,
                           moving={op.name for op in pipeline})
    configs: dict[tuple[str, str], OperatorConfig] = {}
    for node, agent in agents.items():
        for config in agent.operators:
            configs[config.name, node] = replace(config, job=job_of[config.name])
    nodes: dict[str, list[str]] = {}
    for name, node in configs:
        nodes.setdefault(name, []).append(node)
    state = {job: tuple(emu_operator(asdict(configs[name, nodes[name][0]]), nodes[name])
                        for name in names if name in nodes)
             for job, names in grouped.items()}
    return Desired({job: ops for job, ops in state.items() if ops}, configs)


@dataclass
class Running:
    """What the agents answered: the state, each instance's config, and the agents that did
    not answer."""

    state: dict[str, tuple[Operator, ...]]
    configs: dict[tuple[str, str], dict[str, Any]]
    silent: list[str]


def read_running(control: Any, agents: Iterable[str], jobs: Mapping[str, str] | None = None,
                 timeout: float = LIST_TIMEOUT_S) -> Running:
    """The jobs the agents run now (`operators.list`), in EMU_FIELDS. An instance stopped
    is not running. An operator whose config names no job (brought up before jobs were
    kept) is grouped by `jobs` (operator -> job, the desired experiment's), else it is a job
    of its own. Instances of one operator that differ are told apart (`name` on its nodes
    with another config): the plan then replaces it."""
    answered = control.send(list(agents), "operators.list", timeout=timeout)
    configs: dict[tuple[str, str], dict[str, Any]] = {}
    for node, reply in sorted(answered.replies.items()):
        if not reply.ok:
            raise ApplyError(f"{node} refused operators.list: {reply.error} (an agent "
                             "older than this foglab? `foglab emu build` and bring it up "
                             "again)")
        for name, entry in (reply.result or {}).items():
            if entry.get("running"):
                configs[name, node] = entry["config"]
    jobs = dict(jobs or {})
    grouped: dict[str, dict[str, list[str]]] = {}  # job -> operator -> its nodes
    for (name, node), config in configs.items():
        job = config.get("job") or jobs.get(name, name)
        grouped.setdefault(job, {}).setdefault(name, []).append(node)
    state = {}
    for job, operators in sorted(grouped.items()):
        found = []
        for name, nodes in operators.items():
            shapes: dict[str, list[str]] = {}
            for node in nodes:  # instances alike share one Operator
                key = json.dumps(emu_operator(configs[name, node], ()).fields)
                shapes.setdefault(key, []).append(node)
            for where in shapes.values():
                found.append(emu_operator(configs[name, where[0]], where))
        state[job] = tuple(found)
    return Running(state, configs, sorted(answered.missing))


def plan_for(running: Running, wanted: Desired) -> Plan:
    """The plan from what runs to what the experiment describes, each job's operators in
    the experiment's order (the running ones in theirs)."""
    order = {op.name: i for ops in wanted.state.values() for i, op in enumerate(ops)}
    old = {job: tuple(sorted(ops, key=lambda op: order.get(op.name, len(order))))
           for job, ops in running.state.items()}
    return diff(old, wanted.state)


# -- carrying it out -------------------------------------------------------------------------

class _Requests:
    """The apply's requests through one controller, each checked: a refusal or a node that
    does not answer stops the apply with what was done so far."""

    def __init__(self, control: Any, timeout: float) -> None:
        self.control = control
        self.timeout = timeout
        self.count = 0

    def send(self, nodes: Iterable[str], command: str, args: dict[str, Any]) -> None:
        nodes = list(nodes)
        if not nodes:
            return
        result = self.control.send(nodes, command, args, timeout=self.timeout)
        self.count += len(nodes)
        if not result.ok:
            raise ApplyError(f"{command} of {args.get('operator') or args.get('name')}: "
                             f"{result.summary()}")

    def deploy(self, name: str, nodes: Iterable[str], configs: Mapping) -> None:
        """Install and start an instance on each node, each with its own config."""
        nodes = list(nodes)
        for node in nodes:
            self.send([node], "install", asdict(configs[name, node]))
        self.send(nodes, "start", {"operator": name})

    def remove(self, name: str, nodes: Iterable[str]) -> None:
        nodes = list(nodes)
        self.send(nodes, "stop", {"operator": name})
        self.send(nodes, "uninstall", {"operator": name})


def execute(control: Any, plan: Plan, wanted: Desired, running: Running, *,
            agents: Mapping[str, Any], strategy: str = "pause_transfer", settings: Any = None,
            timeout: float = STEP_TIMEOUT_S,
            progress: Callable[[str], None] = lambda line: None) -> list[Step]:
    """Carry out `plan` on the cluster, job after job (deletes, then modifications, then
    deploys, each in the jobs' order); each job's step timed. Moves are
    checked first (brokers not bridged: an input session moves only between nodes of one
    broker), so a plan that cannot be carried out changes nothing."""
    for change in plan.changes:
        for op in change.operators:
            if op.kind == MOVE:
                for source, target in _pairs(op):
                    if agents[source].broker != agents[target].broker:
                        raise ApplyError(
                            f"job {change.job}: {op.name} moves {source} -> {target}, which "
                            f"talk to brokers {agents[source].broker} and "
                            f"{agents[target].broker}: the emulation does not bridge brokers "
                            "(the input session cannot move); place it behind one broker")
    requests = _Requests(control, timeout)
    steps: list[Step] = []
    # Deletes first, deploys last: an operator that changes jobs is uninstalled under its old
    # job before it is installed under its new one (a node holds one instance of a name).
    ordered = sorted(plan.changes, key=lambda c: (c.action != DELETE, c.action == DEPLOY))
    for change in ordered:
        started, before = time.perf_counter(), requests.count
        progress(f"{change.job}: {change.action} {change.kind or ''}".rstrip())
        try:
            _carry_out(requests, change, wanted, running, strategy, timeout, settings)
        except ApplyError as failure:
            done = ", ".join(step.job for step in steps) or "none"
            left = [c.job for c in ordered[len(steps) + 1:]]
            raise ApplyError(f"job {change.job} ({change.action}): {failure}; jobs applied "
                             f"before it: {done}; not begun: {', '.join(left) or 'none'} "
                             "(apply again to finish from what runs)") from None
        steps.append(Step(change.job, change.action, change.kind,
                          time.perf_counter() - started, requests.count - before))
    return steps


def _pairs(op: OperatorChange) -> list[tuple[str, str]]:
    assert op.before is not None and op.after is not None
    leaving = [n for n in op.before.nodes if n not in op.after.nodes]
    coming = [n for n in op.after.nodes if n not in op.before.nodes]
    return list(zip(leaving, coming, strict=False))


def _carry_out(requests: _Requests, change: Change, wanted: Desired, running: Running,
               strategy: str, timeout: float, settings: Any) -> None:
    if change.action == DEPLOY:
        for op in change.after or ():
            requests.deploy(op.name, op.nodes, wanted.configs)
        return
    if change.action == DELETE:
        for op in change.before or ():
            requests.remove(op.name, op.nodes)
        return
    for op in change.operators:
        before, after = op.before, op.after
        if before is None:  # added to the job
            requests.deploy(after.name, after.nodes, wanted.configs)
        elif after is None:  # removed from it
            requests.remove(before.name, before.nodes)
        elif op.kind == IN_PLACE:
            _in_place(requests, op, wanted, running)
        elif op.kind == MOVE:
            _move(requests, op, wanted, running, strategy, timeout, settings)
        else:  # replace: restarted without state, where it runs after
            requests.remove(before.name, before.nodes)
            requests.deploy(after.name, after.nodes, wanted.configs)


def _in_place(requests: _Requests, op: OperatorChange, wanted: Desired,
              running: Running) -> None:
    """The task's parameters updated where they run (the agent merges them: a parameter
    taken away restarts the instance, as does any other live setting, which the agent does
    not take live)."""
    assert op.before is not None and op.after is not None
    old = json.loads(dict(op.before.fields)["params"])
    new = json.loads(dict(op.after.fields)["params"])
    if set(op.changed) <= {"params"} and set(old) <= set(new):
        requests.send(op.after.nodes, "update", {"operator": op.name, "params": new})
        return
    requests.remove(op.name, op.before.nodes)
    requests.deploy(op.name, op.after.nodes, wanted.configs)


def _move(requests: _Requests, op: OperatorChange, wanted: Desired, running: Running,
          strategy: str, timeout: float, settings: Any = None) -> None:
    """Each instance leaving a node migrates to a node it comes to (emu.features.moves.dispatch: its
    windows go along); instances beyond the pairs are removed or deployed; then a changed
    live setting is updated where it runs now."""
    from emu.features.moves.dispatch import migrate

    assert op.before is not None and op.after is not None
    for source, target in _pairs(op):
        record = migrate(requests.control, op.name, source, target, strategy, settings,
                         timeout=timeout)
        requests.count += 1
        if record.status != "done":
            raise ApplyError(f"moving {op.name} {source} -> {target} failed and was rolled "
                             f"back: {record.error}")
    pairs = _pairs(op)
    moved_from = {s for s, _ in pairs}
    moved_to = {t for _, t in pairs}
    requests.remove(op.name, [n for n in op.before.nodes
                              if n not in op.after.nodes and n not in moved_from])
    requests.deploy(op.name, [n for n in op.after.nodes
                              if n not in op.before.nodes and n not in moved_to],
                    wanted.configs)
    if set(op.changed) - {"on"}:
        changed = OperatorChange(op.name, IN_PLACE, tuple(k for k in op.changed if k != "on"),
                                 replace(op.before, nodes=op.after.nodes), op.after)
        _in_place(requests, changed, wanted, running)


def agent_nodes(agents: Mapping[str, Any]) -> list[str]:
    """The agents that run operators: gateways and cloud VMs whose containers run."""
    return sorted(node for node, agent in agents.items()
                  if agent.kind in AGENT_KINDS and agent.state == "running")


def differences(plan: Plan) -> str:
    """What a verification's plan says differs, one job per clause."""
    parts = []
    for change in plan.changes:
        if change.action == MODIFY:
            parts.append(f"{change.job}: " + "; ".join(op.describe() for op in change.operators))
        elif change.action == DEPLOY:
            parts.append(f"{change.job}: not running")
        else:
            parts.append(f"{change.job}: still running")
    return "; ".join(parts)

