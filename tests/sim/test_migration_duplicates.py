"""A migration's `duplicates` counts what its own operator consumed twice (sim.duplicates):
not what another operator moved between the same two nodes consumed twice, nor a reading
that two unrelated operators on those nodes each consumed once."""

from __future__ import annotations

import math

import numpy as np

from sim.duplicates import Span, count_twice
from sim.windowed import WindowedInstance
from tests.foundation.helpers import run

TWO_GATEWAYS = """
name: two-counts
topology:
  name: two-gateways
  nodes:
    - {{name: sensor, kind: device, replicas: 4}}
    - {{name: gw, kind: gateway, replicas: 2, profile: rpi4}}
    - {{name: broker, kind: broker}}
  links:
    - {{from: sensor-*, to: gw-1, latency: 2ms}}
    - {{from: gw-*, to: broker, latency: 5ms, bandwidth: 100Mbit}}
workload:
  name: readings
  streams:
    - {{name: a, sources: [sensor-1, sensor-2], rate: 150/s, arrivals: periodic, size: 100B,
       qos: 1}}
    - {{name: b, sources: [sensor-3, sensor-4], rate: 90/s, arrivals: periodic, size: 100B,
       qos: 1}}
pipeline:
{pipeline}
scenario:
  migration: {{strategy: parallel, sync: 2}}
  migrations: [{migrations}]
run: {{duration: 40s, seed: 3, drain: 3s}}
"""


def _twice(messages: dict, stream: str) -> int:
    rows = (messages["state"] == "delivered") & (messages["stream"] == stream)
    _, counts = np.unique(messages["id"][rows], return_counts=True)
    return int((counts - 1).sum())


def test_two_operators_moved_between_the_same_nodes_count_their_own(monkeypatch) -> None:
    # Each target records again what its source recorded (as in test_parallel_duplicates):
    # both moves consume some readings twice, each of its own stream. Counted per node pair,
    # each migration had both operators' duplicates (6 and 6).
    monkeypatch.setattr(WindowedInstance, "counted_to", lambda self: -1)
    pipeline = """
  - {name: count-a, on: gw-1, reads: a, window: {size: 5s}}
  - {name: count-b, on: gw-1, reads: b, window: {size: 5s}}"""
    result = run(TWO_GATEWAYS.format(pipeline=pipeline, migrations=(
        "{at: 20s, operator: count-a, to: gw-2}, {at: 20s, operator: count-b, to: gw-2}")))
    messages, migrations = result.tables["messages"], result.tables["migrations"]
    twice = [_twice(messages, "a"), _twice(messages, "b")]
    assert list(migrations["operator"]) == ["count-a", "count-b"]
    assert min(twice) > 0 and twice[0] != twice[1]
    assert list(migrations["duplicates"]) == twice


def test_a_reading_two_unrelated_operators_consume_once_each_is_no_duplicate() -> None:
    # keep-b on gw-1 and tally-b on gw-2 both consume every reading of b, once each; count-a
    # moves between those two nodes. Counted per node pair, each reading of b delivered
    # during the move was one of count-a's duplicates.
    pipeline = """
  - {name: count-a, on: gw-1, reads: a, window: {size: 5s}}
  - {name: keep-b, on: gw-1, reads: b}
  - {name: tally-b, on: gw-2, reads: b}"""
    result = run(TWO_GATEWAYS.format(pipeline=pipeline,
                                     migrations="{at: 20s, operator: count-a, to: gw-2}"))
    messages, migrations = result.tables["messages"], result.tables["migrations"]
    assert _twice(messages, "b") > 1000  # what a per-node-pair count would add
    assert _twice(messages, "a") == 0
    assert list(migrations["duplicates"]) == [0]


def _reference(messages: dict, span: Span) -> int:
    """The count by one mask over the whole table per migration, as it was first written."""
    sink, t = messages["sink"], messages["t_received"]
    mine = np.isin(sink, list(span.nodes)) & (t >= span.start) & (t <= span.stop)
    if span.streams is not None:
        mine &= np.isin(messages["stream"], list(span.streams))
    if span.source is not None:
        mine &= messages["source"] == span.source
    _, counts = np.unique(messages["id"][mine], return_counts=True)
    return int((counts - 1).sum())


def test_the_sorted_count_agrees_with_a_mask_per_migration() -> None:
    rng = np.random.default_rng(7)
    n = 4000
    delivered = rng.random(n) < 0.9
    nodes = np.array(["gw-1", "gw-2", "gw-3", "vm-1"], dtype=object)
    messages = {
        "id": rng.integers(0, 600, n),  # most ids repeat
        "sink": np.where(delivered, nodes[rng.integers(0, 4, n)], None),
        "t_received": np.where(delivered, rng.integers(0, 100, n) / 2.0, math.nan),
        "stream": np.array(["a", "b", "c"], dtype=object)[rng.integers(0, 3, n)],
        "source": np.array([f"sensor-{i}" for i in range(6)], dtype=object)[
            rng.integers(0, 6, n)],
    }
    spans = [Span(("gw-1", "gw-2"), 10.0, 20.0), Span(("gw-2", "gw-2"), 0.0, math.inf),
             Span(("gw-1", "vm-1"), 5.5, 7.5), Span(("gw-3", "gw-9"), 30.0, 49.5,
                                                    frozenset({"a", "c"})),
             Span(("gw-1", "gw-3"), 0.0, 40.0, None, "sensor-2"),
             Span(("gw-2", "vm-1"), 0.0, 50.0, frozenset({"b"}), "sensor-5"),
             Span(("gw-9",), 0.0, 50.0), Span(("gw-1", "gw-2"), 0.0, 50.0, None, "sensor-9")]
    assert count_twice(messages, spans) == [_reference(messages, s) for s in spans]
    assert min(count_twice(messages, spans[:6])) > 0
