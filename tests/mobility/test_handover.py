"""Handover: nearest gateway in range, switching only past the hysteresis and after min dwell."""

import numpy as np
import pytest

from sim.mobility import Handover, HandoverSpec

GATEWAYS = np.array([[0.0, 0.0], [100.0, 0.0]])


def _walk(handover: Handover, times, xs) -> np.ndarray:
    """The gateway of one user at x along the line from A to B, step by step."""
    gateway = np.array([-1])
    chosen = []
    for t, x in zip(times, xs, strict=True):
        gateway = handover.step(float(t), np.array([[x, 0.0]]), gateway)
        chosen.append(gateway[0])
    return np.array(chosen)


def test_a_user_walking_from_a_to_b_switches_past_the_midpoint_by_the_hysteresis() -> None:
    handover = Handover(HandoverSpec(hysteresis=10, min_dwell=0), GATEWAYS, reach=200.0)
    xs = np.arange(0.0, 100.5, 0.5)
    chosen = _walk(handover, xs, xs)
    switch = xs[np.argmax(chosen == 1)]
    # B is closer than A by more than 10 m once 100 - x < x - 10, that is past x = 55.
    assert switch == 55.5
    assert (chosen[xs < switch] == 0).all() and (chosen[xs >= switch] == 1).all()


def test_walking_back_switches_back_only_past_the_margin_on_the_other_side() -> None:
    handover = Handover(HandoverSpec(hysteresis=10, min_dwell=0), GATEWAYS, reach=200.0)
    xs = np.concatenate([np.arange(0.0, 60.0), np.arange(60.0, 40.0, -1.0)])
    chosen = _walk(handover, range(len(xs)), xs)
    assert chosen.tolist() == [0] * 56 + [1] * 4 + [1] * 16 + [0] * 4  # back to A below x = 45


def test_no_flapping_within_min_dwell_near_the_midpoint() -> None:
    handover = Handover(HandoverSpec(hysteresis=0, min_dwell=5), GATEWAYS, reach=200.0)
    times = np.arange(0.0, 60.0, 0.5)
    xs = 50.0 + 3.0 * np.where(np.arange(len(times)) % 2 == 0, 1.0, -1.0)
    chosen = _walk(handover, times, xs)
    switches = times[1:][np.diff(chosen) != 0]
    assert len(switches) >= 5  # it does switch, just not more often than every 5 s
    assert (np.diff(switches) >= 5.0).all()


def test_leaving_range_forces_a_switch_or_a_detach_despite_min_dwell() -> None:
    gateways = np.array([[0.0, 0.0], [300.0, 0.0]])
    handover = Handover(HandoverSpec(hysteresis=10, min_dwell=1000), gateways, reach=120.0)
    xs = [0.0, 100.0, 121.0, 185.0, 300.0, 470.0]
    assert _walk(handover, range(len(xs)), xs).tolist() == [0, 0, -1, 1, 1, -1]


def test_changed_users_and_distances_are_reported_for_the_radio() -> None:
    handover = Handover(HandoverSpec(hysteresis=5, min_dwell=0), GATEWAYS, reach=60.0)
    users = np.array([[10.0, 0.0], [90.0, 0.0], [50.0, 80.0]])
    first = handover.step(0.0, users, np.full(3, -1))
    assert first.tolist() == [0, 1, -1]
    assert handover.changed.tolist() == [0, 1]
    assert handover.distance.tolist() == pytest.approx([10.0, 10.0, np.inf])
    # User 1 comes to 40 m from A and 60 m from B; user 2 comes into A's range.
    moved = np.array([[10.0, 0.0], [40.0, 0.0], [45.0, 20.0]])
    second = handover.step(1.0, moved, first)
    assert second.tolist() == [0, 0, 0]
    assert handover.changed.tolist() == [1, 2]
    assert handover.distance == pytest.approx(np.array([10.0, 40.0, np.hypot(45.0, 20.0)]))


def test_the_number_of_users_is_fixed_by_the_first_step() -> None:
    handover = Handover(HandoverSpec(), GATEWAYS, reach=100.0)
    handover.step(0.0, np.zeros((4, 2)), np.full(4, -1))
    with pytest.raises(ValueError, match="expected 4 user positions"):
        handover.step(1.0, np.zeros((5, 2)), np.full(5, -1))


def test_nearest_gateway_is_exact_far_from_the_origin() -> None:
    # A city placed at a million metres: the expanded distance must not lose the metre.
    rng = np.random.default_rng(0)
    gateways = 1e6 + rng.uniform(0, 2000, size=(50, 2))
    users = 1e6 + rng.uniform(0, 2000, size=(1000, 2))
    handover = Handover(HandoverSpec(hysteresis=0), gateways, reach=5000.0)
    chosen = handover.step(0.0, users, np.full(1000, -1))
    exact = np.hypot(*(users[:, None, :] - gateways[None, :, :]).transpose(2, 0, 1))
    assert np.array_equal(chosen, exact.argmin(axis=1))
