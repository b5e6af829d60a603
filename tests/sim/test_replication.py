"""scenario.replication on sim: replicas of an operator over its `slo` start on the nearest
candidate after `up` intervals over the bound, share its input through the broker, and retire
newest first after `down` intervals under half of it; the replicas table's figures are the
messages table's (no containers)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.loader import load
from experiments.schema import TABLES, conform
from sim.model import simulate
from tests.foundation.helpers import point, settings
from workloads.replication import percentile

# A device publishing straight to the broker, three one-core gateways: gw-1 and gw-2 2 ms
# from the broker, gw-3 10 ms. The operator (10 ms a message: 100/s at most) on gw-1 gets
# 150 messages/s for 4 s, then 30/s: gw-1 alone falls behind, then catches up.
STAR = """
name: replicate
topology:
  name: star
  nodes:
    - {name: dev, kind: device}
    - {name: gw, kind: gateway, replicas: 3, profile: vm.small}
    - {name: broker, kind: broker, profile: vm.small}
  links:
    - {from: dev, to: broker, latency: 1ms}
    - {from: broker, to: gw-1, latency: 2ms}
    - {from: broker, to: gw-2, latency: 2ms}
    - {from: broker, to: gw-3, latency: 10ms}
workload:
  name: one
  streams:
    - {name: s, sources: dev, rate: 100/s, arrivals: periodic, size: 100B, qos: 1,
       shape: {kind: bursty, on: 4s, off: 100s, high: 1.5, low: 0.3}}
pipeline:
  - {name: work, on: gw-1, reads: s, cost: 10ms, slo: 50ms}
scenario:
  REPLICATION
run: {duration: 20s, seed: 2, drain: 2s}
"""
SLO = 0.050
# gw-3 listed first: the replica goes to the nearest (gw-2), not to the first.
REPLICATION = "replication: {interval: 1s, up: 2, down: 3, max: MAX, to: [gw-3, gw-2]}"


def command(node: str) -> float:
    """A coordinator command to the node's agent: the broker (the coordinator's node) there
    and back, and MigrationSettings.command's 10 ms."""
    return 2 * {"gw-2": 0.002, "gw-3": 0.010}[node] + 0.010


def simulate_text(max_instances: int | None = 2) -> dict[str, pd.DataFrame]:
    replication = ("replication: null" if max_instances is None
                   else REPLICATION.replace("MAX", str(max_instances)))
    run_point = point(STAR.replace("REPLICATION", replication))
    result = simulate(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                      settings(run_point))
    assert len(result.tables["messages"]["id"]) == result.facts["emitted"]
    tables = conform(result.tables)  # every table passes the schema's checks
    frames = {name: table.to_pandas() for name, table in tables.items()}
    frames["samples"] = pd.DataFrame(result.facts.get("replication", {}).get("samples", []),
                                     columns=["t", "operator", "instances", "latency",
                                              "inputs"])
    return frames


def p95(messages: pd.DataFrame, k: int, nodes=None) -> float:
    """The controller's figure for interval k (from k - 1 to k s): the worst node's 95th
    percentile of the latencies of the inputs it finished in it (the operator is a sink: a
    message's t_received is the end of its processing, its latency from its emission)."""
    done = messages[(messages["t_received"] > k - 1) & (messages["t_received"] <= k)]
    by_node = done.groupby("sink", observed=True)
    return max(percentile(list(group["latency"])) for node, group in by_node
               if nodes is None or node in nodes)


@pytest.fixture(scope="module")
def one_replica():
    return simulate_text(2)


@pytest.fixture(scope="module")
def two_replicas():
    return simulate_text(3)


@pytest.fixture(scope="module")
def none():
    return simulate_text(None)


def test_a_replica_starts_on_the_nearest_candidate_after_up_intervals_over(one_replica):
    rows = one_replica["replicas"].to_dict("records")
    assert [(r["action"], r["node"], r["instances"]) for r in rows] == [
        ("start", "gw-2", 2), ("retire", "gw-2", 1)]
    start = rows[0]
    messages = one_replica["messages"]
    assert p95(messages, 1) > SLO and p95(messages, 2) > SLO  # up = 2 intervals over
    assert start["t"] == pytest.approx(2 + command("gw-2"))
    assert start["latency"] == pytest.approx(p95(messages, 2)) and start["slo"] == SLO
    assert start["operator"] == "work"


def test_every_reading_is_in_the_facts_as_on_emu(one_replica):
    samples = one_replica["samples"]
    messages = one_replica["messages"]
    assert list(samples["t"]) == [float(k) for k in range(1, 21)]  # each second of the run
    assert list(samples["instances"]) == [1] * 2 + [2] * 6 + [1] * 12
    for k in range(1, 9):  # before the retirement: every instance's inputs counted
        done = messages[(messages["t_received"] > k - 1) & (messages["t_received"] <= k)]
        assert samples["inputs"][k - 1] == len(done)
        assert samples["latency"][k - 1] == pytest.approx(p95(messages, k), abs=1e-4)


def test_no_replica_beyond_max(one_replica, two_replicas):
    messages = one_replica["messages"]
    # Over the bound for two more intervals after the start (gw-1's backlog drains), and no
    # second replica with max 2; with max 3 the second goes to gw-3, the one left.
    assert p95(messages, 3) > SLO and p95(messages, 4) > SLO
    assert (one_replica["replicas"]["action"] == "start").sum() == 1
    rows = two_replicas["replicas"].to_dict("records")
    assert [(r["action"], r["node"], r["instances"]) for r in rows] == [
        ("start", "gw-2", 2), ("start", "gw-3", 3), ("retire", "gw-3", 2),
        ("retire", "gw-2", 1)]
    assert rows[1]["t"] == pytest.approx(4 + command("gw-3"))
    assert rows[1]["latency"] == pytest.approx(
        p95(two_replicas["messages"], 4, {"gw-1", "gw-2"}))


def test_a_start_with_no_candidate_left_has_no_row() -> None:
    text = STAR.replace("REPLICATION", "replication: {up: 2, down: 3, max: 4, to: gw-2}")
    run_point = point(text)
    result = simulate(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                      settings(run_point))
    # gw-2 at 2 s; at 4 s (still over) a second is decided, and no node is left for it.
    assert list(result.tables["replicas"]["node"]) == ["gw-2", "gw-2"]
    assert list(result.tables["replicas"]["action"]) == ["start", "retire"]
    assert result.facts["replication"]["unplaced"] == 1


def test_the_input_is_shared_from_the_replicas_start_to_its_retirement(one_replica):
    start, retire = one_replica["replicas"]["t"]
    messages = one_replica["messages"].sort_values("t_sent")
    at_gw2 = messages[messages["sink"] == "gw-2"]
    assert len(at_gw2) > 100 and not messages["lost"].any()
    assert start < at_gw2["t_received"].min() and at_gw2["t_received"].max() < retire + 0.1
    # Each message reaches one instance, the broker's next in turn: between the replica's
    # first and last message, the two take turns exactly.
    first, last = at_gw2["t_sent"].min(), at_gw2["t_sent"].max()
    between = messages[(messages["t_sent"] >= first) & (messages["t_sent"] <= last)]
    sinks = list(between["sink"])
    assert sinks[::2] == ["gw-2"] * len(sinks[::2])
    assert sinks[1::2] == ["gw-1"] * len(sinks[1::2])
    assert len(at_gw2) == len(sinks[::2])


def test_the_latency_falls_and_the_replica_retires_after_down_intervals_under(one_replica,
                                                                              none):
    with_replica, without = one_replica["messages"], none["messages"]
    # Without replication gw-1 needs until 7 s to catch up; the replica halves it.
    assert [p95(without, k) > SLO for k in range(1, 9)] == [True] * 7 + [False]
    assert [p95(with_replica, k) > SLO for k in range(1, 9)] == [True] * 5 + [False] * 3
    # Under half the bound from interval 6 on: the retirement at 8 s (down = 3), one command
    # later, decided by interval 8's figure over both instances.
    assert all(p95(with_replica, k) < SLO / 2 for k in range(6, 9))
    retire = one_replica["replicas"].iloc[1]
    assert retire["t"] == pytest.approx(8 + command("gw-2"))
    assert retire["latency"] == pytest.approx(p95(with_replica, 8))
    assert set(with_replica.loc[with_replica["t_received"] > retire["t"] + 0.1, "sink"]) == {
        "gw-1"}


def test_without_replication_no_replicas_and_the_same_messages(one_replica, none):
    assert none["replicas"].empty
    assert list(none["replicas"].columns) == TABLES["replicas"].names
    assert set(none["messages"]["sink"]) == {"gw-1"}
    assert len(none["messages"]) == len(one_replica["messages"])


def phases(messages: pd.DataFrame) -> dict[str, float]:
    """The operator's latency (95th percentile, s) before, during and after the burst."""
    t = messages["t_sent"]
    spans = {"before": (0, 20), "burst": (20, 32), "burst, replicas up": (26, 32),
             "after": (32, 50)}
    return {name: percentile(list(messages.loc[(t >= a) & (t < b), "latency"]))
            for name, (a, b) in spans.items()}


def test_the_shipped_experiment() -> None:
    experiment = load("replication-burst")
    (run_point,) = experiment.points
    tables = {}
    scenario = settings(run_point).scenario
    without = {key: spec for key, spec in scenario.items() if key != "replication"}
    for name, changes in (("with", {}), ("without", {"scenario": without})):
        result = simulate(run_point.topology, run_point.spec.workload,
                          run_point.spec.pipeline, settings(run_point, **changes))
        tables[name] = {k: v.to_pandas() for k, v in conform(result.tables).items()}
    rows = tables["with"]["replicas"]
    command_s = 2 * 0.002 + 0.010
    assert [(r.action, r.node, r.instances) for r in rows.itertuples()] == [
        ("start", "gw-2", 2), ("start", "gw-3", 3), ("retire", "gw-3", 2),
        ("retire", "gw-2", 1)]
    assert list(rows["t"]) == pytest.approx([22 + command_s, 24 + command_s,
                                             34 + command_s, 44 + command_s])
    assert (rows["latency"].iloc[:2] > 0.05).all() and (rows["latency"].iloc[2:] < 0.025).all()
    with_, without = phases(tables["with"]["messages"]), phases(tables["without"]["messages"])
    assert with_["before"] < 0.025 and without["before"] < 0.025
    assert with_["burst, replicas up"] < 0.025 < 1.0 < without["burst, replicas up"]
    assert with_["after"] < 0.025 and without["after"] > 0.05  # the backlog until ~35 s
    messages = tables["with"]["messages"]
    assert not messages["lost"].any()
    counts = messages["sink"].value_counts()
    assert counts["gw-2"] > counts["gw-3"] > 0
    assert np.isclose(counts.sum(), len(tables["without"]["messages"]))
