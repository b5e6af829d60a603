"""Planned migrations start at the same moments on every backend (workloads.migration.schedule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.cluster.deployment import agent_configs
from emu.features.migrations import MigrationSchedule
from experiments.loader import load
from tests.foundation.helpers import simulate_point
from workloads.migration.schedule import migration_starts
from workloads.scenario import ScheduledMigration

EXPERIMENT = Path(__file__).parents[2] / "experiments" / "migrate-pause-transfer.yaml"


def test_within_window_draws_once_per_such_plan_from_the_migrations_stream():
    plans = [ScheduledMigration(at=10, operator="a", to="x", within_window=True),
             ScheduledMigration(at=20, operator="b", to="x"),
             ScheduledMigration(at=30, operator="a", to="y", within_window=True)]
    starts = migration_starts(plans, {"a": 2.0, "b": 5.0}.get, seed=4)
    again = migration_starts(plans, {"a": 2.0, "b": 5.0}.get, seed=4)
    assert starts == again
    assert [plan for plan, _ in starts] == plans
    assert 10 <= starts[0][1] < 12 and starts[1][1] == 20 and 30 <= starts[2][1] < 32
    assert starts[0][1] - 10 != starts[2][1] - 30  # two draws, not one
    assert migration_starts(plans, {"a": 2.0, "b": 5.0}.get, seed=5) != starts
    # No window: no draw, and the next plan's draw is unchanged.
    unwindowed = migration_starts(plans, {"a": 0.0, "b": 5.0}.get, seed=4)
    assert [t for _, t in unwindowed] == [10, 20, 30]


def test_sim_and_emu_plan_the_same_start_for_one_file_and_seed():
    point = load(EXPERIMENT, overrides=["scenario.migrations.0.within_window=true",
                                         "run.duration=25s", "run.seed=11"]).points[0]
    spec = point.spec
    result = simulate_point(point)
    sim_starts = list(result.tables["migrations"]["start"])
    configs = agent_configs(point.topology, spec.workload, spec.pipeline, spec.run.seed, 0.0,
                            moving=["count"])
    emu_starts = [t for t, _ in MigrationSchedule(None, spec.scenario.migrations, None,
                                                  configs, 0.0, spec.run.seed).plans]
    assert sim_starts == pytest.approx(emu_starts)
    assert 20 < sim_starts[0] < 22  # drawn within the 2 s window after `at`
