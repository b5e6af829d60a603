"""STATS' vectorised Kalman filter and regression give the pure-Python tasks' numbers exactly."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from workloads.riot.senml import Reading
from workloads.riot.tasks.predict import SlidingLinearRegression
from workloads.riot.tasks.statistics import KalmanFilter
from workloads.spark.smoothing import KalmanSettings, kalman, smooth_and_forecast

FIELDS = ("temperature", "humidity", "light")
SENSOR = "city-07"


def seeded_batches(seed: int, sizes: list[int], missing: float) -> list[list[Reading]]:
    """Readings of one sensor at irregular times, split into micro-batches of `sizes`, with
    values missing at random (a batch may hold rows without any value)."""
    rng = random.Random(seed)
    t, batches = 1.7e9, []
    for size in sizes:
        batch = []
        for _ in range(size):
            t += rng.uniform(0.01, 2.0)
            batch.append(Reading(t, SENSOR, {f: None if rng.random() < missing
                                             else rng.uniform(-20.0, 40.0) for f in FIELDS}))
        batches.append(batch)
    return batches


def reference(batches: list[list[Reading]], window: int, horizon: int,
              settings: KalmanSettings) -> tuple[list[list[tuple]], dict]:
    """What `_KalmanRegression` computed with the tasks, per batch: (field, statistic, time,
    value) rows; and the final snapshot."""
    task = KalmanFilter(fields=FIELDS, process_noise=settings.process_noise,
                        sensor_noise=settings.sensor_noise,
                        estimated_error=settings.estimated_error)
    regressions = {f: SlidingLinearRegression(f, window, horizon) for f in FIELDS}
    outputs = []
    for batch in batches:
        rows = []
        for reading in batch:
            smoothed = task.process(reading)[0]
            for field, regression in regressions.items():
                if smoothed.values[field] is None:
                    continue
                rows.append((field, "kalman", reading.timestamp, smoothed.values[field]))
                rows.extend((field, "predicted", p.timestamp, p.values[regression.output])
                            for p in regression.process(smoothed))
        outputs.append(rows)
    snapshot = {"kalman": task.get_state(),
                "regression": {f: r.get_state() for f, r in regressions.items()}}
    return outputs, snapshot


def vectorised(batches: list[list[Reading]], window: int, horizon: int,
               settings: KalmanSettings) -> tuple[list[list[tuple]], dict]:
    """The same through `smooth_and_forecast`, the snapshot going through JSON between batches
    as it does through the state store."""
    saved, outputs = None, []
    for batch in batches:
        times = np.array([r.timestamp for r in batch], float)
        values = np.array([[np.nan if r.values[f] is None else r.values[f] for f in FIELDS]
                           for r in batch], float).reshape(len(batch), len(FIELDS))
        fields, snapshot = smooth_and_forecast(SENSOR, times, values, FIELDS, saved, settings,
                                               window, horizon)
        saved = json.loads(json.dumps(snapshot))
        rows = []
        for field, out in zip(FIELDS, fields, strict=True):
            rows.extend((field, "kalman", float(times[i]), float(v))
                        for i, v in zip(out.rows, out.smoothed, strict=True))
            rows.extend((field, "predicted", float(t), float(v))
                        for t, v in zip(out.times.ravel(), out.values.ravel(), strict=True))
        outputs.append(rows)
    return outputs, saved


@pytest.mark.parametrize(("seed", "sizes", "missing", "window", "horizon"), [
    (1, [1, 1, 3, 8, 2, 40, 1, 120], 0.0, 10, 10),
    (2, [5, 9, 1, 30, 17, 200], 0.3, 10, 10),
    (3, [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2], 0.5, 4, 3),
    (4, [60, 60, 60], 0.05, 2, 1),
])
def test_equals_the_python_tasks_bit_for_bit(seed: int, sizes: list[int], missing: float,
                                             window: int, horizon: int) -> None:
    batches = seeded_batches(seed, sizes, missing)
    settings = KalmanSettings(process_noise=0.05, sensor_noise=0.3, estimated_error=2.0)
    expected, expected_state = reference(batches, window, horizon, settings)
    got, state = vectorised(batches, window, horizon, settings)
    for want, have in zip(expected, got, strict=True):
        # The order within a batch differs (field by field here); every number is equal.
        assert sorted(have) == sorted(want)
    assert state == json.loads(json.dumps(expected_state))
    assert any(row[1] == "predicted" for batch in got for row in batch)


def test_a_field_never_measured_has_no_state() -> None:
    times = np.array([1.0, 2.0])
    values = np.array([[1.0, np.nan, np.nan], [2.0, np.nan, 5.0]])
    fields, snapshot = smooth_and_forecast(SENSOR, times, values, FIELDS, None,
                                           KalmanSettings(), 10, 10)
    p = 1.0 + 0.1  # the KalmanFilter's update of its defaults, once
    gain = p / (p + 0.1)
    assert snapshot["kalman"] == {"filters": {SENSOR: {
        "temperature": [1.0 + gain * (2.0 - 1.0), (1.0 - gain) * p], "light": [5.0, 1.0]}}}
    assert snapshot["regression"]["humidity"] == {"windows": {}}
    assert [len(f.rows) for f in fields] == [2, 0, 1]


def test_the_kalman_gain_reaches_its_fixed_point_without_changing_the_estimates() -> None:
    rng = random.Random(9)
    z = [rng.uniform(0, 10) for _ in range(500)]
    task = KalmanFilter(fields=["v"])
    expected = [task.process(Reading(float(i), "s", {"v": v}))[0].values["v"]
                for i, v in enumerate(z)]
    estimates, state = kalman(z, None, KalmanSettings())
    assert estimates == expected
    assert state == task.state["s"]["v"]
