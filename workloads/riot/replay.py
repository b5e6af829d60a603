"""Replay of a CSV file as (virtual emit time, reading) pairs, like the RIoTBench source task."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from workloads.riot.senml import Reading, read_csv

MODES = ("constant", "max", "poisson", "timestamps")


def replay(path: str | Path, *, mode: str = "timestamps", rate: float | None = None,
           speed: float = 1.0, seed: int = 0, time_column: str = "timestamp",
           sensor_column: str = "source") -> Iterator[tuple[float, Reading]]:
    """Emit times start at 0 s and never decrease; nothing sleeps, callers decide whether to wait.

    - constant: row i at i / rate
    - max: every row at 0 (as fast as the consumer takes them)
    - poisson: exponential gaps of mean 1 / rate, drawn from `seed`
    - timestamps: the file's own gaps divided by `speed` (2 replays twice as fast)
    """
    if mode not in MODES:
        raise ValueError(f"unknown replay mode {mode!r}; known: {', '.join(MODES)}")
    if mode in ("constant", "poisson") and (rate is None or rate <= 0):
        raise ValueError(f"replay mode {mode!r} needs a positive rate, got {rate!r}")
    if speed <= 0:
        raise ValueError(f"replay speed must be positive, got {speed!r}")
    readings = read_csv(path, time_column, sensor_column)
    if mode == "timestamps":
        return _by_timestamps(path, readings, speed)
    return _by_rate(readings, mode, rate or 0.0, random.Random(seed))


def _by_rate(readings: Iterator[Reading], mode: str, rate: float,
             rng: random.Random) -> Iterator[tuple[float, Reading]]:
    emit = 0.0
    for i, reading in enumerate(readings):
        if mode == "constant":
            emit = i / rate  # multiplying, not summing gaps, keeps long replays free of drift
        elif mode == "poisson" and i > 0:
            emit += rng.expovariate(rate)
        yield emit, reading


def _by_timestamps(path: str | Path, readings: Iterator[Reading],
                   speed: float) -> Iterator[tuple[float, Reading]]:
    first: float | None = None
    previous = float("-inf")
    for row, reading in enumerate(readings, start=2):  # row 1 is the header
        if reading.timestamp < previous:
            raise ValueError(f"{path}, row {row}: timestamp {reading.timestamp} is earlier than "
                             f"the row before ({previous}); sort the file to replay it by time")
        previous = reading.timestamp
        if first is None:
            first = reading.timestamp
        yield (reading.timestamp - first) / speed, reading
