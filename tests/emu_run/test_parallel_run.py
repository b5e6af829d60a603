"""experiments/migrate-parallel.yaml on the model and on real containers: the same migrations
and windows tables, and on emu a window count moved between two arm64 gateways by parallel
migration, its forwarded outputs covering every event once, in order, with no window short."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq
import pytest

from experiments.loader import load
from experiments.runner import run_experiment
from experiments.schema import TABLES
from workloads.migration.measures import coverage

pytestmark = [pytest.mark.emu, pytest.mark.slow]

WINDOW = 2.0
DURATION = 30.0
# Shorter than the file's 5 s windows and 60 s, so that the test takes seconds, not minutes;
# 40 events/s rather than 100, which two emulated gateways sharing 2 busy cores with the rest
# of the host could not keep up with (benchmarks/emu_migration.py measures 100 events/s).
SHORTER = [f"pipeline.0.window.size={WINDOW:g}s", "scenario.migrations.0.at=7s",
           f"run.duration={DURATION:g}s", "workload.streams.0.rate=10/s"]


@pytest.fixture(scope="module")
def client():
    from engine import docker_engine

    return docker_engine()


def _run(tmp_path, backend: str):
    experiment = load("migrate-parallel", [*SHORTER, f"run.backend={backend}"])
    (outcome,) = run_experiment(experiment, tmp_path / backend)
    assert outcome.error is None, outcome.error
    return outcome.folder


def test_parallel_migration_moves_a_window_count_as_on_the_model(tmp_path, client) -> None:
    sim, emu = _run(tmp_path, "sim"), _run(tmp_path, "emu")
    tables = {name: (pq.read_table(sim / f"{name}.parquet"),
                     pq.read_table(emu / f"{name}.parquet")) for name in ("migrations",
                                                                          "windows")}
    for on_sim, on_emu in tables.values():
        assert on_sim.schema.equals(on_emu.schema)
    for name, (on_sim, on_emu) in tables.items():
        assert on_sim.schema.equals(TABLES[name]) and on_emu.schema.equals(TABLES[name])
    (on_model,) = tables["migrations"][0].to_pylist()
    (moved,) = tables["migrations"][1].to_pylist()
    facts = json.loads((emu / "manifest.json").read_text())["facts"]
    assert facts["migrations"][0]["status"] == "done", facts["migrations"]
    for record in (on_model, moved):
        assert (record["source"], record["target"], record["strategy"]) == (
            "gw-1", "gw-2", "parallel")
        assert record["synchronised"] in ("strong", "old_ahead", "new_ahead")
        assert record["downtime"] == 0.0 and record["state_bytes"] == 0
        assert (record["lost"], record["duplicates"], record["reordered"]) == (0, 0, 0)
    assert 7.0 <= moved["start"] < moved["end"] < DURATION
    assert not math.isnan(moved["output_gap"]) and moved["output_gap"] < 2 * WINDOW
    windows = tables["windows"][1].to_pandas().sort_values("t")
    assert coverage(zip(windows["last_sn"], windows["count"], strict=True)) == (0, 0, 0)
    assert windows["last_sn"].iloc[0] == windows["count"].iloc[0]  # from the first event
    # what the checker forwarded carries the migration's number, from both gateways' outputs
    during = windows[windows["migration"] == moved["id"]]
    assert len(during) >= 1 and set(during["node"]) <= {"gw-1", "gw-2"}
    assert set(windows[windows["t"] < moved["start"]]["node"]) == {"gw-1"}
    assert set(windows[windows["t"] > moved["end"] + WINDOW]["node"]) == {"gw-2"}
    # Every event the windows took is counted once; how evenly per window depends on how
    # much of the host's 2 cores the emulated gateways get (benchmarks/emu_migration.py).
    assert windows["count"].sum() == windows["last_sn"].iloc[-1]
    messages = json.loads((emu / "manifest.json").read_text())["facts"]["messages"]
    assert messages["duplicated"] == 0 and messages["lost"] == 0, messages
