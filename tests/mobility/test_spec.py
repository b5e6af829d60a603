"""MobilitySpec, RadioSpec and HandoverSpec: units, defaults, shorthands and what they reject."""

import pytest
from pydantic import ValidationError

from sim.mobility import (
    HandoverSpec,
    ManhattanSpec,
    MobilitySpec,
    RadioSpec,
    RandomWaypointSpec,
    TraceSpec,
)


def test_defaults_are_random_waypoint_over_every_device_each_second() -> None:
    spec = MobilitySpec()
    assert isinstance(spec.model, RandomWaypointSpec)
    assert (spec.devices, spec.update, spec.record) == (None, 1.0, None)


def test_model_is_chosen_by_kind_and_a_bare_name_takes_the_defaults() -> None:
    assert isinstance(MobilitySpec(model="manhattan").model, ManhattanSpec)
    spec = MobilitySpec(model={"kind": "manhattan", "block": 80, "turn": "25%"})
    assert (spec.model.block, spec.model.turn) == (80.0, 0.25)
    trace = MobilitySpec(model={"kind": "trace", "path": "walks/day1.GPX"}).model
    assert isinstance(trace, TraceSpec)


def test_durations_and_bandwidths_take_units() -> None:
    spec = MobilitySpec(
        model={"kind": "random_waypoint", "area": [500, 300], "speed": [1, 2],
               "pause": ["500ms", "1m"]},
        devices="phone-*", update="250ms", record="10s",
        radio={"range": 120, "latency": ["1ms", "30ms"], "bandwidth": ["54Mbit", "1MB/s"],
               "loss": "2%", "model": "log_distance"},
        handover={"hysteresis": 15, "min_dwell": "3s"},
    )
    assert spec.model.pause == (0.5, 60.0)
    assert spec.devices == ["phone-*"]
    assert (spec.update, spec.record) == (0.25, 10.0)
    assert spec.radio.latency == (0.001, 0.030)
    assert spec.radio.bandwidth == (54e6, 8e6)
    assert spec.radio.loss == 0.02
    assert spec.handover == HandoverSpec(hysteresis=15.0, min_dwell=3.0)


@pytest.mark.parametrize(("model", "message"), [
    ({"kind": "random_waypoint", "speed": [0, 2]}, "greater than 0"),
    ({"kind": "random_waypoint", "speed": [3, 2]}, "min <= max"),
    ({"kind": "random_waypoint", "pause": ["10s", "1s"]}, "min <= max"),
    ({"kind": "random_waypoint", "area": [0, 100]}, "greater than 0"),
    ({"kind": "manhattan", "turn": 1.5}, "between 0 and 1"),
    ({"kind": "manhattan", "block": 0}, "greater than 0"),
    ({"kind": "trace", "path": "walk.txt"}, ".csv or .gpx"),
    ({"kind": "levy_walk"}, "levy_walk"),
    ({"kind": "random_waypoint", "speeds": [1, 2]}, "Extra inputs"),
])
def test_rejects_a_bad_model_saying_why(model: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        MobilitySpec(model=model)


@pytest.mark.parametrize(("radio", "message"), [
    ({"latency": ["30ms", "1ms"]}, "latency at 0 m"),
    ({"bandwidth": ["1Mbit", "54Mbit"]}, "bandwidth at 0 m"),
    ({"range": 0}, "greater than 0"),
    ({"loss": 2}, "between 0 and 1"),
    ({"model": "free_space"}, "linear"),
])
def test_rejects_a_radio_that_improves_with_distance_or_is_malformed(radio: dict,
                                                                     message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RadioSpec(**radio)


def test_rejects_negative_hysteresis_and_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        HandoverSpec(hysteresis=-1)
    with pytest.raises(ValidationError, match="Extra inputs"):
        MobilitySpec(users=200)
