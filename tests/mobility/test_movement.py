"""Random waypoint, Manhattan grid: users stay in the area, keep to speed, reach their targets."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.mobility import (
    Area,
    ManhattanGrid,
    ManhattanSpec,
    RandomWaypoint,
    RandomWaypointSpec,
    build_movement,
)

AREA = Area(0.0, 0.0, 500.0, 300.0)
TOLERANCE = 1e-9


def _walk(movement, times) -> np.ndarray:
    """(len(times), users, 2): positions at each time."""
    return np.stack([movement.positions(float(t)) for t in times])


def _inside(positions: np.ndarray, area: Area) -> bool:
    x, y = positions[..., 0], positions[..., 1]
    return bool(((x >= area.x0 - TOLERANCE) & (x <= area.x1 + TOLERANCE)
                 & (y >= area.y0 - TOLERANCE) & (y <= area.y1 + TOLERANCE)).all())


def test_a_single_user_walks_to_its_target_pauses_then_leaves() -> None:
    spec = RandomWaypointSpec(speed=(5, 5), pause=(2, 2))
    user = RandomWaypoint(spec, Area(0.0, 0.0, 100.0, 100.0), 1, np.random.default_rng(0),
                          start=np.array([[0.0, 0.0]]), targets=np.array([[30.0, 40.0]]))
    assert user.positions(0.0).tolist() == [[0.0, 0.0]]
    assert user.positions(5.0) == pytest.approx(np.array([[15.0, 20.0]]))
    assert user.positions(9.9)[0] != pytest.approx([30.0, 40.0])
    for t in (10.0, 11.0, 12.0):  # 50 m at 5 m/s arrive at 10 s; a pause of 2 s follows
        assert user.positions(t) == pytest.approx(np.array([[30.0, 40.0]]))
    assert np.hypot(*(user.positions(12.5)[0] - [30.0, 40.0])) == pytest.approx(2.5)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), step=st.sampled_from([0.5, 1.0, 7.0, 120.0]),
       low=st.floats(0.1, 10), spread=st.floats(0, 10))
def test_random_waypoint_users_stay_in_the_area_within_their_speed(
        seed: int, step: float, low: float, spread: float) -> None:
    spec = RandomWaypointSpec(speed=(low, low + spread), pause=(0, 5))
    movement = RandomWaypoint(spec, AREA, 50, np.random.default_rng(seed))
    positions = _walk(movement, np.arange(0, 60 * step, step))
    assert _inside(positions, AREA)
    moved = np.hypot(*np.diff(positions, axis=0).transpose(2, 0, 1))
    assert (moved <= (low + spread) * step + TOLERANCE).all()


def test_random_waypoint_users_do_stop_at_waypoints() -> None:
    spec = RandomWaypointSpec(speed=(2, 4), pause=(10, 20))
    positions = _walk(RandomWaypoint(spec, AREA, 200, np.random.default_rng(1)), range(600))
    still = (np.diff(positions, axis=0) == 0).all(axis=2)
    # Each leg is at most 583 m at >= 2 m/s, so in 600 s every user has paused at least once.
    assert still.any(axis=0).all()
    assert (~still).any(axis=0).all()


def test_manhattan_users_keep_to_the_streets_and_the_area() -> None:
    spec = ManhattanSpec(kind="manhattan", block=100, speed=(1, 15), turn=0.3)
    movement = ManhattanGrid(spec, AREA, 300, np.random.default_rng(2))
    positions = _walk(movement, np.arange(0, 600, 0.5))
    assert _inside(positions, AREA)
    offset = positions / 100.0
    on_street = (np.abs(offset - np.round(offset)) < TOLERANCE).any(axis=2)
    assert on_street.all()
    moved = np.hypot(*np.diff(positions, axis=0).transpose(2, 0, 1))
    assert (moved <= 15 * 0.5 + TOLERANCE).all()
    assert (moved > 0).all()  # no pauses on the grid


def test_manhattan_users_without_turns_only_turn_at_the_edge() -> None:
    spec = ManhattanSpec(kind="manhattan", block=50, speed=(5, 5), turn=0)
    movement = ManhattanGrid(spec, AREA, 100, np.random.default_rng(3))
    positions = _walk(movement, np.arange(0, 300, 1.0))
    step = np.diff(positions, axis=0)
    direction = np.sign(step[1:]) != np.sign(step[:-1])
    turned = direction.any(axis=2)
    # Where a user turned, it was at most one step (5 m) from the edge of the area.
    at = positions[1:-1][turned]
    edge = np.minimum.reduce([at[:, 0], 500 - at[:, 0], at[:, 1], 300 - at[:, 1]])
    assert turned.any()
    assert (edge <= 5 + TOLERANCE).all()


def test_an_area_smaller_than_one_block_is_refused() -> None:
    with pytest.raises(ValueError, match="holds no whole block of 400 m"):
        ManhattanGrid(ManhattanSpec(kind="manhattan", block=400), AREA, 1,
                      np.random.default_rng(0))


@pytest.mark.parametrize("model", [RandomWaypointSpec(), ManhattanSpec(kind="manhattan")])
def test_movement_is_determined_by_the_generator_seed(model) -> None:
    gateways = np.array([[0.0, 0.0], [400.0, 300.0]])

    def run(seed: int) -> np.ndarray:
        movement = build_movement(model, 100, gateways, np.random.default_rng(seed))
        return _walk(movement, range(0, 300, 3))

    assert np.array_equal(run(7), run(7))
    assert not np.array_equal(run(7), run(8))


def test_a_derived_area_is_the_gateways_box_grown_by_the_margin() -> None:
    gateways = np.array([[100.0, 50.0], [400.0, 250.0], [250.0, 90.0]])
    assert Area.of(None, gateways, 100.0) == Area(0.0, -50.0, 500.0, 350.0)
    assert Area.of((300.0, 200.0), gateways, 100.0) == Area(0.0, 0.0, 300.0, 200.0)
    with pytest.raises(ValueError, match="span no area"):
        Area.of(None, gateways[:1], 0.0)
    movement = build_movement(RandomWaypointSpec(margin=100), 200, gateways,
                              np.random.default_rng(0))
    assert _inside(_walk(movement, range(0, 1000, 10)), Area(0.0, -50.0, 500.0, 350.0))


def test_time_only_runs_forward() -> None:
    movement = RandomWaypoint(RandomWaypointSpec(), AREA, 3, np.random.default_rng(0))
    movement.positions(10.0)
    movement.positions(10.0)
    with pytest.raises(ValueError, match="forward in time"):
        movement.positions(9.0)
