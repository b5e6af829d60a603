"""Every stateful task: snapshot after k inputs, restore into a fresh instance, same outputs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.riot.senml import Reading
from workloads.riot.tasks import TASKS, make_task

STATEFUL = {  # registry name: parameters
    "interpolation": {"fields": ["x", "y"]},
    "join": {"fields": ["x", "y"], "tolerance": 2.0},
    "kalman_filter": {},
    "distinct_count": {"field": "x", "precision": 6},
    "sliding_linear_regression": {"field": "x", "window": 3, "horizon": 2},
}

number = st.floats(-1e6, 1e6, allow_nan=False)
values = st.fixed_dictionaries({}, optional={"x": st.none() | number, "y": st.none() | number})


@st.composite
def streams(draw: st.DrawFn) -> list[Reading]:
    """Readings from three sensors in time order, with missing and absent values."""
    steps = draw(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 5), values),
                          max_size=40))
    readings, now = [], 1421280000.0
    for sensor, gap, fields in steps:
        now += gap
        readings.append(Reading(now, sensor, fields))
    return readings


def test_every_stateful_task_is_covered() -> None:
    assert {name for name, cls in TASKS.items() if cls.stateful} == set(STATEFUL)


@pytest.mark.parametrize("name", sorted(STATEFUL))
@settings(max_examples=60, deadline=None)
@given(readings=streams(), cut=st.integers(0, 40))
def test_restored_task_continues_like_the_original(name: str, readings: list[Reading],
                                                   cut: int) -> None:
    cut = min(cut, len(readings))
    whole = make_task(name, **STATEFUL[name])
    expected = [out for r in readings for out in whole.process(r)]

    first = make_task(name, **STATEFUL[name])
    outputs = [out for r in readings[:cut] for out in first.process(r)]
    saved = first.snapshot()
    second = make_task(name, **STATEFUL[name])
    second.restore(saved)
    assert second.snapshot() == saved  # deterministic bytes survive the round trip
    outputs += [out for r in readings[cut:] for out in second.process(r)]
    assert outputs == expected
    assert second.snapshot() == whole.snapshot()


def test_snapshot_bytes_are_sorted_compact_json() -> None:
    task = make_task("kalman_filter", fields=["t"])
    task.process(Reading(0.0, "b", {"t": 2.0}))
    task.process(Reading(0.0, "a", {"t": 1.0}))
    assert task.snapshot() == b'{"filters":{"a":{"t":[1.0,1.0]},"b":{"t":[2.0,1.0]}}}'
