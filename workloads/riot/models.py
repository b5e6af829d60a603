"""Offline training of the prediction tasks' models (decision tree, linear regression) as JSON."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workloads.riot.datasets import DatasetSpec, spec_for_columns
from workloads.riot.senml import Reading, Value, read_csv


@dataclass(frozen=True)
class ModelSpec:
    """What the models of one dataset learn: a class derived from one column, and a target."""

    features: tuple[str, ...]
    label: str
    label_from: str
    label_of: Callable[[float], str]
    target: str
    target_features: tuple[str, ...]


def air_quality(raw: float) -> str:
    """The CITY class: air quality from the raw gas-sensor reading."""
    return "good" if raw < 25.0 else "moderate" if raw < 35.0 else "poor"


def fare_band(total: float) -> str:
    """The TAXI class: the band of the total paid."""
    return "low" if total < 10.0 else "mid" if total < 25.0 else "high"


_CITY_FEATURES = ("temperature", "humidity", "light", "dust")
_TAXI_FEATURES = ("trip_distance", "trip_time_in_secs")
MODEL_SPECS = {
    "city": ModelSpec(features=_CITY_FEATURES, label="air_quality", label_from="airquality_raw",
                      label_of=air_quality, target="airquality_raw",
                      target_features=_CITY_FEATURES),
    "taxi": ModelSpec(features=_TAXI_FEATURES, label="fare_band", label_from="total_amount",
                      label_of=fare_band, target="fare_amount", target_features=_TAXI_FEATURES),
}


# Decision tree (CART with Gini impurity) -------------------------------------------------------


def fit_tree(x: np.ndarray, labels: Sequence[str], features: Sequence[str], max_depth: int = 4,
             min_leaf: int = 5) -> dict[str, Any]:
    """A tree of nested dicts: {"feature", "threshold", "left" (<=), "right"} or {"label"}."""
    classes = sorted(set(labels))
    codes = np.array([classes.index(label) for label in labels])
    onehot = np.eye(len(classes))[codes]

    def grow(rows: np.ndarray, depth: int) -> dict[str, Any]:
        counts = onehot[rows].sum(axis=0)
        leaf = {"label": classes[int(np.argmax(counts))]}  # ties go to the first class name
        if depth == max_depth or counts.max() == len(rows) or len(rows) < 2 * min_leaf:
            return leaf
        best = _best_split(x[rows], onehot[rows], min_leaf)
        if best is None or best[0] >= _gini(counts[None, :])[0] - 1e-12:
            return leaf
        _, column, threshold = best
        left = rows[x[rows, column] <= threshold]
        right = rows[x[rows, column] > threshold]
        return {"feature": features[column], "threshold": threshold,
                "left": grow(left, depth + 1), "right": grow(right, depth + 1)}

    return grow(np.arange(len(codes)), 0)


def _gini(counts: np.ndarray) -> np.ndarray:
    totals = counts.sum(axis=1)
    return 1.0 - ((counts / totals[:, None]) ** 2).sum(axis=1)


def _best_split(x: np.ndarray, onehot: np.ndarray,
                min_leaf: int) -> tuple[float, int, float] | None:
    """(weighted child impurity, column, threshold) of the best split, None if none is allowed."""
    n = len(x)
    best: tuple[float, int, float] | None = None
    for column in range(x.shape[1]):
        order = np.argsort(x[:, column], kind="stable")
        xs = x[order, column]
        left = np.cumsum(onehot[order], axis=0)[:-1]  # row i: the first i + 1 rows go left
        right = left[-1] + onehot[order][-1] - left
        sizes = np.arange(1, n)
        impurity = (sizes * _gini(left) + (n - sizes) * _gini(right)) / n
        allowed = (xs[:-1] < xs[1:]) & (sizes >= min_leaf) & (n - sizes >= min_leaf)
        if not allowed.any():
            continue
        i = int(np.argmin(np.where(allowed, impurity, np.inf)))
        if best is None or impurity[i] < best[0]:
            best = (float(impurity[i]), column, float((xs[i] + xs[i + 1]) / 2.0))
    return best


def predict_tree(tree: Mapping[str, Any], values: Mapping[str, Value]) -> str | None:
    """The tree's class for `values`; None when a feature it asks for is missing."""
    node = tree
    while "label" not in node:
        value = values.get(node["feature"])
        if value is None or isinstance(value, (str, bool)):
            return None
        node = node["left"] if value <= node["threshold"] else node["right"]
    return node["label"]


# Linear regression ----------------------------------------------------------------------------


def fit_linear(x: np.ndarray, y: np.ndarray) -> tuple[float, list[float]]:
    """Least-squares intercept and coefficients of y ~ x."""
    design = np.column_stack([np.ones(len(x)), x])
    solution, *_ = np.linalg.lstsq(design, y, rcond=None)
    return float(solution[0]), [float(c) for c in solution[1:]]


def predict_linear(model: Mapping[str, Any], values: Mapping[str, Value]) -> float | None:
    total = model["intercept"]
    for feature, coefficient in zip(model["features"], model["coefficients"], strict=True):
        value = values.get(feature)
        if value is None or isinstance(value, (str, bool)):
            return None
        total += coefficient * value
    return total


# Training from a sample file ------------------------------------------------------------------


def train_models(sample_csv: str | Path, out_dir: str | Path,
                 max_depth: int = 4) -> dict[str, Path]:
    """Train the decision tree and linear regression for the sample's dataset (found from its
    header) on its clean rows; write `<dataset>_decision_tree.json` and
    `<dataset>_linear_regression.json` into out_dir and return their paths by model kind."""
    with Path(sample_csv).open(newline="") as source:
        spec = spec_for_columns(next(csv.reader(source)))
    model_spec = MODEL_SPECS[spec.name]
    needed = (*model_spec.features, *model_spec.target_features, model_spec.target,
              model_spec.label_from)
    rows = [r for r in read_csv(sample_csv, spec.time_column, spec.sensor_column)
            if _clean(r, spec, needed)]
    if not rows:
        raise ValueError(f"{sample_csv}: no clean rows to train on")

    x = np.array([[r.values[f] for f in model_spec.features] for r in rows], dtype=float)
    labels = [model_spec.label_of(r.values[model_spec.label_from]) for r in rows]
    tree = {"kind": "decision_tree", "dataset": spec.name, "label": model_spec.label,
            "features": list(model_spec.features),
            "tree": fit_tree(x, labels, model_spec.features, max_depth=max_depth)}

    xr = np.array([[r.values[f] for f in model_spec.target_features] for r in rows], dtype=float)
    y = np.array([r.values[model_spec.target] for r in rows], dtype=float)
    intercept, coefficients = fit_linear(xr, y)
    linear = {"kind": "linear_regression", "dataset": spec.name, "target": model_spec.target,
              "features": list(model_spec.target_features), "intercept": intercept,
              "coefficients": coefficients}

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for kind, model in (("decision_tree", tree), ("linear_regression", linear)):
        paths[kind] = out / f"{spec.name}_{kind}.json"
        paths[kind].write_text(json.dumps(model, indent=1, sort_keys=True) + "\n")
    return paths


def load_model(path: str | Path, kind: str) -> dict[str, Any]:
    model = json.loads(Path(path).read_text())
    if model.get("kind") != kind:
        raise ValueError(f"{path}: a {model.get('kind')!r} model, expected {kind!r}")
    return model


def _clean(reading: Reading, spec: DatasetSpec, needed: Sequence[str]) -> bool:
    """True when every needed value is present and inside the dataset's valid range."""
    for name in needed:
        value = reading.values.get(name)
        if not isinstance(value, float):
            return False
        low, high = spec.ranges.get(name, (-np.inf, np.inf))
        if not low <= value <= high:
            return False
    return True
