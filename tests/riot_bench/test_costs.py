"""Calibrated task costs: the shipped table, conversion to reference seconds, lookups."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from workloads.riot.costs import (
    SHIPPED,
    calibrate,
    load_costs,
    reference_speed,
    task_cost,
    write_costs,
)
from workloads.riot.tasks import TASKS


def test_shipped_table_knows_every_registered_task() -> None:
    for name in TASKS:
        cost = task_cost(name)
        assert cost is not None and 1e-8 < cost < 1e-2, name


def test_shipped_table_says_where_and_when_it_was_measured() -> None:
    document = json.loads(SHIPPED.read_text())
    assert document["speed"] == 1.0
    assert {"cpu", "cpus", "machine", "python"} <= set(document["host"])
    assert document["measured"][:2] == "20"


def test_unknown_task_has_no_cost() -> None:
    assert task_cost("average") is None
    assert task_cost("average", {"range_filter": 1e-6}) is None


def test_a_user_table_replaces_the_shipped_one(tmp_path: Path) -> None:
    assert task_cost("range_filter", {"range_filter": 3e-6}) == 3e-6
    path = write_costs({"range_filter": 2e-6}, tmp_path / "costs.json", speed=0.5,
                       bench={"duration": 0.1})
    assert load_costs(path) == {"range_filter": 2e-6}
    assert task_cost("range_filter", path) == 2e-6
    assert task_cost("kalman_filter", str(path)) is None


def test_calibrate_takes_the_median_and_scales_by_the_host_speed() -> None:
    # Three repetitions of range_filter, one of join, measured on a host twice the reference's
    # speed: its measured seconds are worth two reference seconds, so the costs double.
    table = pd.DataFrame({"task": ["range_filter", "join", "range_filter", "range_filter"],
                          "cpu_per_message": [1e-6, 5e-6, 3e-6, 2e-6]})
    assert calibrate(table, speed=2.0) == pytest.approx({"range_filter": 4e-6, "join": 1e-5})
    assert calibrate(table, speed=1.0) == pytest.approx({"range_filter": 2e-6, "join": 5e-6})


def test_reference_speed_is_a_positive_ratio() -> None:
    speed = reference_speed(repetitions=3)
    assert 0.05 < speed < 20  # this host is the reference, but a busy one
