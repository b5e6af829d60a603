"""Offline training: a hand-checkable tree and regression, and models fitted to the samples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from workloads.riot.datasets import taxi_readings
from workloads.riot.models import (
    fare_band,
    fit_linear,
    fit_tree,
    load_model,
    predict_linear,
    predict_tree,
    train_models,
)


def test_tree_splits_one_feature_at_the_midpoint() -> None:
    x = np.arange(1.0, 11.0)[:, None]
    labels = ["low"] * 4 + ["high"] * 6
    tree = fit_tree(x, labels, ["dust"], min_leaf=1)
    assert tree == {"feature": "dust", "threshold": 4.5,
                    "left": {"label": "low"}, "right": {"label": "high"}}


def test_tree_picks_the_informative_feature_and_respects_depth() -> None:
    rng = np.random.default_rng(0)
    noise, signal = rng.uniform(0, 1, 200), rng.uniform(0, 1, 200)
    labels = ["a" if s < 0.3 else "b" if s < 0.7 else "c" for s in signal]
    tree = fit_tree(np.column_stack([noise, signal]), labels, ["noise", "signal"], max_depth=2)
    assert tree["feature"] == "signal"
    assert predict_tree(tree, {"noise": 0.5, "signal": 0.1}) == "a"
    assert predict_tree(tree, {"noise": 0.5, "signal": 0.5}) == "b"
    assert predict_tree(tree, {"noise": 0.5, "signal": 0.9}) == "c"
    stump = fit_tree(np.column_stack([noise, signal]), labels, ["noise", "signal"], max_depth=1)
    assert set(stump) == {"feature", "threshold", "left", "right"}
    assert "label" in stump["left"] and "label" in stump["right"]


def test_pure_data_is_a_single_leaf() -> None:
    assert fit_tree(np.ones((10, 1)), ["a"] * 10, ["x"]) == {"label": "a"}


def test_linear_fit_is_exact_on_a_plane() -> None:
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [2.0, 3.0], [5.0, -1.0]])
    intercept, coefficients = fit_linear(x, 3.0 + 2.0 * x[:, 0] - x[:, 1])
    assert intercept == pytest.approx(3.0)
    assert coefficients == pytest.approx([2.0, -1.0])
    model = {"intercept": intercept, "coefficients": coefficients, "features": ["a", "b"]}
    assert predict_linear(model, {"a": 1.0, "b": 1.0}) == pytest.approx(4.0)
    assert predict_linear(model, {"a": 1.0}) is None


def test_city_models_recover_the_generators_air_quality_law(city_models) -> None:
    linear = load_model(city_models["linear_regression"], "linear_regression")
    assert linear["target"] == "airquality_raw"
    assert linear["features"] == ["temperature", "humidity", "light", "dust"]
    # The generator: airquality_raw = 8 + 0.12 humidity + 0.2 dust + noise
    coefficients = dict(zip(linear["features"], linear["coefficients"], strict=True))
    assert coefficients["dust"] == pytest.approx(0.2, abs=0.005)
    assert coefficients["humidity"] == pytest.approx(0.12, abs=0.01)
    assert abs(coefficients["temperature"]) < 0.02
    assert linear["intercept"] == pytest.approx(8.0, abs=0.5)
    tree = load_model(city_models["decision_tree"], "decision_tree")
    assert tree["label"] == "air_quality"
    assert city_models["decision_tree"].name == "city_decision_tree.json"


def test_taxi_models_learn_the_meter(taxi_models) -> None:
    linear = load_model(taxi_models["linear_regression"], "linear_regression")
    # The meter: 2.50 + 2.00 per mile + 0.25 per minute, rounded to 50 cents.
    assert linear["intercept"] == pytest.approx(2.5, abs=0.1)
    assert linear["coefficients"] == pytest.approx([2.0, 0.25 / 60], rel=0.02)
    tree = load_model(taxi_models["decision_tree"], "decision_tree")
    fresh = taxi_readings(rows=2000, seed=7, outlier_rate=0.0)
    hits = sum(predict_tree(tree["tree"], r.values) == fare_band(r.values["total_amount"])
               for r in fresh)
    assert hits / len(fresh) > 0.85


def test_models_are_small_deterministic_json(city_csv: Path, tmp_path: Path) -> None:
    first = train_models(city_csv, tmp_path / "a")
    second = train_models(city_csv, tmp_path / "b")
    for kind in ("decision_tree", "linear_regression"):
        assert first[kind].read_bytes() == second[kind].read_bytes()
        assert first[kind].stat().st_size < 8000
        json.loads(first[kind].read_text())


def test_training_rejects_an_unknown_layout(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("time,id,x\n1,a,2\n")
    with pytest.raises(ValueError, match="neither the city nor the taxi layout"):
        train_models(path, tmp_path)
