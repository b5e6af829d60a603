"""One sensor's Kalman filter and sliding regression over a micro-batch, with the numbers of
`KalmanFilter` and `SlidingLinearRegression` bit for bit but without a Python object per reading.

STATS runs these tasks per sensor inside `transformWithStateInPandas`; building a `Reading`, a
dict and a `Row` per value and output made them cost more than a millisecond per message. Here a
field's batch is a float array: the Kalman recursion stays a scalar loop (each estimate needs the
previous one; its gain sequence does not depend on the data, so it is computed once and is a
constant once the error estimate reaches its fixed point), and every regression window of the
batch is fitted at once over a sliding view. Sums over a window add its columns left to right,
as Python's `sum` does in `fit_line`: the predictions equal the task's exactly, not to a rounding.
The state read and written is the tasks' own snapshot (`get_state`/`set_state`), so queries,
checkpoints and `initial_state` are interchangeable with the pure-Python tasks'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np


@dataclass(frozen=True)
class KalmanSettings:
    """`KalmanFilter`'s noise settings (its keyword names and defaults)."""

    process_noise: float = 0.1
    sensor_noise: float = 0.1
    estimated_error: float = 1.0


@dataclass
class FieldForecast:
    """One field's output for a batch: `rows` (positions in the time-ordered batch) that had a
    value, their `smoothed` values, and for the rows whose regression window was full
    (`predicting`, positions in `rows`) the `times` and `values` predicted, one row each of
    `horizon` columns."""

    rows: np.ndarray
    smoothed: np.ndarray
    predicting: np.ndarray
    times: np.ndarray
    values: np.ndarray


def kalman(z: Sequence[float], start: list[float] | None,
           settings: KalmanSettings) -> tuple[list[float], list[float]]:
    """Estimates for measurements `z` from the filter state `start` ([x, p], or None for a
    field never seen: its first measurement seeds x); return them and the final state."""
    q, r, p0 = settings.process_noise, settings.sensor_noise, settings.estimated_error
    z = list(z)
    if not z:
        return [], start  # type: ignore[return-value]
    if start is None:
        x, p = float(z[0]), p0
        head, rest = [z[0]], z[1:]
    else:
        (x, p), head, rest = start, [], z
    gains: list[float] = []
    while len(gains) < len(rest):
        p_next = p + q
        gain = p_next / (p_next + r)
        p_next = (1.0 - gain) * p_next
        gains.append(gain)
        if p_next == p:  # the fixed point: every further gain is this one
            gains.extend([gain] * (len(rest) - len(gains)))
        p = p_next
    estimates = list(accumulate(zip(gains, rest, strict=True),
                                lambda x, gz: x + gz[0] * (gz[1] - x), initial=x))[1:]
    if estimates:
        x = estimates[-1]
    return head + estimates, [x, p]


def _sum_columns(terms: np.ndarray) -> np.ndarray:
    """Row sums of a 2-D array, adding columns left to right as `sum` does (numpy's pairwise
    summation rounds differently)."""
    total = terms[:, 0].copy()
    for j in range(1, terms.shape[1]):
        total += terms[:, j]
    return total


def regression(t: np.ndarray, y: np.ndarray, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """`SlidingLinearRegression`'s predictions for windows of points: row i of `t` and `y` holds
    one window's times and values, oldest first; return (windows, horizon) times and values."""
    window = t.shape[1]
    origin, last = t[:, 0], t[:, -1]
    rel = t - origin[:, None]
    mean_x = _sum_columns(rel) / window
    mean_y = _sum_columns(y) / window
    dx = rel - mean_x[:, None]
    sxx = _sum_columns(dx ** 2)
    sxy = _sum_columns(dx * (y - mean_y[:, None]))
    slope = np.divide(sxy, sxx, out=np.zeros_like(sxx), where=sxx > 0)
    intercept = mean_y - slope * mean_x
    step = (last - origin) / (window - 1)
    ahead = np.arange(1, horizon + 1, dtype=float)[None, :] * step[:, None]
    return (last[:, None] + ahead,
            intercept[:, None] + slope[:, None] * ((last - origin)[:, None] + ahead))


def smooth_and_forecast(sensor: str, times: np.ndarray, values: np.ndarray,
                        fields: Sequence[str], saved: Mapping[str, Any] | None,
                        settings: KalmanSettings, window: int,
                        horizon: int) -> tuple[list[FieldForecast], dict[str, Any]]:
    """Run one sensor's time-ordered batch (`times`, and `values` with a column per field, NaN
    where missing) through the Kalman filter then the sliding regression of each field, from the
    snapshot `saved` (None for a new sensor); return each field's output and the new snapshot.

    NaN counts as missing: Spark's nulls arrive so in pandas (a NaN measurement is outside every
    range STATS filters on, so none reaches here).
    """
    filters = dict(saved["kalman"]["filters"].get(sensor, {})) if saved else {}
    windows = {f: saved["regression"][f]["windows"] for f in fields} if saved else {}
    regression_state: dict[str, Any] = {}
    found, window_t, window_y = [], [], []
    for j, field in enumerate(fields):
        column = values[:, j]
        rows = np.flatnonzero(~np.isnan(column))
        smoothed, state = kalman(column[rows].tolist(), filters.get(field), settings)
        if state is not None:
            filters[field] = state
        points = windows.get(field, {}).get(sensor, [])
        known = len(points)
        t = np.concatenate([np.array([p[0] for p in points], float), times[rows]])
        y = np.concatenate([np.array([p[1] for p in points], float), smoothed])
        # The windows that end at a new point: the task predicts once per value it is given.
        ends = np.arange(max(window - 1, known), len(t))
        spans = ends[:, None] + np.arange(1 - window, 1)[None, :]
        window_t.append(t[spans])
        window_y.append(y[spans])
        keep = [[a, b] for a, b in zip(t[-window:].tolist(), y[-window:].tolist(), strict=True)]
        regression_state[field] = {"windows": {**windows.get(field, {}),
                                               **({sensor: keep} if keep else {})}}
        found.append((rows, np.asarray(smoothed, float), ends - known))
    predicted_t, predicted_v = regression(np.concatenate(window_t), np.concatenate(window_y),
                                          horizon)
    outputs, first = [], 0
    for rows, smoothed, predicting in found:
        last = first + len(predicting)
        outputs.append(FieldForecast(rows, smoothed, predicting, predicted_t[first:last],
                                     predicted_v[first:last]))
        first = last
    snapshot = {"kalman": {"filters": {**(saved["kalman"]["filters"] if saved else {}),
                                       sensor: filters}},
                "regression": regression_state}
    return outputs, snapshot
