"""The micro-benchmark on a few tasks for a short time: sane rows, and the files it writes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from workloads.riot.bench import bench_tasks, write_report

NAMES = ["range_filter", "kalman_filter", "decision_tree_classify"]


@pytest.fixture(scope="module")
def calls() -> list[tuple[str, int, int]]:
    return []


@pytest.fixture(scope="module")
def table(calls: list[tuple[str, int, int]]) -> pd.DataFrame:
    return bench_tasks(NAMES, duration=0.2, warmup=0.05, rows=1000,
                       progress=lambda *call: calls.append(call))


def test_one_row_per_task_in_the_order_asked(table: pd.DataFrame) -> None:
    assert table["task"].tolist() == NAMES
    assert (table["dataset"] == "city").all()
    assert (table["input"] == "Reading").all()


def test_rows_are_sane(table: pd.DataFrame) -> None:
    assert (table["throughput"] > 0).all()
    assert (table["messages"] > 0).all()
    assert (table["latency_p50"] > 0).all()
    assert (table["latency_p50"] <= table["latency_p95"]).all()
    assert (table["latency_p95"] <= table["latency_p99"]).all()
    assert (table["memory_peak"] > 0).all()
    # CPU per message is 1 / throughput when the process has its core to itself; a busy shared
    # host lends it less (a quarter was seen), never more.
    ratio = table["cpu_per_message"] * table["throughput"]
    assert ratio.between(0.1, 1.05).all(), ratio


def test_range_filter_drops_the_outliers(table: pd.DataFrame) -> None:
    row = table.set_index("task").loc["range_filter"]
    assert row["selectivity_declared"] == 0.99
    assert 0.95 < row["selectivity_measured"] < 1.0  # the generated stream has 1 % outliers


def test_stateful_task_reports_its_snapshot_size(table: pd.DataFrame) -> None:
    sizes = table.set_index("task")["state_size"]
    assert sizes["kalman_filter"] > sizes["range_filter"] == len(b"{}")


def test_progress_is_called_after_each_task(table: pd.DataFrame,
                                            calls: list[tuple[str, int, int]]) -> None:
    assert calls == [(name, done, 3) for done, name in enumerate(NAMES, start=1)]


def test_tasks_that_need_other_wire_forms_get_them() -> None:
    table = bench_tasks(["senml_parse", "csv_to_senml", "join"], duration=0.05, warmup=0.0,
                        rows=200, dataset="taxi")
    assert table["input"].tolist() == ["str", "str", "Reading"]
    join = table.set_index("task").loc["join"]
    assert join["selectivity_measured"] == pytest.approx(join["selectivity_declared"], rel=0.05)


def test_unknown_names_are_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="unknown task 'average'; known tasks: annotate"):
        bench_tasks(["range_filter", "average"])
    with pytest.raises(ValueError, match="unknown dataset 'town'"):
        bench_tasks(["range_filter"], dataset="town")


def test_report_writes_the_table_and_a_png(table: pd.DataFrame, tmp_path: Path) -> None:
    paths = write_report(table, tmp_path / "bench")
    assert pd.read_parquet(paths["parquet"])["task"].tolist() == NAMES
    assert pd.read_csv(paths["csv"])["task"].tolist() == NAMES
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
