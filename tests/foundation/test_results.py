"""The runner and the results store: run folders, manifests, Parquet tables, summaries."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from experiments import runner
from experiments.loader import load
from experiments.results import load_run, load_summaries, load_table, runs
from experiments.runner import repetition_seed, run_experiment
from experiments.schema import TABLES, to_table
from experiments.summary import summarise

SHORT = ["run.duration=30s"]
TABLE_NAMES = ("messages", "nodes", "links")  # every run has these; others may join them


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory: pytest.TempPathFactory):
    experiment = load("quickstart", overrides=SHORT)
    root = tmp_path_factory.mktemp("results")
    (outcome,) = run_experiment(experiment, root, sweep_id="first")
    return experiment, root, outcome


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


def test_a_run_writes_its_folder(quickstart_run) -> None:
    _, root, outcome = quickstart_run
    assert outcome.error is None
    assert outcome.folder == root / "quickstart" / "first-p0-r0"
    names = {path.name for path in outcome.folder.iterdir()}
    assert {"manifest.json", "summary.json", "latency.png",
            *(f"{name}.parquet" for name in TABLE_NAMES)} <= names
    assert {path.stem for path in outcome.folder.glob("*.parquet")} <= set(TABLES)
    assert (outcome.folder / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_manifest_says_what_ran(quickstart_run) -> None:
    experiment, _, outcome = quickstart_run
    manifest = _manifest(outcome.folder)
    point = experiment.points[0]
    assert manifest["status"] == "ok" and manifest["error"] is None
    assert manifest["config_hash"] == point.config_hash
    assert (manifest["seed"], manifest["backend"], manifest["repetition"]) == (7, "sim", 0)
    assert manifest["experiment"] == "quickstart" and manifest["run"] == "first-p0-r0"
    assert manifest["config"] == point.spec.model_dump(mode="json")
    assert manifest["references"] == {"topology": "smart-city", "workload": "city-sensors"}
    assert {"python", "simpy", "numpy", "pandas", "pyarrow", "pydantic"} <= set(
        manifest["packages"])
    assert manifest["host"]["cpus"] >= 1
    start = datetime.fromisoformat(manifest["start"])
    end = datetime.fromisoformat(manifest["end"])
    assert start <= end
    assert manifest["facts"]["emitted"] > 5000


def test_tables_have_the_schema_of_the_result_tables(quickstart_run) -> None:
    _, _, outcome = quickstart_run
    for path in outcome.folder.glob("*.parquet"):
        table = pq.read_table(path)
        assert table.schema.remove_metadata().equals(TABLES[path.stem]), path.name
        if path.stem in TABLE_NAMES:
            assert table.num_rows > 0, path.name


def test_the_summary_agrees_with_the_messages_table(quickstart_run) -> None:
    _, _, outcome = quickstart_run
    summary = json.loads((outcome.folder / "summary.json").read_text(encoding="utf-8"))
    assert summary == outcome.summary
    messages = pq.read_table(outcome.folder / "messages.parquet").to_pandas()
    # Every message in one state (one row each: quickstart's readings have one sink).
    assert (summary["delivered"] + summary["filtered"] + summary["lost"]
            + summary["in_flight"]) == summary["emitted"] == len(messages)
    assert summary["filtered"] == int((messages["state"] == "filtered").sum()) > 0
    assert summary["lost"] == int(messages["lost"].sum()) > 0
    assert summary["loss_rate"] == pytest.approx(summary["lost"] / len(messages))
    assert summary["throughput_per_s"] == pytest.approx(summary["delivered"] / 30.0)
    latency = summary["latency_s"]
    assert latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["max"]
    delivered = messages.loc[messages["state"] == "delivered", "latency"]
    assert latency["p50"] == pytest.approx(delivered.median())
    assert latency["max"] == pytest.approx(delivered.max())
    assert latency["mean"] == pytest.approx(delivered.mean())
    assert summary["jitter"]["mean_abs"] <= summary["jitter"]["max_abs"]
    assert set(summary["nodes"]) == {"gw-1", "gw-2", "gw-3", "gw-4", "broker-1", "cloud-1"}


def test_the_same_config_gives_byte_identical_tables(quickstart_run, tmp_path: Path) -> None:
    experiment, _, first = quickstart_run
    (second,) = run_experiment(experiment, tmp_path, sweep_id="second")
    tables = sorted(path.name for path in first.folder.glob("*.parquet"))
    assert tables == sorted(path.name for path in second.folder.glob("*.parquet"))
    for name in tables:
        assert (first.folder / name).read_bytes() == (second.folder / name).read_bytes(), name
    assert _manifest(first.folder)["config_hash"] == _manifest(second.folder)["config_hash"]


class _Broken:
    """A backend whose run raises: stands in for any failure, the runner is under test."""

    name = "sim"

    def run(self, plan, progress):
        raise NotImplementedError("this backend broke")


def test_a_backend_that_fails_records_a_failed_run(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("experiments.runner.backend", lambda name: _Broken())
    experiment = load("quickstart", overrides=SHORT)
    (outcome,) = run_experiment(experiment, tmp_path, sweep_id="broken")
    assert outcome.summary is None and outcome.status == "failed"
    assert "this backend broke" in outcome.error
    manifest = _manifest(outcome.folder)
    assert (manifest["status"], manifest["backend"]) == ("failed", "sim")
    assert manifest["error"] == outcome.error
    assert "NotImplementedError" in manifest["traceback"]
    assert manifest["end"] is not None
    assert not list(outcome.folder.glob("*.parquet"))


class _Exploding:
    name = "sim"

    def run(self, plan, progress):
        progress(1.0)
        raise RuntimeError("the model caught fire")


def test_a_backend_that_raises_records_the_error_and_the_sweep_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = runner.backend
    calls = []

    def flaky(name: str):
        calls.append(name)
        return _Exploding() if len(calls) == 1 else real(name)

    monkeypatch.setattr(runner, "backend", flaky)
    experiment = load("quickstart", overrides=["run.duration=5s"],
                      sweeps=["run.seed=[1, 2]"])
    failed, ok = run_experiment(experiment, tmp_path, sweep_id="s")
    assert failed.error == "RuntimeError: the model caught fire"
    assert _manifest(failed.folder)["status"] == "failed"
    assert ok.error is None and _manifest(ok.folder)["status"] == "ok"


def test_two_runs_started_in_the_same_second_each_get_a_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)

    monkeypatch.setattr(runner, "datetime", Frozen)
    monkeypatch.setattr("experiments.runner.backend", lambda name: _Broken())
    experiment = load("quickstart", overrides=["run.duration=2s"])
    (first,) = run_experiment(experiment, tmp_path)
    (second,) = run_experiment(experiment, tmp_path)
    assert first.folder != second.folder


def test_a_run_shorter_than_one_sample_has_one_sample_at_its_end(tmp_path: Path) -> None:
    # The series cover the run whole: a run of 0.5 s at 1 s samples has one row per node and
    # per link direction, at 0.5 s (issue 38, 5: the sampler wrote whole intervals only).
    experiment = load("quickstart", overrides=["run.duration=0.5s"])
    (outcome,) = run_experiment(experiment, tmp_path, sweep_id="short")
    assert outcome.error is None
    for name, rows in (("nodes", 6), ("links", 10)):  # 4 gateways, broker-1, cloud-1
        table = pq.read_table(outcome.folder / f"{name}.parquet")
        assert table.num_rows == rows
        assert set(table.column("t").to_pylist()) == {0.5}
        assert table.schema.remove_metadata().equals(TABLES[name])


def test_repetitions_run_with_derived_seeds(tmp_path: Path) -> None:
    experiment = load("quickstart", overrides=["run.duration=5s", "run.repetitions=2"])
    outcomes = run_experiment(experiment, tmp_path, sweep_id="reps")
    assert [o.folder.name for o in outcomes] == ["reps-p0-r0", "reps-p0-r1"]
    seeds = [_manifest(o.folder)["seed"] for o in outcomes]
    assert seeds == [7, repetition_seed(7, 1)]
    tables = [pq.read_table(o.folder / "messages.parquet") for o in outcomes]
    assert not tables[0].equals(tables[1])


# -- loading results for analysis ------------------------------------------------------------

@pytest.fixture(scope="module")
def sweep_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    experiment = load("quickstart", overrides=["run.duration=5s"],
                      sweeps=["topology.links.1.latency=[10ms, 40ms]"])
    run_experiment(experiment, root, sweep_id="lat")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("experiments.runner.backend", lambda name: _Broken())
        run_experiment(load("quickstart", overrides=["run.duration=5s"]), root, sweep_id="other")
    return root


def test_runs_lists_run_folders_and_filters_by_sweep(sweep_root: Path) -> None:
    # A sweep's runs are named by their swept values (experiments.runner.run_name).
    swept = ["lat-p0-latency=10ms-r0", "lat-p1-latency=40ms-r0"]
    assert [r.id for r in runs(sweep_root)] == [*swept, "other-p0-r0"]
    assert [r.id for r in runs(sweep_root, sweep="lat")] == swept
    assert runs(sweep_root, experiment="nothing") == []


def test_load_table_puts_sweep_values_in_columns(sweep_root: Path) -> None:
    frame = load_table(runs(sweep_root, sweep="lat"), "messages")
    assert list(frame.columns[:3]) == ["run", "repetition", "seed"]
    key = "topology.links.1.latency"
    # Typed by default: the latency in seconds, a number that sorts as one.
    assert frame[key].dtype == "float64" and set(frame[key]) == {0.010, 0.040}
    delivered = frame[~frame["lost"]]
    medians = delivered.groupby(key)["latency"].median()
    # gw-broker latency goes from 10 to 40 ms: the median grows by about 30 ms
    assert medians[0.040] - medians[0.010] == pytest.approx(0.030, abs=0.002)
    written = load_table(runs(sweep_root, sweep="lat"), "messages", typed=False)
    assert set(written[key]) == {"10ms", "40ms"}
    assert len(written) == len(frame)


def test_load_summaries_gives_a_row_per_run(sweep_root: Path) -> None:
    frame = load_summaries(runs(sweep_root))
    assert list(frame["status"]) == ["ok", "ok", "failed"]
    assert list(frame["topology.links.1.latency"][:2]) == [0.010, 0.040]
    written = load_summaries(runs(sweep_root), typed=False)
    assert list(written["topology.links.1.latency"][:2]) == ["10ms", "40ms"]
    assert (frame["latency_p50"][:2] <= frame["latency_p99"][:2]).all()
    assert pd.isna(frame["delivered"][2])


def test_a_failed_run_loads_with_empty_tables(sweep_root: Path) -> None:
    (failed,) = runs(sweep_root, sweep="other")
    messages = failed.messages
    assert messages.empty
    assert list(messages.columns) == TABLES["messages"].names


def test_load_run_and_its_tables(sweep_root: Path) -> None:
    run = load_run(sweep_root / "quickstart" / "lat-p1-latency=40ms-r0")
    assert run.manifest["point"] == {"topology.links.1.latency": "40ms"}
    assert len(run.nodes) and len(run.links)
    with pytest.raises(KeyError, match="no table"):
        run.table("migrations!")
    with pytest.raises(FileNotFoundError):
        load_run(sweep_root)


# -- the summary on its own ------------------------------------------------------------------

def _messages(latency: list[float], lost: list[bool]) -> pa.Table:
    n = len(latency)
    t_sent = np.arange(n, dtype=float) * 0.1
    t_received = np.where(lost, np.nan, t_sent + np.array(latency))
    return to_table("messages", {
        "id": np.arange(n), "stream": ["s"] * n, "source": ["d"] * n,
        "sink": [None if x else "c" for x in lost], "t_sent": t_sent,
        "t_received": t_received, "latency": t_received - t_sent,
        "hops": np.full(n, 2), "lost": np.array(lost)})


def _empty(name: str) -> pa.Table:
    return TABLES[name].empty_table()


def test_summary_of_known_latencies() -> None:
    latency = [0.01 * (i + 1) for i in range(100)]
    summary = summarise({"messages": _messages(latency, [False] * 100), "nodes": _empty("nodes"),
                         "links": _empty("links")}, duration=10.0, sample=1.0)
    assert summary["delivered"] == 100 and summary["lost"] == 0
    assert summary["latency_s"]["max"] == pytest.approx(1.0)
    assert summary["latency_s"]["p50"] == pytest.approx(np.percentile(latency, 50))
    assert summary["throughput_per_s"] == pytest.approx(10.0)


def test_summary_when_everything_is_lost() -> None:
    summary = summarise({"messages": _messages([0.0] * 5, [True] * 5), "nodes": _empty("nodes"),
                         "links": _empty("links")}, duration=10.0, sample=1.0)
    assert (summary["delivered"], summary["lost"], summary["loss_rate"]) == (0, 5, 1.0)
    assert summary["latency_s"]["p50"] is None
    assert summary["jitter"]["mean_abs"] is None


def test_a_table_missing_a_column_is_refused() -> None:
    with pytest.raises(ValueError, match="lacks columns"):
        to_table("nodes", {"t": [1.0]})


def test_a_sweep_over_repetitions_runs_each_points_own_count(tmp_path) -> None:
    from experiments.loader import load
    from experiments.runner import run_experiment

    experiment = load("quickstart", ["run.duration=2s"], ["run.repetitions=[1, 2]"])
    outcomes = run_experiment(experiment, tmp_path)
    assert [(o.point["run.repetitions"], o.repetition) for o in outcomes] == [
        (1, 0), (2, 0), (2, 1)]


def test_a_run_with_failed_nodes_ends_degraded_with_every_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from experiments.backends import SimBackend

    class OneNodeFailed(SimBackend):
        """The model's run, reported with a node failed: the runner's bookkeeping is tested."""

        def run(self, plan, progress):
            output = super().run(plan, progress)
            output.failed = {"gw-2": "container exited (137)"}
            return output

    monkeypatch.setattr("experiments.runner.backend", lambda name: OneNodeFailed())
    (outcome,) = run_experiment(load("quickstart", overrides=SHORT), tmp_path, sweep_id="d")
    assert (outcome.status, outcome.error) == ("degraded", None)
    assert outcome.failed_summary() == "gw-2: container exited (137)"
    manifest = _manifest(outcome.folder)
    assert manifest["status"] == "degraded"
    assert manifest["failed_nodes"] == {"gw-2": "container exited (137)"}
    assert sorted(p.stem for p in outcome.folder.glob("*.parquet")) == sorted(TABLES)
    assert outcome.summary["delivered"] > 0


def test_every_run_writes_every_table_of_the_schema(tmp_path: Path) -> None:
    """The quickstart has no migrations or mobility: those tables are there, empty."""
    (outcome,) = run_experiment(load("quickstart", overrides=SHORT), tmp_path, sweep_id="all")
    run = load_run(outcome.folder)
    for name, schema in TABLES.items():
        table = pq.read_table(outcome.folder / f"{name}.parquet")
        assert table.schema.equals(schema), name
    assert pq.read_table(outcome.folder / "migrations.parquet").num_rows == 0
    assert run.messages["lost"].sum() >= 0 and len(run.messages) > 0
