"""Every reading a run emits ends in one state (delivered, filtered, lost, in flight), on every
shipped experiment; a node that cannot keep up is named."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from experiments.catalog import names
from experiments.loader import load
from experiments.schema import conform
from experiments.summary import summarise
from tests.foundation.helpers import simulate_point

# Shorter or lighter where the shipped run takes long; every run on the model.
LIGHTER = {
    "quickstart": ["run.duration=60s"],
    "thesis-ch5-window": ["workload.streams.0.rate=200/s", "run.drain=5s"],
    "thesis-ch5-rate": ["workload.streams.0.rate=200/s", "run.drain=5s"],
}


def _run(name: str, overrides: list[str]):
    experiment = load(name, overrides=["run.backend=sim", *overrides])
    point = experiment.points[0]
    result = simulate_point(point)
    tables = conform(result.tables)
    return result, tables, summarise(tables, point.spec.run.duration, point.spec.run.sample,
                                     result.facts)


@pytest.mark.parametrize("name", names("experiment"))
def test_every_emitted_reading_ends_in_one_state(name: str) -> None:
    result, tables, summary = _run(name, LIGHTER.get(name, []))
    emitted = result.facts["emitted"]
    assert summary["emitted"] == emitted > 0
    assert (summary["delivered"] + summary["filtered"] + summary["lost"]
            + summary["in_flight"]) == emitted
    messages = tables["messages"]
    state = messages.column("state").cast(pa.string()).to_numpy(zero_copy_only=False)
    lost = messages.column("lost").to_numpy(zero_copy_only=False)
    assert np.array_equal(lost, state == "lost")  # `lost` means lost only


def test_a_saturated_run_counts_its_queued_readings_in_flight_and_names_its_nodes() -> None:
    # The case: 150 ms of CPU per reading on the gateways, ten times what they have.
    result, tables, summary = _run("quickstart", ["pipeline.0.cost=150ms", "run.duration=30s"])
    assert summary["emitted"] == result.facts["emitted"]
    assert summary["in_flight"] > summary["delivered"] > 0
    assert summary["lost"] < 0.02 * summary["emitted"]  # a link's loss only, not the backlog
    assert sorted(result.facts["saturated"]) == ["gw-1", "gw-2", "gw-3", "gw-4"]
    assert all(row["queue_end"] > 500 for row in result.facts["saturated"].values())


def test_a_run_that_keeps_up_is_not_saturated_and_has_little_in_flight() -> None:
    result, _, summary = _run("quickstart", ["run.duration=30s"])
    assert "saturated" not in result.facts
    assert summary["in_flight"] < 0.01 * summary["emitted"]


def test_selectivity_filters_and_the_rows_say_where() -> None:
    result, tables, summary = _run("quickstart", ["run.duration=30s"])
    counted = Counter(tables["messages"].column("state").cast(pa.string()).to_pylist())
    # range_filter keeps 95 %: about 5 % filtered, each a row of its own.
    assert counted["filtered"] == summary["filtered"]
    assert 0.04 < summary["filtered"] / summary["emitted"] < 0.06


def test_a_link_fed_by_a_stalled_broker_is_never_less_than_idle() -> None:
    """A kafka-like broker's flush holds its sends; the link is handed them for after the
    stall, and its samples must not count that idle wait as queued work (it made an interval's
    utilisation negative, which the schema refuses)."""
    _, tables, _ = _run("iotcloud-brokers", [
        "run.duration=10s", "topology.nodes.0.replicas=10",
        "topology.nodes.2.broker.model=kafka-like", "workload.streams.0.size=200KB"])
    links = tables["links"].to_pandas()
    assert (links["utilisation"] >= 0).all()
    # Busy while it serialised, not while it waited for the stall's end: 50 MB a second on
    # 1 Gbit/s is 0.4 of each second.
    lan = links[links["link"] == "broker-1>lan"]
    assert (lan["bytes"] == 50_000_000).sum() >= 8
    assert lan["utilisation"].median() == pytest.approx(0.4, abs=0.002)
    assert lan["utilisation"].max() <= 1.0
