"""A STATS query moved mid-stream, by its state or by its checkpoint, ends as an unmoved one."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from workloads.spark.apps import BUCKET, BUCKET_STATE_VAR, SENSOR, STATE_VAR, stats
from workloads.spark.state import (
    TRANSFORM_WITH_STATE_IN_PANDAS,
    copy_checkpoint,
    read_state,
    stateful_operators,
)

from .conftest import READINGS, Run, run_to_end, senml_stream, snapshots, write_senml

pytestmark = pytest.mark.slow

HALF = len(READINGS) // 2  # a half is one file, read in one batch


@pytest.fixture(scope="module")
def first_half(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """STATS stopped after the first half of the readings (its input in checkpoint/../input)."""
    root = tmp_path_factory.mktemp("first")
    stream = senml_stream(spark, write_senml(root / "input", READINGS[:HALF], files=1))
    output, _ = run_to_end(stats(stream), root / "checkpoint")
    return Run(output, root / "checkpoint")


def test_state_reader_finds_the_python_operator(spark: SparkSession, first_half: Run) -> None:
    operators = stateful_operators(spark, first_half.checkpoint)
    assert sorted(operators.values()) == ["stateStoreSave", TRANSFORM_WITH_STATE_IN_PANDAS]
    state = read_state(spark, first_half.checkpoint)
    assert state.columns == [SENSOR, STATE_VAR]
    assert state.count() == len({r.sensor for r in READINGS[:HALF]})


def test_state_keeps_several_sensors_per_bucket_and_reads_one_row_each(
        spark: SparkSession, first_half: Run) -> None:
    [operator] = [i for i, name in stateful_operators(spark, first_half.checkpoint).items()
                  if name == TRANSFORM_WITH_STATE_IN_PANDAS]
    buckets = (spark.read.format("statestore").option("operatorId", operator)
               .option("stateVarName", BUCKET_STATE_VAR).load(str(first_half.checkpoint))
               .select(f"key.{BUCKET}", f"value.{BUCKET_STATE_VAR}").toPandas())
    sensors = {r.sensor for r in READINGS[:HALF]}
    assert 1 < len(buckets) < len(sensors)  # 14 sensors in at most 8 buckets
    held = [set(json.loads(blob)) for blob in buckets[BUCKET_STATE_VAR]]
    assert set().union(*held) == sensors and sum(map(len, held)) == len(sensors)
    state = read_state(spark, first_half.checkpoint).toPandas()
    assert sorted(state[SENSOR]) == sorted(sensors)


def test_new_query_seeded_with_the_read_state_ends_as_an_unmoved_one(
        spark: SparkSession, first_half: Run, stats_run: Run, tmp_path: Path) -> None:
    state = read_state(spark, first_half.checkpoint)
    second = senml_stream(spark, write_senml(tmp_path / "input", READINGS[HALF:], files=1))
    run_to_end(stats(second, initial_state=state), tmp_path / "checkpoint")
    assert snapshots(spark, tmp_path / "checkpoint") == snapshots(spark, stats_run.checkpoint)


def test_query_restarted_on_a_copied_checkpoint_ends_as_an_unmoved_one(
        spark: SparkSession, first_half: Run, stats_run: Run, tmp_path: Path) -> None:
    copy = copy_checkpoint(first_half.checkpoint, tmp_path / "checkpoint")
    # The moved query reads the same source, which meanwhile got the second half; the copied
    # offsets tell it which files the first query had read.
    source = first_half.checkpoint.parent / "input"
    write_senml(source, READINGS[HALF:], files=1, first=1)
    output, _ = run_to_end(stats(senml_stream(spark, source)), copy)
    assert snapshots(spark, copy) == snapshots(spark, stats_run.checkpoint)

    # The built-in window aggregation moved too: together, both runs emitted every window
    # the unmoved run did, with the same values.
    windows = ["sensor", "field", "statistic", "time"]
    moved = pd.concat([first_half.output, output]).query("statistic == 'average'")
    whole = stats_run.output.query("statistic == 'average'")
    assert len(moved) == len(whole)
    pd.testing.assert_frame_equal(
        moved.sort_values(windows)[[*windows, "value"]].reset_index(drop=True),
        whole.sort_values(windows)[[*windows, "value"]].reset_index(drop=True))
