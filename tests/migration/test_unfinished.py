"""A migration that did not finish is a state of its own, never a figure that vanishes: the
migrations table's `status` (done, unfinished, failed, refused) on every backend, a warning in
the run's summary and manifest (the run stays `ok`: its other figures are whole), and a
sweep's points saying how many migrations their downtime covers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pytest
from foundation.helpers import run
from foundation.test_summary import UNFINISHED
from typer.testing import CliRunner

from experiments import points
from experiments.loader import load
from experiments.runner import run_experiment
from experiments.schema import SchemaError, conform
from experiments.summary import summarise
from workloads.migration.record import COLUMNS, MigrationRecord

# UNFINISHED (the summary tests'): a parallel migration whose target takes 30 s to start,
# still under way at the run's end (10 s, and 1 s of drain), whatever the seed.
FINISHED = UNFINISHED.replace("launch: 30s", "launch: 100ms").replace("parallel", "pause_transfer")


def test_the_model_writes_each_migrations_status() -> None:
    unfinished = run(UNFINISHED).tables["migrations"]
    assert list(unfinished["status"]) == ["unfinished"] and math.isnan(unfinished["end"][0])
    finished = run(FINISHED).tables["migrations"]
    assert list(finished["status"]) == ["done"] and finished["end"][0] > 5.0
    for tables in (unfinished, finished):
        conform({"migrations": tables})


def test_the_emulation_writes_the_status_its_records_have() -> None:
    from emu.features.migrations import migration_columns

    records = [MigrationRecord(0, "count", "parallel", "gw-1", "gw-2", 105.0, 120.0),
               MigrationRecord(1, "count", "parallel", "gw-2", "gw-1", 130.0, 131.0,
                               status="failed", error="no answer"),
               MigrationRecord(2, "trail@p", "pause_transfer", "gw-1", "gw-2", 150.0,
                               status="unfinished")]
    columns = migration_columns(records, 100.0)
    assert set(columns) == set(COLUMNS) and "status" in COLUMNS
    assert columns["status"] == ["done", "failed", "unfinished"]
    table = conform({"migrations": columns})["migrations"]
    assert table.column("status").to_pylist() == ["done", "failed", "unfinished"]
    from workloads.migration.record import STATUSES

    assert set(STATUSES) == {"done", "unfinished", "failed", "refused"}


def _row(**changes) -> dict:
    row = {name: [0] for name in COLUMNS}
    row.update(operator=["count"], strategy=["parallel"], source=["gw-1"], target=["gw-2"],
               start=[5.0], end=[7.0], downtime=[0.0], output_gap=[math.nan],
               synchronised=["strong"], spark_way=[""], status=["done"])
    row.update({name: [value] for name, value in changes.items()})
    return row


@pytest.mark.parametrize(("changes", "rule"), [
    ({"end": math.nan}, "end is null exactly where the status is unfinished"),
    ({"status": "unfinished"}, "end is null exactly where the status is unfinished"),
    ({"status": "finished"}, "status is done, unfinished, failed or refused"),
    ({"status": None}, "status is never null"),
    ({"end": 4.0}, "end is not before start"),
])
def test_a_migrations_table_that_breaks_a_rule_is_refused(changes, rule) -> None:
    conform({"migrations": _row()})
    with pytest.raises(SchemaError, match=f"table migrations: {rule}; 1 of 1 rows"):
        conform({"migrations": _row(**changes)})


def test_a_migrations_table_without_status_is_refused() -> None:
    row = _row()
    del row["status"]
    with pytest.raises(ValueError, match=r"migrations table lacks columns \['status'\]"):
        conform({"migrations": row})


def test_the_summary_says_which_migration_did_not_finish() -> None:
    summary = summarise(conform(run(UNFINISHED).tables), 10.0, 1.0)
    (row,) = summary["migrations"]
    assert row["status"] == "unfinished" and row["end"] is None and row["downtime"] is None
    (warning,) = summary["warnings"]
    assert warning.startswith("1 of 1 migrations did not finish: count gw-1 -> gw-2 "
                              "(parallel) from 5.00 s was still under way when the run ended")
    assert summarise(conform(run(FINISHED).tables), 10.0, 1.0)["warnings"] == []


def test_a_summary_written_before_status_reads_an_end_as_done() -> None:
    from experiments.summary import migration_warnings

    rows = [{"operator": "count", "strategy": "parallel", "source": "gw-1", "target": "gw-2",
             "start": 5.0, "end": None}, {"operator": "count", "start": 1.0, "end": 2.0}]
    (warning,) = migration_warnings(rows)
    assert warning.startswith("1 of 2 migrations did not finish")


@pytest.fixture
def unfinished_file(tmp_path: Path) -> Path:
    path = tmp_path / "unfinished.yaml"
    path.write_text(UNFINISHED)
    return path


def test_the_run_stays_ok_with_the_warning_in_its_manifest_and_summary(
        unfinished_file: Path, tmp_path: Path) -> None:
    (outcome,) = run_experiment(load(unfinished_file), tmp_path / "results")
    manifest = json.loads((outcome.folder / "manifest.json").read_text())
    summary = json.loads((outcome.folder / "summary.json").read_text())
    assert outcome.status == manifest["status"] == "ok"
    assert manifest["warnings"] == summary["warnings"]
    assert len(manifest["warnings"]) == 1 and "did not finish" in manifest["warnings"][0]


def test_foglab_run_and_results_show_print_the_warning(unfinished_file: Path,
                                                       tmp_path: Path) -> None:
    from experiments.cli import app

    cli = CliRunner()
    result = cli.invoke(app, ["run", str(unfinished_file), "--out", str(tmp_path)],
                        env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "warning: 1 of 1 migrations did not finish: count gw-1 -> gw-2" in text
    (folder,) = (tmp_path / "unfinished").iterdir()
    shown = cli.invoke(app, ["results", "show", str(folder)], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert "warning: 1 of 1 migrations did not finish" in " ".join(shown.output.split())


def _run_folder(folder: Path, repetition: int, statuses: list[str]) -> Path:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({
        "point_index": 0, "point": {"scenario.migration.sync": 0}, "status": "ok",
        "repetition": repetition, "config": {"scenario": {"migration": {"sync": 0}}}}))
    migrations = [{"downtime": 0.0 if status == "done" else None, "status": status,
                   "end": 30.0 if status == "done" else None,
                   "execution": 20.0 + repetition if status == "done" else None}
                  for status in statuses]
    (folder / "summary.json").write_text(json.dumps({
        "delivered": 6000, "lost": 0, "throughput_per_s": 100.0,
        "latency_s": {"p50": 0.002, "p95": 0.012}, "migrations": migrations}))
    return folder


def test_a_point_says_how_many_migrations_its_downtime_covers(tmp_path: Path) -> None:
    # The case: repetition 3 of 5 at S = 0 did not synchronise before the end.
    folders = [_run_folder(tmp_path / f"r{r}", r, ["unfinished" if r == 3 else "done"])
               for r in range(5)]
    (row,) = points.rows(folders)
    assert row["runs"] == 5 and row["migrations"] == 5 and row["migrations_done"] == 4
    assert row["downtime_runs"] == 4 and row["delivered_runs"] == 5
    assert points.shown(row, "downtime") == "0.0 ± 0.0 (4 of 5 migrations finished)"
    assert points.shown(row, "delivered") == "6,000 ± 0"
    # The thesis tables' execution time, over the same finished migrations (repetition 3's
    # is not one): the mean of 20, 21, 22 and 24 s.
    assert row["execution"] == pytest.approx(21.75) and row["execution_runs"] == 4
    assert points.shown(row, "execution").startswith("21,750.0 ± ")
    assert points.shown(row, "execution").endswith(" (4 of 5 migrations finished)")
    table = points.frame([points.load_run(f) for f in folders])
    assert points.swept_keys(table.columns) == ["scenario.migration.sync"]


def test_a_measure_some_runs_lack_says_how_many_it_covers(tmp_path: Path) -> None:
    folders = [_run_folder(tmp_path / f"r{r}", r, ["done"]) for r in range(3)]
    summary = json.loads((folders[0] / "summary.json").read_text())
    summary["latency_s"]["p50"] = None  # nothing delivered in that run
    (folders[0] / "summary.json").write_text(json.dumps(summary))
    (row,) = points.rows(folders)
    assert row["latency_p50_runs"] == 2
    assert points.shown(row, "latency_p50").endswith(" (2 of 3 runs)")
    assert points.shown(row, "downtime") == "0.0 ± 0.0"


def test_the_summary_keeps_a_refused_and_a_failed_migration_apart() -> None:
    from experiments.summary import migration_warnings

    rows = [{"operator": "a", "strategy": "pause_drain", "source": "gw-1", "target": "cloud",
             "start": 19.5, "end": 21.0, "status": "refused"},
            {"operator": "b", "strategy": "parallel", "source": "gw-1", "target": "gw-2",
             "start": 5.0, "end": 9.0, "status": "failed"},
            {"operator": "c", "strategy": "parallel", "source": "gw-1", "target": "gw-2",
             "start": 2.0, "end": 4.0, "status": "done"}]
    (warning,) = migration_warnings(rows)
    assert warning.startswith("2 of 3 migrations did not finish: ")
    assert "a gw-1 -> cloud (pause_drain) decided at 19.50 s was refused" in warning
    assert "b gw-1 -> gw-2 (parallel) from 5.00 s failed" in warning


def test_arrow_reads_the_status_as_a_name() -> None:
    table = conform({"migrations": _row()})["migrations"]
    assert pa.types.is_dictionary(table.schema.field("status").type)


def test_the_migrations_figures_say_how_many_finished() -> None:
    # Downtime and execution are over the moves that finished: the figures count them.
    from workloads.figures import migrations

    rows = {"operator": ["a", "a", "b"], "start": [1.0, 5.0, 2.0], "end": [2.0, None, None],
            "downtime": [0.5, None, None], "state_bytes": [10, 0, 0], "lost": [0, 0, 0],
            "duplicates": [0, 0, 0], "status": ["done", "unfinished", "refused"]}
    import pyarrow as pa

    figures = migrations({"migrations": pa.table(rows)}, {})
    assert figures["migrations"] == 3 and figures["finished"] == 1
    assert figures["unfinished"] == 1 and figures["refused"] == 1
    assert figures["downtime max s"] == 0.5


def test_a_move_to_or_from_a_crashed_node_fails_and_the_run_checks() -> None:
    # hybrid-mobility on sim with gw-2 crashed 10-20 s: the follow policy moved instances to
    # and from the dead gateway ("done"), whose CPU then worked while down, and the nodes
    # table's check refused the run. A move that begins with its source or target down fails
    # (as emu's attempt does: a crashed agent answers nothing) and the operator stays.
    from experiments.schema import conform
    from tests.foundation.helpers import simulate_point

    run_point = load("hybrid-mobility", ["run.backend=sim", "run.duration=40s",
                                         "scenario.faults=[{at: 10s, crash: gw-2, for: 10s}]"]
                     ).points[0]
    result = simulate_point(run_point)
    tables = conform(result.tables)  # a down node's CPU is 0
    moves = tables["migrations"].to_pandas()
    during = moves[(moves["start"] >= 10) & (moves["start"] < 20)]
    touching = during[(during["source"] == "gw-2") | (during["target"] == "gw-2")]
    assert len(touching) > 0 and set(touching["status"]) == {"failed"}
    assert set(moves.drop(touching.index)["status"]) == {"done"}
