"""What a run will cost, said before it runs; above the host's bounds `foglab run` refuses
naming the figure and what to change, unless --yes (issue 43: the 30-day run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments import estimate as estimating
from experiments.cli import app
from experiments.loader import load
from experiments.runner import run_experiment

PERIODIC = ["run.duration=5s", "workload.streams.0.arrivals=periodic", "plots=[]"]


def test_the_readings_are_rate_times_duration_times_sources_as_the_sim_emits_them(
        tmp_path: Path) -> None:
    experiment = load("quickstart", PERIODIC,
                      ["workload.streams.0.rate=[1/s, 4/s]", "run.repetitions=[1, 3]"])
    assert [estimating.readings(p.spec, p.topology) for p in experiment.points] == \
        [1000, 1000, 4000, 4000]  # 200 sensors x 5 s x rate
    cost = estimating.estimate(experiment.points)
    assert (cost.runs, cost.messages) == (8, 1000 + 3000 + 4000 + 12000)
    assert cost.wall_s == pytest.approx(20000 * estimating.SIM_S_PER_MESSAGE)
    assert cost.memory_bytes == estimating.BASE_BYTES + 4000 * estimating.PEAK_BYTES_PER_MESSAGE
    (ran,) = run_experiment(load("quickstart", PERIODIC), tmp_path)
    assert ran.summary["emitted"] == 1000  # what the estimate counted, exactly


def test_record_messages_scales_the_disk_and_jobs_the_memory() -> None:
    every = estimating.estimate(load("quickstart", ["run.duration=1h"]).points)
    tenth = estimating.estimate(load("quickstart", ["run.duration=1h", "record.messages=10%",
                                                    "plots=[]"]).points)
    tables = 720_000 * estimating.PARQUET_BYTES_PER_ROW
    assert every.disk_bytes - tenth.disk_bytes == pytest.approx(0.9 * tables)
    two = estimating.estimate(load("quickstart", ["run.duration=1h"],
                                   ["run.seed=[1, 2]"]).points, jobs=2)
    assert two.memory_bytes == 2 * every.memory_bytes and two.wall_s == every.wall_s


def test_a_run_above_the_memory_available_is_refused_unless_yes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(estimating, "available_memory", lambda: 100e6)  # 100 MB
    arguments = ["run", "quickstart", "--set", "run.duration=3s", "--out", str(tmp_path)]
    refused = CliRunner().invoke(app, arguments, env={"COLUMNS": "300"})
    assert refused.exit_code == 3, refused.output  # bad input (topologies.exit_codes)
    text = " ".join(refused.output.split())
    assert "estimate: 1 run(s), 600 readings" in text
    assert "memory: 170.3 MB at the peak, above 80% of the 100.0 MB available" in text
    assert "run.duration" in text and "--yes runs it anyway" in text
    assert not (tmp_path / "quickstart").exists()
    ran = CliRunner().invoke(app, [*arguments, "--yes"], env={"COLUMNS": "300"})
    assert ran.exit_code == 0, ran.output
    assert len(list((tmp_path / "quickstart").glob("*/summary.json"))) == 1


def test_time_and_disk_above_their_bounds_name_what_to_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cost = estimating.estimate(load("quickstart", ["run.duration=30d"]).points)
    assert cost.messages == 200 * 30 * 86400
    monkeypatch.setattr(estimating, "available_memory", lambda: None)
    monkeypatch.setattr(estimating, "free_disk", lambda folder: 1e9)
    over = estimating.too_much(cost, tmp_path, longest_s=3600)
    assert [line.split(":")[0] for line in over] == ["disk", "time"]
    assert "record.messages a fraction" in over[0] and "1.0 GB free" in over[0]
    assert "time: about 21h 36m, above 1h 00m: shorten run.duration" in over[1]


def test_validate_prints_the_estimate() -> None:
    result = CliRunner().invoke(app, ["validate", "quickstart", "--set", "run.duration=1m"],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "estimate: 1 run(s), 12,000 readings, about" in result.output
