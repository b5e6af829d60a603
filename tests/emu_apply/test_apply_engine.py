"""emu.live.apply without containers: what the agents answer becomes a state, and a plan becomes
exactly the requests it needs (a controller that notes them stands in for the agents; the
module's emu tests run the real ones)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from emu.control.commands import CommandResult, Reply
from emu.live.apply import (
    ApplyError,
    Running,
    desired,
    emu_operator,
    execute,
    plan_for,
    read_running,
)

HERE = Path(__file__).parent


def loaded(name: str):
    from experiments.emu_commands import load_for_emu

    _, experiment = load_for_emu(str(HERE / f"{name}.yaml"), [])
    return desired(experiment)


@dataclass
class Noting:
    """A controller whose agents answer every request ok; `answers`: node -> the result of
    operators.list."""

    answers: dict
    silent: tuple = ()

    def __post_init__(self) -> None:
        self.sent: list[tuple[str, tuple, str]] = []

    def send(self, nodes, command, args=None, timeout=10.0):
        nodes = list(nodes)
        result = CommandResult(command, timeout=timeout)
        for node in nodes:
            if node in self.silent:
                continue
            answer = self.answers.get(node, {}) if command == "operators.list" else None
            result.replies[node] = Reply(node, True, None, 0.0, 0.0, 0.0, answer)
        result.missing = [n for n in nodes if n in self.silent]
        if command != "operators.list":
            self.sent.append((command, tuple(nodes), (args or {}).get("operator")
                              or (args or {}).get("name")))
        return result


def listing(wanted, job: bool = True) -> dict:
    """operators.list's answers of agents running `wanted` (as `up` installs it: no job
    kept unless `job`)."""
    answers: dict = {}
    for (name, node), config in wanted.configs.items():
        entry = asdict(config)
        if not job:
            entry["job"] = None
        answers.setdefault(node, {})[name] = {"config": entry, "running": True}
    return answers


AGENTS = {node: SimpleNamespace(broker="broker", kind="gateway", state="running")
          for node in ("gw-1", "gw-2", "gw-3")}


def test_the_emulations_fields_ignore_how_an_instance_is_wired() -> None:
    config = {"name": "count", "task": "passthrough", "reads": ["$share/count/s/#"],
              "window": 2.0, "session": "foglab-op-count-gw-2", "broker": "b", "job": "local"}
    shared = emu_operator(config, ["gw-3", "gw-2"])
    plain = emu_operator({**config, "reads": ["s/#"], "session": None, "job": None}, ["gw-2",
                                                                                   "gw-3"])
    assert shared == plain and shared.nodes == ("gw-2", "gw-3") and shared.stateful
    assert emu_operator({**config, "params": {"x": 1}}, ["gw-2"]) != emu_operator(config,
                                                                                  ["gw-2"])


def test_what_the_agents_run_is_read_into_jobs() -> None:
    base = loaded("base")
    answers = listing(base, job=False)  # brought up by `up`: grouped by the experiment's jobs
    answers["gw-3"]["stray"] = {"config": {"name": "stray", "reads": ["s/#"]},
                                "running": True}
    answers["gw-1"]["idle"] = {"config": {"name": "idle", "job": "x"}, "running": False}
    running = read_running(Noting(answers), ["gw-1", "gw-2", "gw-3"],
                           {c.name: c.job for c in base.configs.values()})
    assert sorted(running.state) == ["clean", "extra", "local", "stray"]  # no stopped idle
    assert [op.name for op in running.state["local"]] == ["local-count", "local-tap"]
    plan = plan_for(running, base)
    assert plan.summary() == "Plan: 0 to deploy, 0 to modify, 1 to delete."
    assert plan.changes[0].job == "stray"


def test_a_silent_agent_is_named_and_a_refusal_stops() -> None:
    base = loaded("base")
    running = read_running(Noting(listing(base), silent=("gw-2",)), ["gw-1", "gw-2"])
    assert running.silent == ["gw-2"]

    class Refusing(Noting):
        def send(self, nodes, command, args=None, timeout=10.0):
            result = super().send(nodes, command, args, timeout)
            result.replies["gw-1"] = Reply("gw-1", False, "unknown command", 0, 0, 0)
            return result

    with pytest.raises(ApplyError, match="gw-1 refused operators.list: unknown command"):
        read_running(Refusing({}), ["gw-1"])


def test_a_plan_becomes_exactly_its_requests(monkeypatch) -> None:
    base, wanted = loaded("base"), loaded("jobs")
    moved = []

    def migrate(control, operator, source, target, strategy, settings=None, **_):
        moved.append((operator, source, target, strategy))
        return SimpleNamespace(status="done", error=None)

    monkeypatch.setattr("emu.features.moves.dispatch.migrate", migrate)
    control = Noting(listing(base))
    running = read_running(control, ["gw-1", "gw-2", "gw-3"])
    plan = plan_for(running, wanted)
    assert plan.summary() == "Plan: 1 to deploy, 2 to modify, 1 to delete."
    steps = execute(control, plan, wanted, running, agents=AGENTS)
    # Deletes first, deploys last (an operator may change jobs), modifications between.
    assert control.sent == [
        ("stop", ("gw-3",), "extra"), ("uninstall", ("gw-3",), "extra"),
        ("update", ("gw-1",), "clean"),
        ("install", ("gw-3",), "alert"), ("start", ("gw-3",), "alert")]
    assert moved == [("local-count", "gw-2", "gw-3", "pause_transfer")]
    assert [(s.job, s.requests) for s in steps] == [("extra", 2), ("clean", 1), ("local", 1),
                                                    ("alert", 2)]


def test_a_move_between_brokers_is_refused_before_any_request() -> None:
    base, wanted = loaded("base"), loaded("jobs")
    control = Noting(listing(base))
    running = read_running(control, ["gw-1", "gw-2", "gw-3"])
    apart = {**AGENTS, "gw-3": SimpleNamespace(broker="broker-2", kind="gateway",
                                               state="running")}
    with pytest.raises(ApplyError, match="local-count moves gw-2 -> gw-3.*does not bridge"):
        execute(control, plan_for(running, wanted), wanted, running, agents=apart)
    assert control.sent == []


def test_a_failed_step_names_what_was_done_and_what_was_not() -> None:
    base, wanted = loaded("base"), loaded("param")

    class Failing(Noting):
        def send(self, nodes, command, args=None, timeout=10.0):
            result = super().send(nodes, command, args, timeout)
            if command == "update":
                result.replies = {n: Reply(n, False, "update: bad", 0, 0, 0) for n in nodes}
            return result

    control = Failing(listing(base))
    running = read_running(control, ["gw-1", "gw-2", "gw-3"])
    with pytest.raises(ApplyError, match=r"job clean \(modify\): update of clean: .*bad.*"
                                         r"applied before it: none; not begun: none"):
        execute(control, plan_for(running, wanted), wanted, running, agents=AGENTS)
    assert isinstance(running, Running)


def test_an_operator_changing_jobs_is_uninstalled_before_it_is_installed() -> None:
    base = loaded("base")
    answers = listing(base)
    answers["gw-2"]["local-tap"]["config"]["job"] = "former"  # kept by the agent
    control = Noting(answers)
    running = read_running(control, ["gw-1", "gw-2", "gw-3"])
    assert [op.name for op in running.state["former"]] == ["local-tap"]
    plan = plan_for(running, base)
    assert plan.summary() == "Plan: 0 to deploy, 1 to modify, 1 to delete."  # local gains it
    execute(control, plan, base, running, agents=AGENTS)
    assert control.sent == [("stop", ("gw-2",), "local-tap"),
                            ("uninstall", ("gw-2",), "local-tap"),
                            ("install", ("gw-2",), "local-tap"),
                            ("start", ("gw-2",), "local-tap")]
