"""scenario.broker_scaling as written and checked against the topology, and the controller's
decision and mover rule that sim and emu share (workloads.broker_scaling)."""

from __future__ import annotations

import pytest

from experiments.loader import parse_text
from topologies.errors import SpecError
from topologies.routing import Routes
from workloads.broker_scaling import (
    BrokerScalingSpec,
    Scaler,
    first_brokers,
    movers,
    resolve,
)

# broker-3 is an island: no link, so no route to any other broker.
FILE = """
name: b
topology:
  name: b
  nodes:
    - {name: sensor, kind: device, replicas: 2}
    - {name: gw, kind: gateway, replicas: 4}
    - {name: broker, kind: broker, replicas: 3}
  links:
    - {from: sensor-*, to: gw-1, latency: 2ms}
    - {from: gw-*, to: broker-1, latency: 5ms}
    - {from: gw-1, to: broker-2, latency: 8ms}
    - {from: gw-2, to: broker-2, latency: 2ms}
    - {from: gw-3, to: broker-2, latency: 2ms}
    - {from: gw-4, to: broker-2, latency: 4ms}
workload:
  name: w
  streams: [{name: s, sources: sensor-*, rate: 10/s}]
pipeline:
  - {name: work, on: gw-1, reads: s}
scenario:
  broker_scaling: ENTRIES
run: {backend: sim, duration: 10s}
"""
GOOD = "{broker: broker-1, spare: broker-2, bound: 20ms}"


def _load(entries: str = f"[{GOOD}]"):
    return parse_text(FILE.replace("ENTRIES", entries))


def _error(entries: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        _load(entries)
    return caught.value


def test_a_good_entry_loads_with_the_defaults() -> None:
    (point,) = _load().points
    (spec,) = point.spec.scenario.broker_scaling
    assert (spec.bound, spec.interval, spec.probe, spec.up, spec.share) == (
        pytest.approx(0.02), 1.0, pytest.approx(0.1), 2, 0.5)
    planned = resolve([spec], point.topology)
    assert planned.spares == {"broker-2"}
    assert first_brokers(point.topology, planned.spares) == ["broker-1", "broker-3"]


@pytest.mark.parametrize(("entries", "field", "value", "says"), [
    ("[{broker: broker-9, spare: broker-2, bound: 1ms}]", "broker", "broker-9",
     "a node of kind broker"),
    ("[{broker: broker-1, spare: gw-2, bound: 1ms}]", "spare", "gw-2", "a node of kind broker"),
    ("[{broker: broker-1, spare: broker-1, bound: 1ms}]", "spare", "broker-1",
     "other than the one watched"),
    ("[{broker: broker-1, spare: broker-3, bound: 1ms}]", "spare", "broker-3",
     "a broker with a route to broker-1"),
])
def test_a_bad_entry_is_refused_naming_its_field(entries, field, value, says) -> None:
    error = _error(entries)
    assert error.path == ("scenario", "broker_scaling", 0, field)
    assert error.value == value and says in str(error)


def test_a_spare_named_twice_or_watched_by_another_entry_is_refused() -> None:
    twice = _error(f"[{GOOD}, {{broker: broker-3, spare: broker-2, bound: 1ms}}]")
    assert twice.path == ("scenario", "broker_scaling", 1, "spare")
    assert "one entry only" in str(twice)
    watched = _error(f"[{GOOD}, {{broker: broker-2, spare: broker-3, bound: 1ms}}]")
    # Entry 0's spare broker-2 is watched by entry 1: refused at entry 0, which names it.
    assert watched.path == ("scenario", "broker_scaling", 0, "spare")
    assert watched.value == "broker-2" and "not watched" in str(watched)


def test_a_bad_field_value_is_refused_by_the_schema() -> None:
    with pytest.raises(SpecError) as caught:
        _load("[{broker: broker-1, spare: broker-2, bound: 20ms, share: 1.5}]")
    assert "share" in str(caught.value)
    with pytest.raises(SpecError) as caught:
        _load("[{broker: broker-1, spare: broker-2, bound: 20ms, up: 0}]")
    assert "up" in str(caught.value)


def test_the_spare_joins_after_up_intervals_over_in_a_row_and_once() -> None:
    scaler = Scaler(BrokerScalingSpec(broker="b1", spare="b2", bound=0.02, up=3))
    assert [scaler.observe(d) for d in (0.03, 0.03, 0.01)] == [False] * 3  # reset under
    assert [scaler.observe(d) for d in (0.03, 0.02, 0.03)] == [False] * 3  # at is not over
    assert [scaler.observe(d) for d in (0.03, None)] == [False, True]  # None counts as over
    assert scaler.joined
    assert [scaler.observe(1.0) for _ in range(5)] == [False] * 5  # an entry acts once


def _routes() -> Routes:
    return Routes(_load().points[0].topology)


@pytest.mark.parametrize(("share", "moved"), [
    (0.25, ["gw-2"]),  # ceil(0.25 x 4) = 1, the nearest to broker-2
    (0.5, ["gw-2", "gw-3"]),  # equally near: in the publishers' order
    (0.6, ["gw-2", "gw-3", "gw-4"]),  # ceil(2.4) = 3
    (1.0, ["gw-2", "gw-3", "gw-4", "gw-1"]),
    (0.01, ["gw-2"]),  # at least one
])
def test_movers_are_the_ceiling_of_the_share_nearest_the_spare_first(share, moved) -> None:
    publishers = ["gw-1", "gw-2", "gw-3", "gw-4"]
    assert movers(publishers, "broker-2", share, _routes()) == moved


def test_publishers_with_no_route_to_the_spare_stay() -> None:
    # broker-3 has no link: nobody reaches it, and nobody moves.
    assert movers(["gw-1", "gw-2"], "broker-3", 1.0, _routes()) == []
