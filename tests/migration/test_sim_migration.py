"""Operator migration in the model: the thesis's claims, nothing lost, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from foundation.helpers import point, run

from topologies.errors import SpecError

THESIS = """
name: migrate
topology: thesis-azure
workload:
  name: events
  streams: [{{name: events, sources: producer-*, rate: {rate}, arrivals: periodic, size: 100B}}]
pipeline:
  - {{name: count, on: source, reads: events, cost: 5us, window: {{size: {window}}}}}
scenario:
  migration: {{strategy: {strategy}, state_per_event: 84B, store: zookeeper, sync: 2}}
  migrations: [{{at: 20s, operator: count, to: target}}]
run: {{duration: 60s, seed: 3}}
"""


def migrate(strategy: str, rate: str = "100/s", window: str = "5s"):
    return run(THESIS.format(strategy=strategy, rate=rate, window=window))


def windows_by_phase(result) -> dict[str, np.ndarray]:
    windows, migration = result.tables["windows"], result.tables["migrations"]
    start, end = migration["start"][0], migration["end"][0]
    t, count = windows["t"], windows["count"]
    return {"before": count[(t > 5) & (t < start)], "during": count[(t >= start) & (t <= end)],
            "after": count[(t > end) & (t < 55)]}


def test_parallel_migration_keeps_every_windows_throughput():
    """Claim C6-1: per-window counts before, during and after are the same (no downtime)."""
    result = migrate("parallel")
    phases = windows_by_phase(result)
    expected = 4 * 100 * 5  # four producers at 100/s, 5 s windows
    for phase, counts in phases.items():
        assert len(counts), phase
        assert np.all(np.abs(counts - expected) <= 4), (phase, counts)
    migration = result.tables["migrations"]
    assert migration["downtime"][0] == 0.0
    assert (migration["lost"][0], migration["duplicates"][0]) == (0, 0)
    assert migration["target"][0] == "target" and migration["synchronised"][0] != ""


def test_pause_transfer_loses_nothing_and_moves_the_open_window():
    result = migrate("pause_transfer")
    migration = result.tables["migrations"]
    assert migration["held"][0] > 0 and migration["chunks"][0] >= 1
    assert (migration["lost"][0], migration["duplicates"][0]) == (0, 0)
    # Every event emitted before the end of the run was counted exactly once.
    windows = result.tables["windows"]
    assert windows["count"].sum() + 0 <= result.facts["emitted"]
    assert np.all(np.diff(windows["last_sn"]) > 0)
    assert set(windows["node"]) == {"source", "target"}


def test_pause_transfer_downtime_and_state_grow_with_the_event_rate():
    """Claim C5-2: more events per window, more state to carry, longer downtime."""
    figures = []
    for rate in ("500/s", "2000/s", "4000/s"):
        # Mid-window, so the open window holds 5 s of events: 0.8 to 6.7 MB at 84 B each.
        migration = run(THESIS.format(strategy="pause_transfer", rate=rate, window="10s"),
                        ["scenario.migration.chunk_overhead=200ms",
                         "scenario.migration.launch=0s", "scenario.migrations.0.at=25s",
                         "run.duration=35s"]).tables["migrations"]
        figures.append((migration["state_bytes"][0], migration["downtime"][0]))
    states, downtimes = zip(*figures, strict=True)
    assert list(states) == sorted(states) and states[0] < states[-1]
    assert list(downtimes) == sorted(downtimes) and downtimes[-1] > downtimes[0] + 0.2


def test_pause_drain_moves_a_stateless_operator_without_losing_messages():
    text = THESIS.replace("window: {{size: {window}}}", "writes: out").replace(
        "pipeline:\n", "pipeline:\n  - {{name: sink, on: target, reads: out}}\n")
    result = run(text.format(strategy="pause_drain", rate="100/s", window="5s"))
    messages, migration = result.tables["messages"], result.tables["migrations"]
    assert migration["held"][0] > 0 and migration["downtime"][0] > 0
    assert (~messages["lost"]).sum() == result.facts["emitted"]
    assert len(set(messages["id"])) == len(messages["id"])


@pytest.mark.parametrize("strategy, message", [
    ("pause_drain", "keeps window state"), ("parallel", None)])
def test_strategies_that_do_not_fit_the_operator_are_refused(strategy, message):
    text = THESIS.format(strategy=strategy, rate="100/s", window="5s")
    if message is None:  # parallel on a stateless operator
        text = text.replace(", window: {size: 5s}", "")
        message = "no window state"
    with pytest.raises(SpecError) as caught:
        point(text)
    assert "scenario.migrations[0].strategy" in str(caught.value)
    assert message in str(caught.value)


def test_a_migration_to_a_device_is_refused():
    with pytest.raises(SpecError, match="producer-1 is a device"):
        point(THESIS.format(strategy="parallel", rate="100/s", window="5s"),
              ["scenario.migrations.0.to=producer-1"])


def test_same_seed_same_migration_tables():
    a, b = migrate("parallel"), migrate("parallel")
    for table in ("migrations", "windows", "messages"):
        for column, values in a.tables[table].items():
            other = b.tables[table][column]
            if values.dtype.kind == "f":
                assert np.array_equal(values, other, equal_nan=True), (table, column)
            else:
                assert list(values) == list(other), (table, column)


def test_a_migration_from_a_node_the_operator_does_not_run_on_is_refused():
    with pytest.raises(SpecError, match="a node count runs on"):
        point(THESIS.format(strategy="parallel", rate="100/s", window="5s"),
              ["scenario.migrations.0.from=target"])
