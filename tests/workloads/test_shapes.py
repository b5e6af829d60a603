"""Rate shapes as plain functions (what the gateway agent computes) agree with the models."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter

from workloads import shapes
from workloads.rates import Shape

SHAPES = [
    {"kind": "constant"},
    {"kind": "bursty", "on": 2, "off": 3, "high": 4, "low": 0.5},
    {"kind": "sawtooth", "period": 10, "low": 0.2, "high": 1.8},
    {"kind": "diurnal", "day": 600, "peaks": [8 * 3600, 18 * 3600], "width": 3600},
    {"kind": "diurnal", "day": 600, "peaks": [590], "width": 30, "scale_with_day": False},
]


@pytest.mark.parametrize("given", SHAPES, ids=lambda s: s["kind"])
def test_the_plain_functions_give_the_models_factors_and_peaks(given: dict) -> None:
    model = TypeAdapter(Shape).validate_python(given)
    fields = model.model_dump()
    times = [i * 0.37 for i in range(2000)]
    assert [shapes.factor(fields, t) for t in times] == [model.factor(t) for t in times]
    assert shapes.peak(fields) == model.peak
    assert max(shapes.factor(fields, t) for t in times) <= shapes.peak(fields) + 1e-12


def test_known_values() -> None:
    bursty = {"kind": "bursty", "on": 2, "off": 3, "high": 4, "low": 0.5}
    assert [shapes.factor(bursty, t) for t in (0, 1.99, 2, 4.99, 5)] == [4, 4, 0.5, 0.5, 4]
    saw = {"kind": "sawtooth", "period": 10, "low": 0.0, "high": 2.0}
    assert shapes.factor(saw, 5) == pytest.approx(1.0)
    # A peak at 23:00 on a 24 h day also lifts 01:00 (the day is a circle).
    night = {"kind": "diurnal", "day": 86400, "peaks": [23 * 3600], "width": 3600,
             "floor": 0.0, "height": 1.0, "scale_with_day": True}
    assert shapes.factor(night, 3600) == pytest.approx(shapes.factor(night, 21 * 3600))


def test_an_unknown_kind_is_named() -> None:
    with pytest.raises(ValueError, match="'square'"):
        shapes.factor({"kind": "square"}, 0)
