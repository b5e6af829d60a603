"""Analysis that fits a sweep: run folders named by the swept values, a points table with each
measure's mean and 95 % interval over repetitions, plots across a sweep, faults and migrations
marked on latency over time, the time left in the progress line, and what a Ctrl-C'd sweep
had finished."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from rich.progress import Progress
from typer.testing import CliRunner

from experiments import points
from experiments.loader import RunPoint, load
from experiments.plots import Event, events, latency_figure, sweep_plots
from experiments.runner import Estimate, run_experiment, run_name
from topologies.units import shown_duration

# -- the statistics ----------------------------------------------------------------------------


def test_a_95_percent_interval_is_students_t_over_the_repetitions() -> None:
    mean, low, high = points.interval([1.0, 2.0, 3.0])
    # t(0.975, 2) = 4.303, s = 1, n = 3
    assert mean == 2.0
    assert (high - low) / 2 == pytest.approx(4.303 / math.sqrt(3), rel=1e-6)
    assert points.t975(1) == 12.706 and points.t975(30) == 2.042
    assert points.t975(100) == pytest.approx(1.984, abs=1e-3)
    assert points.t975(31) < points.t975(30)


def test_one_repetition_has_a_mean_and_no_bounds() -> None:
    mean, low, high = points.interval([5.0, None, math.nan])
    assert mean == 5.0 and math.isnan(low) and math.isnan(high)
    assert all(math.isnan(v) for v in points.interval([]))
    assert points.shown({"delivered": 5.0, "delivered_low": math.nan, "delivered_high": math.nan,
                         "runs": 1}, "delivered") == "5 (1 run)"
    assert points.shown({"latency_p50": 0.0321, "latency_p50_low": 0.0301,
                         "latency_p50_high": 0.0341, "runs": 3}, "latency_p50") == "32.1 ± 2.0"


def test_swept_values_are_typed_as_the_schema_reads_them() -> None:
    config = {"workload": {"streams": [{"rate": 1000.0, "size": 50000}]},
              "pipeline": [{"name": "filter", "cost": 0.0002, "window": {"size": 3.0}}]}
    assert points.typed_value(config, "workload.streams.0.rate", "1000/s") == 1000.0
    assert points.typed_value(config, "pipeline[0].cost", "200us") == 0.0002
    assert points.typed_value(config, "pipeline.filter.window.size", "3s") == 3.0
    assert points.typed_value(config, "pipeline.nothing.cost", "1s") == "1s"
    assert points.typed_value(config, "pipeline.0.window", {"size": "3s"}) == '{"size": 3.0}'


# -- the points of a sweep, from run folders ---------------------------------------------------

def _run(folder: Path, index: int, rate: str, typed: float, status: str,
         delivered: int, p50: float, downtime: float | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({
        "point_index": index, "point": {"workload.streams.0.rate": rate}, "status": status,
        "config": {"workload": {"streams": [{"rate": typed}]}}}))
    migrations = [{"downtime": downtime}] if downtime is not None else []
    (folder / "summary.json").write_text(json.dumps({
        "delivered": delivered, "lost": 1, "throughput_per_s": delivered / 10,
        "latency_s": {"p50": p50, "p95": 2 * p50}, "migrations": migrations}))
    return folder


def test_the_points_table_has_a_row_per_point_with_typed_values_and_intervals(
        tmp_path: Path) -> None:
    folders = [_run(tmp_path / "a", 0, "1/s", 1.0, "ok", 10, 0.1),
               _run(tmp_path / "b", 0, "1/s", 1.0, "ok", 12, 0.2),
               _run(tmp_path / "c", 0, "1/s", 1.0, "ok", 14, 0.3),
               _run(tmp_path / "d", 1, "2/s", 2.0, "ok", 20, 0.5),
               _run(tmp_path / "e", 1, "2/s", 2.0, "failed", 0, 9.0)]
    path = points.write(folders, tmp_path / "sweep")
    table = pd.read_parquet(path)
    assert path == tmp_path / "sweep" / "points.parquet"
    assert list(table["workload.streams.0.rate"]) == [1.0, 2.0]
    assert table["workload.streams.0.rate"].dtype == float
    assert list(table["runs"]) == [3, 1] and list(table["broken"]) == [0, 1]
    first, second = table.to_dict("records")
    assert first["delivered"] == 12 and first["latency_p50"] == pytest.approx(0.2)
    assert first["delivered_high"] - 12 == pytest.approx(4.303 * 2 / math.sqrt(3), rel=1e-6)
    # the failed run is not averaged in; one usable repetition has no bounds
    assert second["delivered"] == 20 and math.isnan(second["delivered_low"])
    assert "downtime" not in table.columns  # no run migrated
    assert points.swept_keys(table.columns) == ["workload.streams.0.rate"]
    rows = points.rows(folders)
    assert [points.shown(r, "delivered") for r in rows] == ["12 ± 5", "20 (1 run)"]


def test_downtime_is_a_measure_where_runs_migrated(tmp_path: Path) -> None:
    folders = [_run(tmp_path / "a", 0, "1/s", 1.0, "ok", 10, 0.1, downtime=0.4),
               _run(tmp_path / "b", 0, "1/s", 1.0, "ok", 10, 0.1, downtime=0.6)]
    (row,) = points.rows(folders)
    assert row["downtime"] == pytest.approx(0.5)


def test_a_plot_per_swept_key_and_measure_with_the_interval(tmp_path: Path) -> None:
    folders = [_run(tmp_path / f"r{i}", i // 2, f"{1 + i // 2}/s", 1.0 + i // 2, "ok",
                    10 + i, 0.1 * (i + 1)) for i in range(4)]
    written = sweep_plots(points.write(folders, tmp_path / "sweep"), tmp_path / "sweep")
    names = sorted(p.name for p in written)
    assert names == sorted(f"workload.streams.0.rate-{m}.png" for m in
                           ("delivered", "lost", "throughput", "latency_p50", "latency_p95"))
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in written)


# -- the runner ----------------------------------------------------------------------------------

def test_run_folders_are_named_by_the_swept_values_safely_and_uniquely() -> None:
    def named(values: dict, index: int = 3) -> str:
        return run_name("S", RunPoint(index, values, None, None, ""), 1)

    assert named({}) == "S-p3-r1"
    assert named({"workload.streams.0.rate": "2/s"}) == "S-p3-rate=2_s-r1"
    # two keys ending alike keep their whole path
    assert named({"a.size": "1KB", "b.size": "5 s"}) == "S-p3-a_size=1KB-b_size=5_s-r1"
    assert "/" not in named({"x": "../../etc"}) and named({"x": "a"}, 1) != named({"x": "a"}, 2)


def test_a_sweep_writes_its_points_beside_its_runs(tmp_path: Path) -> None:
    experiment = load("quickstart", overrides=["run.duration=3s", "run.repetitions=2",
                                               "plots=[sweep]"],
                      sweeps=["workload.streams.0.rate=[1/s, 2/s]"])
    outcomes = run_experiment(experiment, tmp_path, sweep_id="s")
    assert [o.folder.name for o in outcomes] == [
        "s-p0-rate=1_s-r0", "s-p0-rate=1_s-r1", "s-p1-rate=2_s-r0", "s-p1-rate=2_s-r1"]
    table = pd.read_parquet(tmp_path / "quickstart" / "s-sweep" / "points.parquet")
    assert list(table["workload.streams.0.rate"]) == [1.0, 2.0]
    assert list(table["runs"]) == [2, 2]
    assert (table["delivered_low"] <= table["delivered"]).all()
    # twice the rate, about twice the messages
    assert table["delivered"][1] / table["delivered"][0] == pytest.approx(2, rel=0.2)
    drawn = {p.name for p in (tmp_path / "quickstart" / "s-sweep").glob("*.png")}
    measures = [m for m in points.MEASURES if m in table.columns]
    assert "in_flight" in measures  # the summary counts what was in flight at the end
    assert drawn == {f"workload.streams.0.rate-{m}.png" for m in measures}


def test_a_single_run_writes_no_points_table(tmp_path: Path) -> None:
    run_experiment(load("quickstart", overrides=["run.duration=2s"]), tmp_path, sweep_id="one")
    assert not (tmp_path / "quickstart" / "one-sweep").exists()


# -- latency over time -------------------------------------------------------------------------

def test_faults_and_migrations_are_marked_on_latency_over_time() -> None:
    faults = pd.DataFrame({"kind": ["crash"], "target": ["gw-1"], "t_start": [4.0],
                           "t_end": [6.0], "params": ["{}"]})
    migrations = pd.DataFrame({"operator": ["filter"], "source": ["gw-1"], "target": ["gw-2"],
                               "start": [2.5]})
    marks = events(faults, migrations)
    assert marks == [Event(2.5, "migration", "filter gw-1>gw-2"),
                     Event(4.0, "fault", "crash gw-1")]
    messages = pd.DataFrame({"stream": ["s"] * 10, "latency": [0.01] * 10,
                             "t_received": [float(i) for i in range(10)], "lost": [False] * 10})
    figure, _ = latency_figure(messages, "t", marks)
    over_time = figure.axes[1]
    vertical = [line for line in over_time.lines if len(set(line.get_xdata())) == 1]
    assert sorted(line.get_xdata()[0] for line in vertical) == [2.5, 4.0]
    assert {"fault", "migration"} <= {t.get_text() for t in over_time.get_legend().get_texts()}


# -- progress and interrupts -------------------------------------------------------------------

def test_the_time_left_is_the_wall_time_per_second_so_far_times_what_is_left() -> None:
    now = [100.0]
    estimate = Estimate(100.0, clock=lambda: now[0])
    assert estimate.left() is None  # nothing done yet
    now[0] = 110.0
    assert estimate.left(20.0) == pytest.approx(40.0)
    estimate.run_ended(50.0)
    assert estimate.left(0.0) == pytest.approx(10.0)
    assert [shown_duration(s) for s in (40, 185, 7800, 216000)] == [
        "40s", "3m 05s", "2h 10m", "2.5 days"]


def test_the_runs_progress_says_the_time_left() -> None:
    from experiments.running import RichReporter

    shown = Progress(disable=True)
    reporter = RichReporter(shown)
    reporter.start(2, 20.0)
    reporter.run_started("p0 r0", Path("x"), 10.0)
    reporter.progress(5.0)
    assert shown.tasks[0].description.startswith("runs (ETA ")


def test_a_ctrl_c_in_a_sweep_says_which_runs_had_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from experiments import backends, cli

    real, calls = backends.backend, []

    class Interrupted:
        def run(self, plan, progress):
            calls.append(plan.seed)
            if len(calls) == 3:
                raise KeyboardInterrupt
            return real("sim").run(plan, progress)

    monkeypatch.setattr("experiments.runner.backend", lambda name: Interrupted())
    result = CliRunner().invoke(cli.app, [
        "run", "quickstart", "--set", "run.duration=2s", "--sweep", "run.seed=[1,2,3,4]",
        "--out", str(tmp_path)], env={"COLUMNS": "250"})
    output = " ".join(result.output.split())
    assert result.exit_code == 130, result.output
    assert "2 of 4 runs had finished:" in output
    for seed, index in ((1, 0), (2, 1)):
        assert f"{tmp_path}/quickstart/" in output and f"-p{index}-seed={seed}-r0" in output
    assert "-p2-seed=3-r0 is marked interrupted" in output


def test_foglab_run_prints_a_row_per_point_with_its_interval(tmp_path: Path) -> None:
    from experiments.cli import app

    result = CliRunner().invoke(app, [
        "run", "quickstart", "--set", "run.duration=3s", "--set", "run.repetitions=2",
        "--sweep", "workload.streams.0.rate=[1/s, 2/s]", "--out", str(tmp_path)],
        env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("points (mean ± 95 %"))
    rule = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("─"))
    rows = [line.split() for line in lines[rule + 1:rule + 3]]
    assert [row[:2] for row in rows] == [["1/s", "2"], ["2/s", "2"]]  # rate as written, runs
    assert all("±" in row for row in rows)


def test_a_sweep_option_replaces_the_files_sweep_of_the_same_key_by_any_name() -> None:
    # iotcloud-scaling sweeps topology.nodes.driver.replicas; --sweep of the same key (by its
    # name here, by its index in the option's path) added a second axis: 20 points whose
    # labels said 1,000 drivers while the run had 250.

    experiment = load("iotcloud-scaling", sweeps=["topology.nodes.driver.replicas=[4, 250]"])
    assert len(experiment.points) == 4
    for found in experiment.points:
        (replicas,) = [v for k, v in found.values.items() if k.endswith("replicas")]
        drivers = [n for n in found.topology.nodes.values() if n.name.startswith("driver")]
        assert len(drivers) == replicas
