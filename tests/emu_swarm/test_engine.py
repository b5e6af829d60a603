"""`run.engine: swarm` on a one-node swarm made of this host's own dockerd: the quickstart-sized
pipeline's counts as on plain Docker, a task Swarm cannot start named with its error, nothing of
a cluster left after down, and bad engine input refused."""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from emu.cluster.plan import plan_cluster
from emu.engines import engine_class
from emu.engines.docker import inventory
from emu.engines.docker.engine import Cluster, ClusterError
from emu.engines.swarm.engine import SwarmCluster
from emu.engines.swarm.services import service_spec
from experiments.loader import parse_text
from experiments.runner import run_experiment
from tests.emu_cluster.test_cluster import small_topology
from tests.engine import docker_engine
from topologies.errors import SpecError

if TYPE_CHECKING:
    import docker

DEVICES, RATE, DURATION = 4, 4.0, 8.0
PATH_S = 0.005 + 0.020 + 0.001  # device radio, gateway uplink, broker LAN
GWBRIDGE = "docker_gwbridge"
EXPERIMENT = f"""
name: swarm-small
topology:
  name: swarm-small
  sites: [{{name: field}}, {{name: cloud}}]
  nodes:
    - {{name: s, kind: device, replicas: {DEVICES}}}
    - {{name: gw, kind: gateway, profile: rpi4, replicas: 2, site: field}}
    - {{name: broker-1, kind: broker, site: cloud}}
    - {{name: cloud-1, kind: cloud_vm, profile: vm.small, site: cloud}}
  links:
    - {{from: s-*, to: gw-*, mode: spread, latency: 5ms}}
    - {{from: gw-*, to: broker-1, latency: 20ms}}
    - {{from: broker-1, to: cloud-1, latency: 1ms}}
workload:
  name: w
  streams: [{{name: city, sources: s-*, rate: {RATE}/s, arrivals: periodic, qos: 1}}]
pipeline:
  - {{name: relay, task: passthrough, on: gateways, reads: city, writes: clean}}
  - {{name: sink, task: passthrough, on: cloud-1, reads: clean}}
run: {{backend: emu, engine: swarm, duration: {DURATION}s, seed: 3, drain: 2s}}
"""


def swarm_state(client: docker.DockerClient) -> str:
    return (client.info().get("Swarm") or {}).get("LocalNodeState", "")


@pytest.fixture(scope="module")
def swarm() -> Iterator[docker.DockerClient]:
    """This host's dockerd as a one-node swarm; left at the end only if this fixture made it."""
    client = docker_engine()
    made = swarm_state(client) == "inactive"
    # Swarm makes docker_gwbridge on its first overlay endpoint and leaves it after `leave`.
    bridge = bool(client.api.networks(names=[GWBRIDGE]))
    if made:
        address = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"],
                                 capture_output=True, text=True, check=True).stdout.split()[3]
        subprocess.run(["docker", "swarm", "init", "--advertise-addr", address.split("/")[0]],
                       capture_output=True, check=True)
    assert swarm_state(client) == "active"
    try:
        yield client
    finally:
        if made:
            subprocess.run(["docker", "swarm", "leave", "--force"], capture_output=True)
            if not bridge:
                subprocess.run(["docker", "network", "rm", GWBRIDGE], capture_output=True)


def nothing_left(client: docker.DockerClient, cluster: str) -> None:
    label = {"label": [f"foglab.cluster={cluster}"]}
    assert client.api.services(filters=label) == []
    assert client.api.configs(filters=label) == []
    assert inventory.containers(client, cluster) == []
    assert inventory.networks(client, cluster) == []


@pytest.fixture(scope="module")
def emulated(swarm: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory):
    """The experiment run by `foglab run` with `run.engine: swarm`."""
    root = tmp_path_factory.mktemp("results")
    (outcome,) = run_experiment(parse_text(EXPERIMENT), root, sweep_id="swarm")
    assert outcome.error is None, outcome.error
    from experiments.results import load_run

    return load_run(outcome.folder), outcome.folder


@pytest.mark.emu
def test_every_message_arrives_once_through_swarm_services(swarm, emulated) -> None:
    run, folder = emulated
    facts = json.loads((folder / "manifest.json").read_text())["facts"]
    assert facts["engine"] == "swarm" and facts["swarm_nodes"] == 1
    assert facts["shaper"] == "relay" and facts["agent_start"].startswith("exec")
    # The links are relayed by a link agent on the one node, a service of the cluster.
    assert len(facts["link_agents"]) == 1
    counts = facts["messages"]
    counts.pop("emitted_by_device")
    assert counts["sent"] == pytest.approx(DEVICES * RATE * DURATION, rel=0.05)
    assert counts == {"sent": counts["sent"], "received": counts["sent"], "dropped": 0,
                      "lost": 0, "filtered": 0, "filtered_by": {}, "duplicated": 0,
                      "unread": 0, "emitted": counts["sent"], "in_flight": 0}
    messages = run.table("messages")
    assert len(messages) == counts["sent"] and set(messages["sink"]) == {"cloud-1"}
    # The links are the relays' on the host bridge: never early, as on plain Docker.
    assert messages["latency"].min() >= PATH_S - 0.002
    assert PATH_S <= messages["latency"].median() <= PATH_S + 0.25
    nodes = run.table("nodes")
    assert set(nodes["node"]) == {"gw-1", "gw-2", "broker-1", "cloud-1"} and nodes["up"].all()
    nothing_left(swarm, facts["cluster"])
    assert not Path(facts["records"]).exists()


@pytest.mark.emu
def test_a_task_swarm_cannot_start_is_named_with_its_error(swarm) -> None:
    plan = plan_cluster(small_topology(1), f"swt-{secrets.token_hex(3)}",
                        labels={"foglab.test": "emu_swarm"})
    cluster = SwarmCluster(plan, swarm, agent_command=["/no/such/agent"])
    with pytest.raises(ClusterError) as failed:
        cluster.up()
    message = str(failed.value)
    assert "agent gw-1" in message or "agent vm" in message, message
    assert "Swarm could not run its task" in message and "/no/such/agent" in message, message
    nothing_left(swarm, plan.cluster)


def test_bad_engine_input_is_refused_naming_the_field() -> None:
    assert engine_class("docker") is Cluster and engine_class(None) is Cluster
    assert engine_class("swarm") is SwarmCluster
    with pytest.raises(SpecError, match=r"run\.engine: an engine is one of docker, swarm "
                                        r"\(got 'kubernetes'\)"):
        engine_class("kubernetes")


def test_a_service_spec_keeps_the_containers_limits_labels_and_site() -> None:
    plan = plan_cluster(small_topology(1), "spec", labels={"foglab.test": "emu_swarm"})
    broker = plan.containers["broker"]
    spec = service_spec(broker, cluster="spec", image="img:1", command=broker.command, env={},
                        labels=broker.labels, records="/r/broker", overlay="ov",
                        host_network="hb", node_sites=["cloud"])
    arguments = spec.create_arguments({})
    task = arguments["task_template"]
    assert arguments["name"] == "foglab-spec-broker"
    assert dict(arguments["mode"]) == {"replicated": {"Replicas": 1}}
    assert arguments["endpoint_spec"]["Mode"] == "dnsrr"
    assert task["RestartPolicy"]["Condition"] == "none"
    assert task["Resources"]["Limits"] == {"NanoCPUs": broker.nano_cpus,
                                           "MemoryBytes": broker.mem_limit,
                                           "Pids": broker.pids_limit}
    assert broker.pids_limit > 0
    assert task["Placement"]["Constraints"] == ["node.labels.foglab.site==cloud"]
    assert task["ContainerSpec"]["Args"] == list(broker.command)
    assert task["ContainerSpec"]["Labels"]["foglab.cluster"] == "spec"
    assert [n["Target"] for n in task["Networks"]] == ["ov", "hb"]
    unpinned = service_spec(broker, cluster="spec", image="img:1", command=(), env={},
                            labels={}, records="/r", overlay="ov", host_network="hb")
    assert unpinned.constraints == ()


@pytest.mark.emu
def test_an_interrupted_up_leaves_nothing(swarm) -> None:
    """Ctrl-C as the first service's task runs: what was made (networks, configs, services,
    their containers) is removed before the interrupt propagates."""
    plan = plan_cluster(small_topology(1), f"swi-{secrets.token_hex(3)}",
                        labels={"foglab.test": "emu_swarm"})

    def interrupt(stage: str, done: int, total: int, detail: str) -> None:
        if stage == "containers":
            raise KeyboardInterrupt

    cluster = SwarmCluster(plan, swarm, agent_command=["sleep", "infinity"], progress=interrupt)
    with pytest.raises(KeyboardInterrupt):
        cluster.up()
    nothing_left(swarm, plan.cluster)
