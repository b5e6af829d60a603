"""Re-placement at run time on the containers (`placement.replace` on emu, issue 42): the
gateways' counts read every period, the policy asked, and its moves made by the agents'
migrations, as the model makes them (tests/placement/test_replace.py runs the same case on
sim)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from experiments.runner import run_experiment
from tests.conftest import build_experiment
from tests.engine import docker_engine

pytestmark = pytest.mark.emu

# The model's case scaled to what QEMU gateways send at ease: gw-1's 2 sensors at 10/s each,
# 30/s from 10 s to 20 s; gw-2's 2 at 10/s. A filter of 50 ms a reading (the model's cost,
# which the policy weighs): 20/s is 1.0 of a Pi 4's 1.8, the burst's 60/s is 3.0, which only
# the cloud VM (4.0) holds. The uplink's 100 ms make the gateways worth coming back to (the
# answer is weighed by the objective: a Pi takes 111 ms of a 50 ms reference cost, the cloud
# VM 50 ms, so over a 20 ms uplink the cloud VM would be the better place, and the move back
# would be refused).
EXPERIMENT = {
    "name": "replaced-emu",
    "topology": {
        "name": "two-districts",
        "nodes": [{"name": "a", "kind": "device", "replicas": 2},
                  {"name": "b", "kind": "device", "replicas": 2},
                  {"name": "gw-1", "kind": "gateway", "profile": "rpi4"},
                  {"name": "gw-2", "kind": "gateway", "profile": "rpi4"},
                  {"name": "broker-1", "kind": "broker", "profile": "vm.medium"},
                  {"name": "cloud-1", "kind": "cloud_vm", "profile": "vm.large"}],
        "links": [{"from": "a-*", "to": "gw-1", "latency": "5ms"},
                  {"from": "b-*", "to": "gw-2", "latency": "5ms"},
                  {"from": "gw-*", "to": "broker-1", "latency": "100ms"},
                  {"from": "broker-1", "to": "cloud-1", "latency": "1ms"}]},
    "workload": {"name": "two", "streams": [
        {"name": "busy", "sources": "a-*", "rate": "10/s", "arrivals": "periodic",
         "size": "100B", "shape": {"kind": "bursty", "on": "10s", "off": "10s", "high": 1,
                                   "low": 3}},
        {"name": "calm", "sources": "b-*", "rate": "10/s", "arrivals": "periodic",
         "size": "100B"}]},
    "pipeline": [{"name": "filter", "task": "passthrough", "on": "auto",
                  "reads": ["busy", "calm"], "writes": "kept", "cost": "50ms"},
                 {"name": "store", "on": "cloud-1", "reads": "kept", "cost": "50us"}],
    "placement": {"policy": "edge-ward", "replace": {"period": "2s"}},
    "run": {"backend": "emu", "duration": "30s", "seed": 7, "drain": "2s"},
}


def test_a_burst_moves_the_filter_north_and_back_on_the_containers_as_on_the_model(
        tmp_path) -> None:
    docker_engine()
    found = {}
    for backend in ("sim", "emu"):
        (outcome,) = run_experiment(build_experiment(EXPERIMENT, [f"run.backend={backend}"]),
                                    tmp_path / backend)
        assert outcome.error is None, outcome.error
        found[backend] = outcome.folder
    moves = {backend: pd.read_parquet(folder / "migrations.parquet")
             for backend, folder in found.items()}
    route = ["operator", "source", "target", "status"]
    expected = [["filter", "gw-1", "cloud-1", "done"], ["filter", "cloud-1", "gw-1", "done"]]
    assert moves["sim"][route].values.tolist() == expected
    assert moves["emu"][route].values.tolist() == expected
    # Decided at the first period that saw the burst, and the first that saw it end (a
    # ping's rates lag by one period at most on a loaded host).
    assert moves["emu"]["start"].between([12.0, 22.0], [14.5, 24.5]).all(), moves["emu"]
    steps = pd.read_parquet(found["emu"] / "replacements.parquet")
    assert steps["t"].tolist() == [2.0 * k for k in range(1, 15)]
    assert steps["taken"].sum() == 2
    # The observation is the gateways' counts: 20/s at each gateway, 60/s at gw-1's burst.
    seen = [dict(((s, n), r) for s, n, r in json.loads(o)["rates"])
            for o in steps["observation"]]
    assert 15 <= seen[2][("calm", "gw-2")] <= 25 and 45 <= seen[6][("busy", "gw-1")] <= 75
    manifest = json.loads((found["emu"] / "manifest.json").read_text())
    assert manifest["facts"]["replacement"]["moves"] == 2
    assert manifest["facts"]["replacement"]["errors"] == []
