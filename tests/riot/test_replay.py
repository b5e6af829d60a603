"""Replay of CSV files: emit times by rate, by scaled file timestamps, and under a seed."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from workloads.riot.datasets import TAXI
from workloads.riot.replay import replay
from workloads.riot.senml import read_csv


@pytest.fixture
def small_csv(tmp_path: Path) -> Path:
    path = tmp_path / "small.csv"
    path.write_text("timestamp,source,temperature\n100,a,20\n101,b,21\n103,a,22\n106,b,23\n")
    return path


def _times(pairs) -> list[float]:
    return [emit for emit, _ in pairs]


@pytest.mark.parametrize(("speed", "expected"), [(1.0, [0, 1, 3, 6]), (2.0, [0, 0.5, 1.5, 3]),
                                                 (0.5, [0, 2, 6, 12])])
def test_timestamps_scaled_by_speed(small_csv: Path, speed: float, expected: list[float]) -> None:
    assert _times(replay(small_csv, speed=speed)) == expected


def test_constant_rate(small_csv: Path) -> None:
    assert _times(replay(small_csv, mode="constant", rate=4)) == [0, 0.25, 0.5, 0.75]


def test_max_rate_emits_everything_at_once(small_csv: Path) -> None:
    assert _times(replay(small_csv, mode="max")) == [0, 0, 0, 0]


def test_replay_yields_the_file_readings(small_csv: Path) -> None:
    readings = [r for _, r in replay(small_csv, mode="max")]
    assert readings == list(read_csv(small_csv, "timestamp", "source"))
    assert [(r.sensor, r.values["temperature"]) for r in readings] == [
        ("a", 20.0), ("b", 21.0), ("a", 22.0), ("b", 23.0)]


def test_poisson_is_seeded_with_the_given_mean_gap(city_csv: Path) -> None:
    first = _times(replay(city_csv, mode="poisson", rate=100, seed=1))
    assert first == _times(replay(city_csv, mode="poisson", rate=100, seed=1))
    assert first != _times(replay(city_csv, mode="poisson", rate=100, seed=2))
    gaps = [b - a for a, b in zip(first, first[1:], strict=False)]
    assert first[0] == 0.0 and min(gaps) >= 0.0
    # 2999 exponential gaps of mean 0.01 s: the sample mean is within 4 standard errors.
    assert statistics.mean(gaps) == pytest.approx(0.01, abs=4 * 0.01 / len(gaps) ** 0.5)


def test_taxi_replays_by_drop_off_time(taxi_csv: Path) -> None:
    pairs = list(replay(taxi_csv, speed=60.0, time_column=TAXI.time_column,
                        sensor_column=TAXI.sensor_column))
    first = pairs[0][1].timestamp
    assert [emit for emit, _ in pairs[:50]] == [(r.timestamp - first) / 60.0
                                                for _, r in pairs[:50]]
    assert len(pairs) == 3000


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mode": "bursty"}, "unknown replay mode 'bursty'"),
    ({"mode": "constant"}, "needs a positive rate"),
    ({"mode": "poisson", "rate": 0}, "needs a positive rate"),
    ({"speed": 0}, "speed must be positive"),
])
def test_bad_arguments_fail_before_any_row(small_csv: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replay(small_csv, **kwargs)


def test_unsorted_file_names_the_row(tmp_path: Path) -> None:
    path = tmp_path / "unsorted.csv"
    path.write_text("timestamp,source,x\n10,a,1\n12,a,2\n11,a,3\n")
    with pytest.raises(ValueError, match="row 4: timestamp 11.0 is earlier"):
        list(replay(path))
