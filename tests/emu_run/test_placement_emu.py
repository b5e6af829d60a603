"""A placement policy's decision runs alike on the containers and on the model (issue 42): the
same `placements.parquet` decision columns for one seed, and the containers run the operator
where the policy put it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from experiments.runner import run_experiment
from tests.conftest import build_experiment, two_gateway_topology
from tests.engine import docker_engine

pytestmark = pytest.mark.emu

# Four sensors on each of two Pi gateways; `relay` is the policy's (edge-ward: 2 readings/s x
# 4 sensors x 1 ms fits a Pi, so one instance on each gateway, where the readings enter),
# `sink` is pinned on the cloud VM.
EXPERIMENT = {
    "name": "placed-emu",
    "topology": two_gateway_topology("placed-emu", {"s": (8, {"latency": "5ms"})}),
    "workload": {"name": "w", "streams": [{"name": "city", "sources": "s-*", "rate": "2/s",
                                           "arrivals": "periodic", "size": "100B"}]},
    "pipeline": [{"name": "relay", "on": "auto", "reads": "city", "writes": "clean",
                  "cost": "1ms"},
                 {"name": "sink", "on": "cloud-1", "reads": "clean"}],
    "placement": {"policy": "edge-ward"},
    "run": {"duration": "6s", "seed": 5, "drain": "2s"},
}
DECISION = ["operator", "nodes", "policy", "objective", "reason"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    docker_engine()
    out = tmp_path_factory.mktemp("placed")
    found = {}
    for backend in ("sim", "emu"):
        (outcome,) = run_experiment(build_experiment(EXPERIMENT, [f"run.backend={backend}"]),
                                    out / backend)
        assert outcome.error is None, outcome.error
        found[backend] = (outcome, pd.read_parquet(outcome.folder / "placements.parquet"))
    return found


def test_the_decision_columns_are_equal_on_sim_and_emu(runs) -> None:
    (_, on_sim), (_, on_emu) = runs["sim"], runs["emu"]
    assert len(on_sim) == 2
    pd.testing.assert_frame_equal(on_sim[DECISION].sort_values("operator", ignore_index=True),
                                  on_emu[DECISION].sort_values("operator", ignore_index=True))
    assert on_sim.set_index("operator")["nodes"].to_dict() == {"relay": "gw-1,gw-2",
                                                               "sink": "cloud-1"}


def test_the_containers_ran_the_operator_where_the_policy_put_it(runs) -> None:
    outcome, _ = runs["emu"]
    manifest = json.loads((outcome.folder / "manifest.json").read_text())
    assert manifest["config"]["pipeline"][0]["on"] == ["gw-1", "gw-2"]
    messages = pd.read_parquet(outcome.folder / "messages.parquet")
    # Every reading reached the sink through a relay: 8 sensors x 2/s x 6 s (a loaded host's
    # late gateway may skip a tick: emu.agent.drivers.CATCH_UP).
    assert (messages["state"] == "delivered").all(), messages["state"].value_counts()
    assert 88 <= len(messages) <= 96 and set(messages["sink"]) == {"cloud-1"}
