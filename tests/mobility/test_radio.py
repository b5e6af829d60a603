"""RadioModel: the spec's values at 0 m and at range, monotone between, no link beyond."""

import numpy as np
import pytest

from sim.mobility import RadioModel, RadioSpec

SPEC = dict(range=150.0, latency=(0.002, 0.020), bandwidth=(54e6, 1e6), loss=0.05)


@pytest.mark.parametrize("model", ["linear", "log_distance"])
def test_ends_match_the_spec_and_quality_falls_with_distance(model: str) -> None:
    radio = RadioModel(RadioSpec(**SPEC, model=model))
    distance = np.linspace(0.0, 150.0, 301)
    latency, bandwidth, loss = radio.link(distance)
    assert (latency[0], bandwidth[0], loss[0]) == pytest.approx((0.002, 54e6, 0.0))
    assert (latency[-1], bandwidth[-1], loss[-1]) == pytest.approx((0.020, 1e6, 0.05))
    assert (np.diff(latency) > 0).all()
    assert (np.diff(bandwidth) < 0).all()
    assert (np.diff(loss) > 0).all()


def test_linear_is_halfway_at_half_range_and_log_distance_degrades_early() -> None:
    half = np.array([75.0])
    linear, _, _ = RadioModel(RadioSpec(**SPEC)).link(half)
    assert linear[0] == pytest.approx(0.011)
    logarithmic, _, _ = RadioModel(RadioSpec(**SPEC, model="log_distance")).link(half)
    expected = np.log1p(75.0) / np.log1p(150.0)
    assert logarithmic[0] == pytest.approx(0.002 + expected * 0.018)
    assert logarithmic[0] > linear[0]


def test_beyond_range_or_without_a_gateway_there_is_no_link() -> None:
    # Equal latencies at both ends would make inf * 0 if out-of-range distances were not masked.
    radio = RadioModel(RadioSpec(**{**SPEC, "latency": (0.005, 0.005)}))
    with np.errstate(all="raise"):
        latency, bandwidth, loss = radio.link(np.array([150.0, 150.001, np.inf, np.nan]))
    assert latency.tolist() == [0.005, np.inf, np.inf, np.inf]
    assert bandwidth.tolist()[1:] == [0.0, 0.0, 0.0]
    assert loss.tolist()[1:] == [1.0, 1.0, 1.0]
