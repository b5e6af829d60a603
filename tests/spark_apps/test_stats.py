"""STATS: window statistics equal pandas', the Kalman and regression state the Python tasks'."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import SparkSession

from workloads.riot.datasets import CITY
from workloads.riot.tasks import make_task

from .conftest import READINGS, Run, snapshots

pytestmark = pytest.mark.slow

WINDOW, SLIDE = 600.0, 60.0  # stats()'s defaults: 10 minutes every minute


def clean_readings() -> list:
    in_range = make_task("range_filter")
    return [r for r in READINGS if in_range.process(r)]


def pandas_windows() -> pd.DataFrame:
    """Average and distinct count per sensor, field and sliding window, by pandas."""
    rows = [(r.sensor, field, r.timestamp, value) for r in clean_readings()
            for field, value in r.values.items() if value is not None]
    long = pd.DataFrame(rows, columns=["sensor", "field", "time", "value"])
    first = np.floor(long["time"] / SLIDE) * SLIDE
    spans = pd.concat([long.assign(start=first - k * SLIDE)
                       for k in range(int(WINDOW / SLIDE))])
    grouped = spans.groupby(["sensor", "field", "start"])["value"]
    return pd.DataFrame({"average": grouped.mean(), "distinct_count": grouped.nunique()})


def test_window_statistics_equal_pandas(stats_run: Run) -> None:
    out = stats_run.output
    windows = out[out["statistic"].isin(["average", "distinct_count"])]
    got = windows.assign(start=windows["time"] - WINDOW).pivot_table(
        index=["sensor", "field", "start"], columns="statistic", values="value")
    expected = pandas_windows()
    # Append mode emits a window once the watermark passes its end, and never again.
    assert stats_run.watermark is not None
    watermark = stats_run.watermark.timestamp()
    closed = expected[expected.index.get_level_values("start") + WINDOW <= watermark]
    assert len(windows) == 2 * len(got) and len(got) == len(closed) > 1000
    assert set(got.index) == set(closed.index)
    joined = got.join(closed, rsuffix="_pandas")
    assert np.allclose(joined["average"], joined["average_pandas"], rtol=1e-12)
    # HyperLogLog++ (5 % standard error by default) is exact here but for a hash collision
    # now and then.
    miss = (joined["distinct_count"] - joined["distinct_count_pandas"]).abs()
    assert (miss / joined["distinct_count_pandas"]).mean() < 0.05 and miss.max() <= 2


def test_kalman_and_regression_state_equal_the_python_tasks(spark: SparkSession,
                                                            stats_run: Run) -> None:
    kalman = make_task("kalman_filter", fields=CITY.value_columns)
    regressions = {f: make_task("sliding_linear_regression", field=f)
                   for f in CITY.value_columns}
    predictions = 0
    for reading in clean_readings():
        smoothed = kalman.process(reading)[0]
        predictions += sum(len(task.process(smoothed)) for task in regressions.values())

    state = snapshots(spark, stats_run.checkpoint)
    assert set(state) == {r.sensor for r in READINGS}
    for sensor, snapshot in state.items():
        assert snapshot["kalman"] == {"filters": {sensor: kalman.state[sensor]}}
        for field, task in regressions.items():
            assert snapshot["regression"][field] == {"windows": {sensor: task.windows[sensor]}}
    assert (stats_run.output["statistic"] == "predicted").sum() == predictions > 0
