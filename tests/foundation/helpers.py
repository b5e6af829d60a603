"""Helpers for the foundation tests: build experiments from YAML text and simulate them."""

from __future__ import annotations

import numpy as np

from experiments.loader import RunPoint, parse_text
from experiments.model_settings import sim_settings
from sim.model import Model, Settings, SimResult, simulate

# An experiment in block style, so that each field has a line of its own.
BLOCK = """\
name: block
topology: smart-city
workload: city-sensors
pipeline:
  - name: filter
    on: gateways
    reads: city
    writes: clean
  - name: stats
    on: cloud-1
    reads: clean
run:
  duration: 60s
  seed: 4
"""


def point(text: str, overrides: list[str] = ()) -> RunPoint:
    """The single sweep point of an experiment written as YAML text."""
    experiment = parse_text(text, overrides=overrides)
    assert len(experiment.points) == 1
    return experiment.points[0]


def settings(run_point: RunPoint, **changes) -> Settings:
    return sim_settings(run_point.spec, **changes)


def model(text: str, **changes) -> Model:
    run_point = point(text)
    return Model(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                 settings(run_point, **changes))


def simulate_point(run_point: RunPoint, **changes) -> SimResult:
    """Simulate one sweep point; `changes` override its Settings."""
    return simulate(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                    settings(run_point, **changes))


def run(text: str, overrides: list[str] = (), **changes) -> SimResult:
    """Simulate an experiment given as YAML text; `changes` override its Settings."""
    return simulate_point(point(text, overrides), **changes)


def messages(text: str, overrides: list[str] = (), **changes) -> dict[str, np.ndarray]:
    return run(text, overrides, **changes).tables["messages"]


def assert_tables_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    """Every column equal, NaN equal to NaN."""
    assert list(a) == list(b)
    for name in a:
        x, y = a[name], b[name]
        assert x.shape == y.shape, name
        if x.dtype.kind == "f":
            assert np.array_equal(x, y, equal_nan=True), name
        else:
            assert np.array_equal(x, y), name


def tables_differ(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    try:
        assert_tables_equal(a, b)
    except AssertionError:
        return True
    return False


def arrivals_per_window(windows, messages, size: float) -> list[tuple[int, int, int]]:
    """For each row of an emulation's windows table (a tumbling time window of `size` s on an
    operator that is its node's sink), (window, count, arrived): `arrived` is how many of the
    messages table's rows reached that node (`sink`) with `t_received` in the window's span
    [window * size, (window + 1) * size). The agent stamps a message's record and its window
    event with the same clock reading, so the two agree however late the host let the messages
    in: a window count's check that no load can break."""
    sink, t_received = np.asarray(messages["sink"]), np.asarray(messages["t_received"])
    got = []
    for window, node, count in zip(windows["window"], windows["node"], windows["count"],
                                   strict=True):
        start = int(window) * size
        arrived = int(((sink == node) & (t_received >= start) & (t_received < start + size))
                      .sum())
        got.append((int(window), int(count), arrived))
    return got
