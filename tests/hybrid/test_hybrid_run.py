"""The hybrid backend on real containers: a user walks from one gateway's range to another's
while the real-time model drives the emulation."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from experiments.loader import parse_text
from experiments.runner import run_experiment

pytestmark = [pytest.mark.emu, pytest.mark.slow]

WALK = """
name: walk
topology:
  name: street
  nodes:
    - {{name: phone, kind: device}}
    - {{name: gw-a, kind: gateway, position: [0, 0]}}
    - {{name: gw-b, kind: gateway, position: [300, 0]}}
    - {{name: broker, kind: broker}}
  links:
    - {{from: [gw-a, gw-b], to: broker, latency: 5ms}}
workload:
  name: telemetry
  streams: [{{name: pos, sources: phone, rate: 10/s, arrivals: periodic, size: 100B, qos: 1,
              channel: exclusive}}]
pipeline:
  - {{name: sink, on: gw-a, reads: pos}}
  - {{name: track, follow: users, on: gateways, reads: pos, window: {{size: 2s}}}}
scenario:
  mobility:
    model: {{kind: trace, path: {trace}}}
    radio: {{range: 200, latency: [5ms, 45ms], bandwidth: [10Mbit, 10Mbit], loss: 0}}
    handover: {{hysteresis: 10, min_dwell: 1s}}
    update: 500ms
    record: 1s
  policy: {{operator: track, kind: nearest_gateway, fallback: [gw-a]}}
  migration: {{strategy: pause_transfer}}
run: {{backend: hybrid, duration: 24s, seed: 1, drain: 3s}}
"""


@pytest.fixture
def trace(tmp_path):
    """Near gateway A for 6 s, then at 20 m/s to gateway B (the handover past 155 m), then
    standing at B."""
    path = tmp_path / "walk.csv"
    path.write_text("time,x,y\n0,0,0\n6,0,0\n21,300,0\n40,300,0\n")
    return path


@pytest.fixture(scope="module")
def client():
    from engine import docker_engine

    return docker_engine()


# `alone`: the real-time model must keep up with the wall clock (its lag's p99 under 50 ms), which
# a host shared with other test files does not give it; `make test` runs it after the others.
@pytest.mark.alone
def test_a_walking_users_radio_and_handover_act_on_the_containers(tmp_path, trace, client):
    experiment = parse_text(WALK.format(trace=trace))
    (outcome,) = run_experiment(experiment, tmp_path / "out")
    assert outcome.error is None, outcome.error
    folder = outcome.folder
    handovers = pq.read_table(folder / "handovers.parquet").to_pydict()
    assert handovers["source"] == ["gw-a"] and handovers["target"] == ["gw-b"]
    assert handovers["ok"] == [True]
    # Past the midpoint plus the hysteresis at 20 m/s: 6 + 155 / 20 = 13.75 s.
    assert 13.0 <= handovers["t"][0] <= 15.0
    messages = pq.read_table(folder / "messages.parquet").to_pandas()
    # Every reading arrives once at each sink (the sink on gw-a, and the follow operator,
    # a sink too): none lost, none twice, across the handover and the migration.
    assert messages["id"].nunique() >= 0.95 * 24 * 10
    assert not messages["lost"].any() and not messages.duplicated(["id", "sink"]).any()
    at_sink = messages[messages["sink"] == "gw-a"]
    # The radio's latency on the container path, read where it is alone: before the handover
    # the sink on gw-a takes the readings in its agent, so a reading's latency is the radio's
    # (5 + 40 * d / 200 ms) plus the agent's scheduling, which a loaded host only adds to:
    # compare the floors (10th percentiles) near A and 100-150 m away. The radio loses nothing
    # here (loss: 0): the device's link is no MQTT leg that QoS 1 would resend on.
    def floor(first: float, last: float) -> float:
        return at_sink.loc[at_sink["t_sent"].between(first, last), "latency"].quantile(0.1)

    near, far = floor(0.5, 5.5), floor(11.0, 13.5)
    assert near == pytest.approx(0.005, abs=0.004)
    assert far - near == pytest.approx(0.040 * (12.25 - 6) * 20 / 200, abs=0.006)
    positions = pq.read_table(folder / "positions.parquet").to_pydict()
    assert positions["gateway"][0] == "gw-a" and positions["gateway"][-1] == "gw-b"
    # The policy moved the user's follow instance to its new gateway, with its window state,
    # on the real containers, after the handover; its windows counted every reading once.
    migrations = pq.read_table(folder / "migrations.parquet").to_pydict()
    assert migrations["operator"] == ["track@phone"]
    assert (migrations["source"], migrations["target"]) == (["gw-a"], ["gw-b"])
    assert migrations["start"][0] >= handovers["t"][0]
    assert (migrations["lost"], migrations["duplicates"]) == ([0], [0])
    windows = pq.read_table(folder / "windows.parquet").to_pandas()
    track = windows[windows["operator"] == "track@phone"]
    assert set(track["node"]) == {"gw-a", "gw-b"}
    assert track["count"].sum() >= messages["id"].nunique() - 2 * 10 * 2  # but the last
    manifest = json.loads((folder / "manifest.json").read_text())
    hybrid = manifest["facts"]["hybrid"]
    assert hybrid["handovers"] == 1 and hybrid["actions_failed"] == 0
    assert hybrid["migrations"] == 1 and "migration" in hybrid["couplings"]
    assert hybrid["lag"]["lag_p99_ms"] < 50
    assert np.isfinite(hybrid["decision_to_action_ms_p95"])


def test_an_overloaded_model_stops_the_run_with_the_lag_error_and_leaves_nothing(
        tmp_path, trace, client, monkeypatch):
    from emu.engines.docker.engine import Cluster
    from experiments.hybrid.links import RadioLinks

    clusters = []
    up = Cluster.up

    def noted(self, *args, **kwargs):
        clusters.append(self.name)
        return up(self, *args, **kwargs)

    def heavy(self, t):  # a step that takes longer than the model time it covers
        import time

        time.sleep(1.5)

    monkeypatch.setattr(Cluster, "up", noted)
    monkeypatch.setattr(RadioLinks, "step", heavy)
    experiment = parse_text(WALK.format(trace=trace))
    (outcome,) = run_experiment(experiment, tmp_path / "out")
    assert outcome.status == "failed"
    assert "behind the wall clock" in outcome.error and "fewer simulated" in outcome.error
    assert clusters
    left = client.containers.list(all=True, filters={"label": f"foglab.cluster={clusters[0]}"})
    networks = client.networks.list(filters={"label": f"foglab.cluster={clusters[0]}"})
    assert left == [] and networks == []
