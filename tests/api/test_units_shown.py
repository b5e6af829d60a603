"""A quantity read back in base units is shown as a file writes it, with its unit: the
`differs` line of `foglab compare` and `foglab apply`'s plan (issue 43's friction list)."""

from __future__ import annotations

import json

import pytest

from experiments.compare import differences
from experiments.loader import load
from experiments.spec import ExperimentFile
from topologies.fields import unit_of
from topologies.units import shown
from workloads.apply import Operator, classify
from workloads.pipeline import OperatorSpec


@pytest.mark.parametrize(("value", "unit", "text"), [
    (20_000_000.0, "bit/s", "20Mbit"), (80_000.0, "bit/s", "80kbit"), (2.5e6, "bit/s", "2.5Mbit"),
    (0.0002, "s", "200us"), (0.0125, "s", "12.5ms"), (90.0, "s", "90s"), (600.0, "s", "10min"),
    (200_000, "B", "200KB"), (1.5e9, "Hz", "1.5GHz"), (12.5, "1/s", "12.5/s"),
    (0, "s", "0"), (7, None, "7"), ("gateways", "s", "gateways"), (True, "s", "True")])
def test_a_number_in_base_units_is_shown_as_a_file_writes_it(value, unit, text) -> None:
    assert shown(value, unit) == text


@pytest.mark.parametrize(("key", "unit"), [
    ("run.duration", "s"), ("topology.links.1.bandwidth", "bit/s"), ("pipeline.0.cost", "s"),
    ("workload.streams.0.rate", "1/s"), ("workload.streams.0.size", "B"),
    ("scenario.faults.0.for", "s"), ("topology.profiles.pi.clock", "Hz"),
    ("pipeline.0.window.size", "s"), ("run.seed", None), ("pipeline.0.selectivity", None),
    ("pipeline.0.on", None), ("nothing.here", None)])
def test_the_unit_of_a_key_is_found_in_the_experiment_schema(key, unit) -> None:
    assert unit_of(ExperimentFile, key) == unit


def test_compare_says_what_differs_with_units() -> None:
    def manifest(sets: list[str]) -> dict:
        point = load("lesson-placement", overrides=sets).points[0]
        return {"experiment": "lesson-placement", "backend": "sim", "seed": 1,
                "config": point.spec.model_dump(mode="json")}

    lines = differences(manifest([]), manifest(["topology.links.1.bandwidth=80kbit",
                                                "pipeline.0.cost=1ms"]))
    assert "topology.links.1.bandwidth: 20Mbit -> 80kbit" in lines, lines
    assert any(line.startswith("pipeline.0.cost: ") and line.endswith(" -> 1ms")
               for line in lines), lines
    assert not any("20000000" in line or "80000.0" in line for line in lines), lines


def test_the_plan_of_foglab_apply_says_changed_quantities_with_units() -> None:
    def operator(**fields) -> Operator:
        spec = OperatorSpec(name="clean", on=["gw-1"], reads=["city"], writes="kept",
                            **fields)
        dumped = spec.model_dump(mode="json", exclude={"name", "on", "window"})
        return Operator("clean", ("gw-1",), tuple(sorted(
            (key, json.dumps(value, sort_keys=True)) for key, value in dumped.items())))

    change = classify(operator(cost=0.0002, selectivity=0.9),
                      operator(cost=0.001, selectivity=0.95, out_size=2000))
    said = change.describe()
    assert "cost 200us -> 1ms" in said and "out_size null -> 2KB" in said, said
    assert "selectivity 0.9 -> 0.95" in said, said
