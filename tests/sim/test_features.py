"""The model's side of the scenario-feature contract: a registry of feature classes that the
model attaches and finishes, each through the model's public API."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import sim.features
from sim.features import FEATURES, FROM_PLACEMENT, Feature
from sim.model import Model, ModelError
from sim.network import Network
from tests.foundation.helpers import point, settings
from workloads.features import FEATURES as SCENARIO_KEYS

# Scenario keys that are the model's own parts, not features it attaches: the
# coordinator's costs, the moving users, the policy placing follow operators, and the
# devices hybrid simulates (ordinary devices on sim).
MODEL_PARTS = {"migration", "mobility", "policy", "load"}

FEATURE_DIR = Path(sim.features.__file__).parent

STAR = """
name: features
topology:
  name: star
  nodes:
    - {name: dev, kind: device, replicas: 4}
    - {name: gw, kind: gateway, replicas: 2}
    - {name: broker, kind: broker}
    - {name: vm, kind: cloud_vm}
  links:
    - {from: dev-*, to: gw-*, mode: spread, latency: 2ms}
    - {from: gw-*, to: broker, latency: 5ms}
    - {from: broker, to: vm, latency: 1ms}
workload:
  name: w
  streams:
    - {name: s, sources: dev-*, rate: 20/s, size: 100B}
pipeline:
  - {name: sink, on: vm, reads: s}
run: {duration: 2s, seed: 3, drain: 1s}
"""
CRASH = "scenario: {faults: [{at: 1s, crash: gw-1, for: 0.5s}]}\n"


def test_every_scenario_key_that_sim_runs_is_a_registered_feature_or_a_model_part() -> None:
    on_sim = {f.key for f in SCENARIO_KEYS if "sim" in f.backends}
    assert on_sim - MODEL_PARTS == set(FEATURES) - set(FROM_PLACEMENT)
    assert set(FROM_PLACEMENT) == {"replacement"}  # placement.replace's, not a scenario key
    assert all(issubclass(cls, Feature) for cls in FEATURES.values())


def test_the_features_use_no_private_field_of_another_object() -> None:
    # `self._x` is a feature's own; `obj._x` on anything else is a reach into its insides.
    # (A feature that is its own SimPy event sets the event's fields, as sim.sources does.)
    reach = re.compile(r"(?<!self)(?<![A-Za-z_])[A-Za-z_][A-Za-z_0-9]*\._[a-z]\w*")
    found = {}
    for path in FEATURE_DIR.glob("*.py"):
        hits = [m.group(0) for m in reach.finditer(path.read_text())
                if not m.group(0).startswith("self.")]
        if hits:
            found[path.name] = hits
    assert found == {}


def test_no_feature_replaces_a_method() -> None:
    assigned = re.compile(r"^\s*[a-z_.]+\.(arrived|receive|publish|send|admit)\s*=", re.M)
    assert not [p.name for p in FEATURE_DIR.glob("*.py") if assigned.search(p.read_text())]


def test_a_run_without_features_attaches_none_and_keeps_its_shortcuts() -> None:
    model = Model(*_parts(point(STAR)))
    assert model.features == {} and not model.dynamic and not model.links_change
    assert model.network.arrived.__func__ is Network.arrived  # no arrival check
    assert model.brokers["broker"].direct  # the direct hand-over is on
    assert all(s._private for s in model.sources)  # each device's one stream on its link


def test_a_feature_that_moves_things_turns_the_direct_hand_over_off() -> None:
    model = Model(*_parts(point(STAR + CRASH)))
    assert list(model.features) == ["faults"] and model.dynamic and model.links_change
    assert not model.brokers["broker"].direct
    assert not any(s._private for s in model.sources)


def test_a_key_the_model_has_no_feature_for_is_refused() -> None:
    with pytest.raises(ModelError, match="scenario: the model has no feature teleport"):
        Model(*_parts(point(STAR), scenario={"teleport": {}}))


class Counting(Feature):
    """A feature written as a new one would be: it subscribes to crashes and adds a table."""

    dynamic = True

    def __init__(self, model, spec):
        super().__init__(model, spec)
        self.crashes = []
        model.on_crash(lambda node, now: self.crashes.append((node, now)))

    def finish(self, tables: dict, facts: dict) -> None:
        tables["crashes"] = {"node": np.array([n for n, _ in self.crashes], dtype=object)}
        facts["counted"] = self.spec["label"]


def test_a_new_feature_is_one_registration_line(monkeypatch) -> None:
    monkeypatch.setitem(FEATURES, "counting", Counting)
    run_point = point(STAR + CRASH)
    scenario = {**settings(run_point).scenario, "counting": {"label": "x"}}
    result = Model(*_parts(run_point, scenario=scenario)).run()
    assert list(result.tables["crashes"]["node"]) == ["gw-1"]
    assert result.facts["counted"] == "x" and "faults" in result.tables


def test_features_finish_in_the_reverse_order_they_attach(monkeypatch) -> None:
    order = []

    def recorder(name):
        class Recorder(Feature):
            def __init__(self, model, spec):
                super().__init__(model, spec)
                order.append(("attach", name))

            def finish(self, tables, facts):
                order.append(("finish", name))
        return Recorder

    for name in ("first", "second"):
        monkeypatch.setitem(FEATURES, name, recorder(name))
    Model(*_parts(point(STAR), scenario={"second": 1, "first": 1})).run()
    assert order == [("attach", "first"), ("attach", "second"),
                     ("finish", "second"), ("finish", "first")]


def _parts(run_point, **changes):
    return (run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
            settings(run_point, **changes))
