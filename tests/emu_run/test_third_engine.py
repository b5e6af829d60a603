"""A third engine is one class and one registry line (emu.engines): registered by the test, a
stand-in engine (the plain Docker engine under another name, counting what is asked of it)
runs an experiment through `run.engine`, labels its cluster with its name, and `foglab emu
down` removes a cluster of it through its own hooks, found by that label."""

from __future__ import annotations

import json
import secrets

import pytest

from emu.cluster.plan import plan_cluster
from emu.engines import ENGINE_LABEL, ENGINES, EngineEntry
from emu.engines.docker import inventory
from emu.engines.docker.engine import Cluster
from experiments.loader import parse_text
from experiments.runner import run_experiment
from tests.emu_cluster.test_cluster import small_topology
from tests.emu_swarm.test_engine import DEVICES, DURATION, RATE
from tests.emu_swarm.test_engine import EXPERIMENT as SWARM_EXPERIMENT
from tests.engine import docker_engine

pytestmark = pytest.mark.emu

# The Swarm engine's small experiment (two gateways, a broker, a cloud VM), on the stand-in.
EXPERIMENT = SWARM_EXPERIMENT.replace("engine: swarm", "engine: stand-in")


class StandIn(Cluster):
    """The plain engine under another name, recording the protocol's calls it gets."""

    engine_name = "stand-in"
    calls: list[str] = []

    def up(self):
        self.calls.append("up")
        return super().up()

    def node(self, name: str):
        self.calls.append(f"node {name}")
        return super().node(name)

    def down(self):
        self.calls.append("down")
        return super().down()

    @classmethod
    def before_remove(cls, client, cluster: str) -> None:
        cls.calls.append(f"before_remove {cluster}")

    @classmethod
    def after_remove(cls, client, cluster: str) -> None:
        cls.calls.append(f"after_remove {cluster}")


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    # The one line a third engine adds (emu/engines/__init__.py), here for this test only.
    monkeypatch.setitem(ENGINES, "stand-in", EngineEntry(
        "stand-in", "the tests' stand-in", f"{__name__}:StandIn"))
    StandIn.calls = []
    return StandIn.calls


def test_an_experiment_runs_on_a_registered_third_engine(registered, tmp_path) -> None:
    (outcome,) = run_experiment(parse_text(EXPERIMENT), tmp_path, sweep_id="stand-in")
    assert outcome.error is None, outcome.error
    facts = json.loads((outcome.folder / "manifest.json").read_text())["facts"]
    counts = facts["messages"]
    assert counts["sent"] == pytest.approx(DEVICES * RATE * DURATION, rel=0.1)
    assert counts["received"] == counts["sent"] and counts["lost"] == 0
    # Through the protocol: up, the agents' nodes stopped at the end through `node`, down
    # (and the run's last sweep by the cluster's label, through the engine's hooks).
    assert registered[0] == "up" and "down" in registered
    assert registered.index("down") > max(i for i, call in enumerate(registered)
                                          if call.startswith("node "))
    assert {"node gw-1", "node gw-2", "node cloud-1"} <= set(registered)
    client = docker_engine()
    assert inventory.containers(client, facts["cluster"]) == []


def test_down_finds_a_third_engines_cluster_by_its_label_and_calls_its_hooks(
        registered) -> None:
    client = docker_engine()
    name = f"standin-{secrets.token_hex(3)}"
    plan = plan_cluster(small_topology(1), name, labels={"foglab.test": "third-engine"})
    cluster = StandIn(plan, client, agent_command=["sleep", "infinity"]).up()
    try:
        labels = {n["Labels"].get(ENGINE_LABEL) for n in inventory.networks(client, name)}
        assert labels == {"stand-in"}
        removed = inventory.remove(client, name)  # what `foglab emu down` calls
        assert removed.containers == len(plan.containers)
        assert registered[-2:] == [f"before_remove {name}", f"after_remove {name}"]
        assert inventory.containers(client, name) == [] == inventory.networks(client, name)
    finally:
        if inventory.containers(client, name) or inventory.networks(client, name):
            cluster.down()
