"""scenario.replication and an operator's slo as written, and the controller's decision that
sim and emu share (workloads.replication)."""

from __future__ import annotations

import pytest

from experiments.loader import parse_text
from topologies.errors import SpecError
from workloads.replication import ReplicationSpec, Scaler, percentile

FILE = """
name: r
topology:
  name: r
  nodes:
    - {name: sensor, kind: device, replicas: 2}
    - {name: gw, kind: gateway, replicas: 2}
    - {name: broker, kind: broker}
  links:
    - {from: sensor-*, to: gw-1, latency: 2ms}
    - {from: gw-*, to: broker, latency: 5ms}
workload:
  name: w
  streams: [{name: s, sources: sensor-*, rate: 10/s}]
pipeline:
  - {name: work, on: gw-1, reads: s, OPERATOR}
scenario:
  replication: REPLICATION
run: {backend: sim, duration: 10s}
"""


def _load(operator: str = "slo: 50ms", replication: str = "{}"):
    return parse_text(FILE.replace("OPERATOR", operator).replace("REPLICATION", replication))


def _error(**kwargs) -> SpecError:
    with pytest.raises(SpecError) as caught:
        _load(**kwargs)
    return caught.value


def test_a_good_file_loads_with_the_defaults() -> None:
    (point,) = _load().points
    assert point.spec.pipeline[0].slo == pytest.approx(0.05)
    spec = point.spec.scenario.replication
    assert (spec.interval, spec.up, spec.down, spec.max) == (1.0, 2, 5, 4)


def test_an_slo_on_a_window_is_refused_naming_the_operator() -> None:
    error = _error(operator="slo: 50ms, window: {size: 2s}")
    assert error.path == ("pipeline", 0, "slo") and "'work'" in str(error)


def test_replication_without_any_slo_or_onto_a_broker_is_refused() -> None:
    assert _error(operator="cost: 1ms").path == ("scenario", "replication")
    error = _error(replication="{to: broker}")
    assert error.path == ("scenario", "replication", "to", 0) and "a broker" in str(error)


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values) == 95.0 and percentile([3.0]) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0]) == 4.0  # rank ceil(3.8) = 4


def test_a_replica_starts_after_up_intervals_over_and_retires_after_down_under() -> None:
    scaler = Scaler(ReplicationSpec(up=2, down=3, max=3), slo=0.05)
    assert scaler.observe(0.06, 1) is None
    assert scaler.observe(0.04, 1) is None  # between half the bound and the bound: reset
    assert scaler.observe(0.06, 1) is None
    assert scaler.observe(0.07, 1) == "start"
    assert scaler.observe(0.08, 2) is None  # the counts start again after a decision
    assert scaler.observe(0.08, 2) == "start"
    assert [scaler.observe(0.09, 3) for _ in range(4)] == [None] * 4  # at max
    assert [scaler.observe(None, 3) for _ in range(3)] == [None, None, "retire"]
    assert [scaler.observe(0.01, 2) for _ in range(3)] == [None, None, "retire"]
    assert [scaler.observe(0.01, 1) for _ in range(5)] == [None] * 5  # the first stays
