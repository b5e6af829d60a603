"""The run summary of a migration still under way at the end of a run: no end, no execution,
and no crash (thesis-ch6-sync at 45 s on sim stopped the run's summary)."""

from __future__ import annotations

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
