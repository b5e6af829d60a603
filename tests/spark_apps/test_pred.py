"""PRED: the same classes and predictions as the pure-Python models, and a running error."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from workloads.riot.models import load_model, predict_linear, predict_tree
from workloads.spark.apps import pred

from .conftest import READINGS, run_to_end

pytestmark = pytest.mark.slow


def test_predictions_and_error_equal_the_python_models(stream_of, city_models: dict[str, Path],
                                                       tmp_path: Path) -> None:
    output, _ = run_to_end(pred(stream_of(READINGS), city_models), tmp_path / "checkpoint")
    tree = load_model(city_models["decision_tree"], "decision_tree")
    linear = load_model(city_models["linear_regression"], "linear_regression")
    rows = output.set_index(["sensor", "time"]).sort_index()
    assert len(rows) == len(READINGS) and rows.index.is_unique

    errors: dict[str, list[float]] = {}
    unknown = 0
    for reading in READINGS:
        row = rows.loc[(reading.sensor, reading.timestamp)]
        label = predict_tree(tree["tree"], reading.values)
        predicted = predict_linear(linear, reading.values)
        actual = reading.values["airquality_raw"]
        assert row["air_quality"] == label
        if predicted is None:
            unknown += 1
            assert math.isnan(row["airquality_raw_predicted"])
            continue
        assert row["airquality_raw_predicted"] == predicted
        if actual is not None:
            errors.setdefault(reading.sensor, []).append(abs(predicted - actual))
            seen = errors[reading.sensor]
            assert row["abs_error"] == seen[-1]
            assert row["mean_abs_error"] == pytest.approx(sum(seen) / len(seen), rel=1e-12)
    assert unknown > 0  # the sample has missing features, which leave no prediction
