"""Predictive tasks: sliding-window regression, offline-trained classification and regression."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from workloads.riot.senml import Reading
from workloads.riot.tasks.base import Message, Task, register, require_reading


def fit_line(points: Sequence[Sequence[float]]) -> tuple[float, float]:
    """Least-squares (slope, intercept) of y over x; slope 0 when all x are equal."""
    n = len(points)
    mean_x = sum(p[0] for p in points) / n
    mean_y = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mean_x) ** 2 for p in points)
    sxy = sum((p[0] - mean_x) * (p[1] - mean_y) for p in points)
    slope = sxy / sxx if sxx > 0 else 0.0
    return slope, mean_y - slope * mean_x


@register
class SlidingLinearRegression(Task):
    """Per sensor, fit `field` over time on the last `window` values and predict the next
    `horizon` ones (RIoTBench SLR, N:M).

    Predictions lie at the window's mean spacing after its last time and are emitted as
    `<field>_predicted` readings, `horizon` per input once the window is full. Time is
    measured from the window's first point, which keeps epoch-sized x well conditioned.
    """

    name = "sliding_linear_regression"
    stateful = True
    selectivity = 10.0  # the default horizon; instances set their own

    def __init__(self, field: str, window: int = 10, horizon: int = 10) -> None:
        if window < 2 or horizon < 1:
            raise ValueError("sliding linear regression needs window >= 2 and horizon >= 1")
        self.field, self.window, self.horizon = field, window, horizon
        self.output = f"{field}_predicted"
        self.selectivity = float(horizon)  # once warm: `horizon` outputs per input
        self.windows: dict[str, list[list[float]]] = {}

    def process(self, message: Message) -> list[Message]:
        reading = require_reading(self, message)
        value = reading.values.get(self.field)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return []
        points = self.windows.setdefault(reading.sensor, [])
        points.append([reading.timestamp, float(value)])
        del points[:-self.window]
        if len(points) < self.window:
            return []
        origin, last = points[0][0], points[-1][0]
        slope, intercept = fit_line([[t - origin, y] for t, y in points])
        step = (last - origin) / (self.window - 1)
        return [Reading(last + k * step, reading.sensor,
                        {self.output: intercept + slope * (last - origin + k * step)})
                for k in range(1, self.horizon + 1)]

    def get_state(self) -> dict[str, Any]:
        return {"windows": self.windows}

    def set_state(self, state: dict[str, Any]) -> None:
        self.windows = state["windows"]


@register
class DecisionTreeClassify(Task):
    """Add the class a trained decision tree gives the reading, or None when a feature is
    missing (RIoTBench DTC)."""

    name = "decision_tree_classify"

    def __init__(self, model_path: str | Path) -> None:
        from workloads.riot.models import load_model, predict_tree  # numpy: only when used

        self.model = load_model(model_path, "decision_tree")
        self.label = self.model["label"]
        self._predict = predict_tree

    def process(self, message: Message) -> list[Message]:
        reading = require_reading(self, message)
        label = self._predict(self.model["tree"], reading.values)
        return [replace(reading, values=reading.values | {self.label: label})]


@register
class LinearRegressionPredict(Task):
    """Add `<target>_predicted` from a trained multi-variate linear regression, or None when
    a feature is missing (RIoTBench MLR)."""

    name = "linear_regression_predict"

    def __init__(self, model_path: str | Path) -> None:
        from workloads.riot.models import load_model, predict_linear  # numpy: only when used

        self.model = load_model(model_path, "linear_regression")
        self.output = f"{self.model['target']}_predicted"
        self._predict = predict_linear

    def process(self, message: Message) -> list[Message]:
        reading = require_reading(self, message)
        predicted = self._predict(self.model, reading.values)
        return [replace(reading, values=reading.values | {self.output: predicted})]
