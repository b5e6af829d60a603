"""The hybrid run's facts about its actions: the decision-to-action p95 over the actions that
began, with its count, or absent with why; each failed action's cause, counted by cause with
examples; and the benchmark's lines (benchmarks/hybrid_lag.py) saying the same, never `nan`.

The containers are a stand-in controller whose gateways answer, stay silent, answer with an
error or refuse the connection, driven by the real handover coupling and actions' workers."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from emu.control.commands import CommandResult, Reply
from experiments.hybrid.actions import Action, Actions
from experiments.hybrid.backend import _Coupled
from experiments.hybrid.handover import Handovers
from experiments.hybrid.realtime import lag_of

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "hybrid_lag.py"


class Agents:
    """A stand-in for emu.control.commands.Controller: `answers[node]` is how the node's agent
    answers ("ok", "silent", an error message, or an exception the send raises); `hold` blocks every
    request to that node until the actions are abandoned (a queue the run ends before)."""

    def __init__(self, answers: dict, hold: str | None = None) -> None:
        self.answers, self.hold = answers, hold
        self.held = threading.Event()
        self.actions: Actions | None = None

    def send(self, nodes, command, args=None, timeout=10.0, **options) -> CommandResult:
        (node,) = nodes
        if node == self.hold:
            self.held.set()
            self.actions._abandon.wait(10.0)
        how = self.answers.get(node, "ok")
        if isinstance(how, BaseException):
            raise how
        result = CommandResult(command, timeout=timeout)
        if how == "silent":
            result.missing = [node]
        else:
            result.replies[node] = Reply(node, how == "ok", None if how == "ok" else how,
                                         0.0, 0.0, 0.0, {"device": (args or {}).get("device")})
        return result


def coupled(done: list[Action], handovers=None, lags=(0.001,) * 10) -> _Coupled:
    """The run's coupling as it stands when its facts are read, without the run."""
    run = object.__new__(_Coupled)
    run.lag, run.done, run.load = lag_of(list(lags)), done, None
    run.parts = {"movers": [], "links": SimpleNamespace(updates=0),
                 "handovers": handovers or SimpleNamespace(moves=[])}
    return run


def handed_over(targets: list[str], agents: Agents) -> tuple[list[Action], Handovers]:
    """One user per target, each on gw-a, handed over to its target in order, on one worker;
    the run's end (the actions' close) comes while the request to `agents.hold` is held."""
    actions = agents.actions = Actions(workers=1)
    devices = [f"u-{i}" for i in range(len(targets))]
    mobility = SimpleNamespace(devices=devices, env=SimpleNamespace(now=0.0))
    handovers = Handovers(mobility, actions, agents, dict.fromkeys(devices, "gw-a"))
    for user, target in enumerate(targets):
        mobility.env.now = float(user)
        handovers.attach(user, target)
    if agents.hold is not None:
        assert agents.held.wait(10.0)  # those before it are done; it and those after wait
    return actions.close(timeout=0.2, grace=10.0), handovers


def test_the_p95_is_over_the_actions_that_began_and_failures_are_counted_by_cause():
    agents = Agents({"gw-silent": "silent", "gw-full": "no room for u-6 (64 devices)",
                     "gw-down": ConnectionRefusedError(111, "Connection refused")},
                    hold="gw-slow")
    targets = (["gw-b"] * 5 + ["gw-silent", "gw-full", "gw-down", "gw-silent"]
               + ["gw-slow"] + ["gw-b"] * 3)
    done, handovers = handed_over(targets, agents)
    facts = json.loads(json.dumps(coupled(done, handovers).facts()))  # as the manifest has it

    # Every action has a cause when it failed; the ones after the held one never began.
    assert [a.ok for a in done] == [True] * 5 + [False] * 4 + [True] + [False] * 3
    failures = facts["action_failures"]
    assert facts["actions"] == 13 and facts["actions_failed"] == 7
    assert {cause: found["count"] for cause, found in failures.items()} == {
        "not begun": 3, "timeout": 2, "not ok": 1, "ConnectionRefusedError": 1}
    assert list(failures) == ["not begun", "timeout", "not ok", "ConnectionRefusedError"]
    assert failures["timeout"]["examples"] == [
        {"t": 5.0, "action": "handover", "subject": "u-5", "node": "gw-silent",
         "error": "device.join u-5: gw-silent did not answer within 10 s"},
        {"t": 8.0, "action": "handover", "subject": "u-8", "node": "gw-silent",
         "error": "device.join u-8: gw-silent did not answer within 10 s"}]
    assert failures["not ok"]["examples"] == [
        {"t": 6.0, "action": "handover", "subject": "u-6", "node": "gw-full",
         "error": "gw-full: no room for u-6 (64 devices)"}]
    (refused,) = failures["ConnectionRefusedError"]["examples"]
    assert refused["subject"] == "u-7" and "Connection refused" in refused["error"]
    assert [e["subject"] for e in failures["not begun"]["examples"]] == ["u-10", "u-11", "u-12"]
    assert all(e["error"] == "not carried out: the run ended before its turn"
               for e in failures["not begun"]["examples"])

    # The p95 is over the 10 that began (each waited that long for its first command, failed
    # or not), never NaN for the 3 that did not; they are counted beside it.
    began = [a.decision_to_action for a in done if not math.isnan(a.t_begun)]
    assert len(began) == 10
    for name in ("decision_to_action", "handover_decision_to_action"):
        assert facts[f"{name}_ms_p95"] == round(float(np.percentile(began, 95)) * 1e3, 3)
        assert facts[f"{name}_n"] == 10 and facts[f"{name}_not_begun"] == 3
        assert f"{name}_unmeasured" not in facts


def test_the_p95_is_over_the_measured_delays_only():
    def action(subject: str, delay: float, error: str = "", cause: str = "") -> Action:
        made = Action("handover", subject, 0.0, 100.0, lambda a: None, ok=not error,
                      error=error, t_begun=100.0 + delay, t_done=100.0 + delay + 0.05)
        made.cause = cause
        return made

    done = [action(f"u-{d}", d / 1000) for d in range(1, 21)]  # 1 to 20 ms, all ok
    # Two that began and failed: their wait for the first command was measured all the same.
    done += [action("u-30", 0.030, "device.join u-30: gw-2 did not answer within 10 s",
                    "timeout"), action("u-31", 0.031, "gw-2: no room", "not ok")]
    # Five still queued when the run ended: no start, no delay to count.
    never = [action(f"u-{40 + i}", math.nan, "not carried out: the run ended before its turn",
                    "not begun") for i in range(5)]
    facts = coupled(done + never).facts()
    measured = [*range(1, 21), 30, 31]
    assert facts["decision_to_action_ms_p95"] == pytest.approx(np.percentile(measured, 95))
    assert facts["decision_to_action_n"] == 22 and facts["decision_to_action_not_begun"] == 5
    assert facts["actions_failed"] == 7
    assert {cause: found["count"] for cause, found in facts["action_failures"].items()} == {
        "not begun": 5, "timeout": 1, "not ok": 1}


def test_with_no_action_begun_the_figure_is_absent_with_why():
    agents = Agents({}, hold="gw-slow")
    done, handovers = handed_over(["gw-slow", "gw-b", "gw-b"], agents)
    # The held one began (its request went out); make it the only kind of the figure to
    # read: the two after it never began.
    facts = coupled([a for a in done if a.subject != "u-0"], handovers).facts()
    for name in ("decision_to_action", "handover_decision_to_action"):
        assert facts[f"{name}_ms_p95"] is None
        assert facts[f"{name}_n"] == 0 and facts[f"{name}_not_begun"] == 2
        assert facts[f"{name}_unmeasured"] == (
            "none of the 2 handovers decided began (not begun x2)")
    assert facts["actions_failed"] == 2 and facts["action_failures"]["not begun"]["count"] == 2

    nothing = coupled([]).facts()
    assert nothing["decision_to_action_ms_p95"] is None and nothing["decision_to_action_n"] == 0
    assert nothing["decision_to_action_unmeasured"] == "no handovers or links decided"
    assert nothing["handover_decision_to_action_unmeasured"] == "no handovers decided"
    assert nothing["actions_failed"] == 0 and nothing["action_failures"] == {}


def test_a_model_with_no_event_has_no_lag_figures_but_why():
    lag = coupled([], lags=()).facts()["lag"]
    assert lag["events"] == 0
    assert lag["lag_p50_ms"] is None and lag["lag_p99_ms"] is None and lag["lag_max_ms"] is None
    assert "no event" in lag["lag_unmeasured"]


def test_the_load_generators_lag_says_over_how_many_emissions_or_why_none():
    from array import array

    from experiments.hybrid.load import LoadGenerator

    def facts(lags: list[float]) -> dict:
        generator = object.__new__(LoadGenerator)
        generator.timed = SimpleNamespace(lags=array("d", lags))
        generator.records = SimpleNamespace(sent_count=len(lags))
        generator.epoch, generator.started_at, generator.stopped_at = 0.0, 0.0, 10.0
        generator.targets, generator.devices = [], 0
        generator.published = generator.batches = generator.refused = 0
        return generator.facts()["lag_ms"]

    assert facts([0.001, 0.002, 0.004]) == {"p50": 2.0, "p99": 3.96, "max": 4.0, "n": 3}
    nothing = facts([])
    assert nothing["p99"] is None and nothing["n"] == 0
    assert nothing["unmeasured"] == "the generator emitted nothing (no emission came due)"


def benchmark():
    """benchmarks/hybrid_lag.py as a module (benchmarks/ is no package)."""
    if "hybrid_lag" not in sys.modules:
        spec = importlib.util.spec_from_file_location("hybrid_lag", BENCHMARK)
        module = sys.modules["hybrid_lag"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["hybrid_lag"]


def test_the_benchmark_prints_the_counts_the_causes_and_why_a_figure_is_unmeasured():
    agents = Agents({"gw-silent": "silent"}, hold="gw-slow")
    done, handovers = handed_over(["gw-b", "gw-silent", "gw-slow", "gw-b"], agents)
    measured = benchmark().lines(coupled(done, handovers).facts(), 0.25)
    text = "\n".join(measured)
    assert "nan" not in text
    assert "actions=4 actions_failed=2" in measured[0]
    assert ('actions_failed_cause="timeout" count=1 first: t=1.0 s handover u-1 on gw-silent: '
            "device.join u-1: gw-silent did not answer within 10 s") in measured
    assert ('actions_failed_cause="not begun" count=1 first: t=3.0 s handover u-3: '
            "not carried out: the run ended before its turn") in measured
    (p95,) = [line for line in measured if line.startswith("decision_to_action_ms_p95=")]
    assert p95.endswith("decision_to_action_n=3 decision_to_action_not_begun=1")

    unmeasured = benchmark().lines(coupled([], lags=()).facts(), 0.25)
    assert ("decision_to_action_ms_p95=unmeasured reason=no handovers or links decided "
            "decision_to_action_n=0 decision_to_action_not_begun=0") in unmeasured
    assert any(line.startswith("lag_p50_ms=unmeasured reason=the model processed no event")
               for line in unmeasured)
    assert any(line.startswith("ratio=unmeasured") for line in unmeasured)
    assert "nan" not in "\n".join(unmeasured)


def test_the_run_summary_shows_the_hybrid_figures_with_the_failures_by_cause():
    from experiments.hybrid.figures import summary

    agents = Agents({"gw-silent": "silent"}, hold="gw-slow")
    done, handovers = handed_over(["gw-b", "gw-silent", "gw-slow", "gw-b"], agents)
    figures = summary({}, {"hybrid": coupled(done, handovers).facts()})
    assert figures["actions"] == 4 and figures["failed"] == 2
    assert figures["failures"] in ("timeout x1; not begun x1", "not begun x1; timeout x1")
    assert figures["over actions"] == 3 and figures["decision to action p95 ms"] >= 0
    assert "unmeasured" not in figures
    nothing = summary({}, {"hybrid": coupled([], lags=()).facts()})
    assert nothing["decision to action p95 ms"] is None
    assert "decision to action: no handovers or links decided" in nothing["unmeasured"]
    assert summary({}, {}) == {}
