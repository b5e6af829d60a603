"""The emulation's scenario features (emu.features) and the run's loop over them, without
containers: which features a scenario makes, what they prepare before the cluster, and that
the run stops every one of them and asks each in turn."""

from __future__ import annotations

import pytest

import emu.run.emulate
from emu.features import FEATURES
from emu.features.base import Feature, Run, Setup
from emu.run.emulate import Request, Timing, scenario_features
from tests.conftest import build_experiment


def test_every_scenario_key_emu_runs_has_its_emu_feature():
    from workloads.features import FEATURES as KEYS

    on_emu = {feature.key for feature in KEYS if "emu" in feature.backends}
    # `migration` is the migrations' settings; `load` devices run as ordinary ones on emu.
    assert on_emu - set(FEATURES) == {"migration", "load"}
    assert set(FEATURES) <= {feature.key for feature in KEYS}
    assert all(cls.key == key for key, cls in FEATURES.items())


def test_a_scenario_makes_its_features_in_order_and_those_always_there():
    assert [f.key for f in scenario_features({})] == ["faults", "migrations"]
    made = scenario_features({"broadcasts": [], "recovery": object(), "policy": object()})
    assert [f.key for f in made] == ["faults", "recovery", "migrations"]


def test_prepare_gives_the_sessions_timeout_and_checks_before_the_cluster():
    point = build_experiment("recovery", ["run.backend=emu",
                                          "scenario.migrations=[{at: 4s, operator: count, "
                                          "to: gw-2}]"]).points[0]
    spec = point.spec
    request = Request(point.topology, spec.workload, spec.pipeline, Timing(30.0), 3,
                      dict(spec.scenario))
    setup = Setup(request.topology, request.workload, request.pipeline, request.timing,
                  request.seed, dict(request.scenario))
    features = scenario_features(request.scenario)
    for feature in features:
        feature.prepare(setup)
    assert [f.key for f in features] == ["faults", "recovery", "migrations"]
    assert setup.moving == {"count"} and setup.session_timeout == 2.0
    assert setup.spares == {} and len(setup.checks) == 1  # the faults against the plan


class Noted(Feature):
    """A feature that notes its steps in a shared journal."""

    def __init__(self, key: str, journal: list, fail_poll: bool = False) -> None:
        super().__init__(None)
        self.key, self.journal, self.fail_poll = key, journal, fail_poll
        self.stopped = False

    def poll(self) -> None:
        self.journal.append(("poll", self.key))
        if self.fail_poll and self.stopped:
            raise RuntimeError(f"{self.key} failed while stopping")

    def stop(self) -> None:
        self.stopped = True
        self.journal.append(("stop", self.key))

    def migrations(self) -> list:
        return [f"moved by {self.key}"]


def run_of(features: list[Feature]) -> Run:
    return Run(None, None, {}, None, None, {}, None, Timing(1.0), 0,
               {f.key: f for f in features})


def test_the_run_stops_every_feature_when_measuring_fails(monkeypatch):
    journal: list = []
    features = [Noted("a", journal), Noted("b", journal)]

    def broken(*args):
        raise OSError("the engine went away")

    monkeypatch.setattr(emu.run.emulate, "_measure", broken)
    with pytest.raises(OSError, match="engine went away"):
        emu.run.emulate._during(run_of(features), lambda seconds: None)
    assert journal == [("stop", "a"), ("stop", "b")]


def test_a_failure_found_after_the_stop_stops_the_run_and_migrations_come_in_order(
        monkeypatch):
    journal: list = []
    features = [Noted("a", journal), Noted("b", journal, fail_poll=True)]

    def measured(cluster, status, timing, epoch, progress, health, poll, clock=None):
        poll()
        return {"nodes": {}}, {}

    monkeypatch.setattr(emu.run.emulate, "_measure", measured)
    run = run_of(features)
    with pytest.raises(RuntimeError, match="b failed while stopping"):
        emu.run.emulate._during(run, lambda seconds: None)
    assert journal == [("poll", "a"), ("poll", "b"), ("stop", "a"), ("stop", "b"),
                       ("poll", "a"), ("poll", "b")]
    features[1].fail_poll = False
    emu.run.emulate._during(run, lambda seconds: None)
    assert run.moved == ["moved by a", "moved by b"]


class Left(Feature):
    def __init__(self, key: str, operators: dict[str, set[str]]) -> None:
        super().__init__(None)
        self.key, self.operators = key, operators

    def left(self, node: str, incarnation: int) -> set[str]:
        return self.operators.get(node, set())


def test_a_revived_agent_leaves_out_what_every_feature_moved_away():
    from emu.features.faults import Faults

    faults = Faults([])
    run = run_of([faults, Left("migrations", {"gw-1": {"count"}}),
                  Left("recovery", {"gw-1": {"avg"}, "gw-2": {"max"}})])
    run.epoch = 100.0
    assert faults._revival(run, "gw-1") == {"epoch": 100.0, "incarnation": 1,
                                             "away": ["avg", "count"]}
    assert faults._revival(run, "gw-1")["incarnation"] == 2
    assert faults._revival(run, "gw-3") == {"epoch": 100.0, "incarnation": 1, "away": []}
