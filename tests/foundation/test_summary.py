"""The run summary of a migration still under way at the end of a run: no end, no execution,
and no crash (thesis-ch6-sync at 45 s on sim stopped the run's summary)."""

from __future__ import annotations

import math

import pyarrow as pa

from experiments.schema import conform
from experiments.summary import summarise
from foundation.helpers import run

UNFINISHED = """
name: unfinished
topology:
  name: t
  nodes:
    - {name: s, kind: device}
    - {name: gw, kind: gateway, replicas: 2}
    - {name: broker, kind: broker}
  links:
    - {from: s, to: gw-1, latency: 1ms}
    - {from: gw-*, to: broker, latency: 1ms}
workload:
  name: w
  streams: [{name: e, sources: s, rate: 10/s}]
pipeline:
  - {name: count, on: gw-1, reads: e, window: {size: 2s}}
scenario:
  migration: {strategy: parallel, launch: 30s}
  migrations: [{at: 5s, operator: count, to: gw-2}]
run: {duration: 10s, drain: 1s, seed: 1}
"""


def test_a_migration_under_way_at_the_end_has_no_execution():
    result = run(UNFINISHED)
    tables = conform(result.tables)
    (row,) = summarise(tables, 10.0, 1.0)["migrations"]
    assert row["start"] == 5.0 and row["end"] is None and row["execution"] is None


def test_a_node_taken_for_dead_without_a_crash_is_a_warning() -> None:
    from experiments.summary import suspicion_warnings

    recoveries = pa.table({"node": ["gw-1", "gw-1", "gw-3"], "operator": ["a", "b", "c"],
                           "t_crash": [math.nan, math.nan, 10.5],
                           "t_detected": [1.74, 1.74, 12.3]})
    (line,) = suspicion_warnings(recoveries)
    assert line.startswith("gw-1 was taken for dead at 1.74 s with no crash scheduled")
    assert "session_timeout" in line
    assert suspicion_warnings(recoveries.slice(2)) == []
    assert suspicion_warnings(None) == []
