"""`run.engine: swarm` across three Docker-in-Docker nodes: the quickstart-sized pipeline with
its gateways (arm64 under QEMU) on the two `field` workers and its broker, ZooKeeper and cloud
VM on the `cloud` manager; every reading arrives once, the counts are those of the same
experiment on plain Docker, and nothing of the cluster is left on any node."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from emu.engines.docker import inventory
from emu.engines.swarm.engine import SwarmCluster
from emu.engines.swarm.image_registry import LocalRegistry
from emu.engines.swarm.nodes import SwarmNodes, remove
from emu.engines.swarm.routing import LIST_TIMEOUT_S
from emu.engines.swarm.target import SwarmTarget, current_target, use_target
from emu.images import CACHE_DIR
from experiments.loader import parse_text
from experiments.results import load_run
from experiments.runner import run_experiment
from tests.emu_swarm.test_engine import DEVICES, DURATION, EXPERIMENT, PATH_S, RATE
from tests.engine import docker_engine

NAME = "foglab-test-swarm-multi"
SITES = ("cloud", "field", "field")
ON_ONE_HOST = EXPERIMENT.replace("engine: swarm", "engine: docker")
LEAVE_RUN_S, LEAVE_AFTER_S = 24.0, 14.0  # the run with a node leaving; when, after its agent
COUNTED = ("sent", "received", "dropped", "lost", "duplicated", "unread", "in_flight")


@pytest.fixture(scope="module")
def host():
    return docker_engine()


@pytest.fixture(scope="module")
def nodes(host) -> Iterator[SwarmNodes]:
    remove(NAME, host=host)  # what a killed run left; its volumes (the pulled images) are kept
    with SwarmNodes(3, name=NAME, sites=SITES, keep_volumes=True, host=host) as made:
        yield made


@pytest.fixture(scope="module")
def target(nodes: SwarmNodes, host) -> Iterator[SwarmTarget]:
    with LocalRegistry(nodes.gateway, storage=CACHE_DIR / "test-registry", host=host) as registry:
        yield nodes.target(registry)  # each node's socket and address; images by digest


def _run(text: str, root):
    (outcome,) = run_experiment(parse_text(text), root, sweep_id="multinode")
    assert outcome.error is None, outcome.error
    facts = json.loads((outcome.folder / "manifest.json").read_text())["facts"]
    return load_run(outcome.folder), facts


@pytest.fixture(scope="module")
def across_nodes(target: SwarmTarget, tmp_path_factory: pytest.TempPathFactory):
    with use_target(target):
        return _run(EXPERIMENT, tmp_path_factory.mktemp("swarm"))


@pytest.fixture(scope="module")
def on_one_host(tmp_path_factory: pytest.TempPathFactory):
    return _run(ON_ONE_HOST, tmp_path_factory.mktemp("docker"))


@pytest.mark.emu
def test_every_reading_arrives_once_across_three_nodes(across_nodes, on_one_host,
                                                       nodes: SwarmNodes) -> None:
    run, facts = across_nodes
    assert facts["engine"] == "swarm" and facts["swarm_nodes"] == 3
    counts = {key: facts["messages"][key] for key in COUNTED}
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts["dropped"] == 0
    assert counts["received"] == counts["sent"] > 0
    # Parity: the same experiment on plain Docker on this host counts the same.
    _, plain = on_one_host
    assert plain.get("engine", "docker") == "docker"
    assert counts == {key: plain["messages"][key] for key in COUNTED}
    messages = run.table("messages")
    assert len(messages) == counts["sent"] and set(messages["sink"]) == {"cloud-1"}
    # Shaped by the link agent of each client's node (one per node): never early, and not
    # much later than on one host.
    assert facts["link_agents"] == sorted(n.name for n in nodes.nodes)
    # Each link's traffic crossed the agent of its client's node, and only that one.
    carriers = facts["link_carriers"]
    for gateway in ("gw-1", "gw-2"):
        assert carriers[f"{gateway}>broker-1"] == [facts["placement"][gateway]], carriers
    assert messages["latency"].min() >= PATH_S - 0.002
    assert PATH_S <= messages["latency"].median() <= PATH_S + 0.25
    print(f"multinode: {counts}, placement {facts['placement']}, up {facts['up_s']} s "
          f"(images {facts['images_s']} s), median latency "
          f"{messages['latency'].median() * 1000:.1f} ms")
    assert set(run.table("nodes")["node"]) == {"gw-1", "gw-2", "broker-1", "cloud-1"}
    # Placement by site: the gateways on the field workers, the rest on the cloud manager.
    placement = facts["placement"]
    manager, *workers = (n.name for n in nodes.nodes)
    assert {placement["gw-1"], placement["gw-2"]} <= set(workers)
    assert placement["broker-1"] == manager and placement["cloud-1"] == manager
    assert len(set(placement.values())) >= 2
    # Nothing of the cluster is left on any node.
    cluster = facts["cluster"]
    label = {"label": [f"{inventory.CLUSTER}={cluster}"]}
    assert nodes.manager.api.services(filters=label) == []
    assert nodes.manager.api.configs(filters=label) == []
    for node in nodes.nodes:
        assert inventory.containers(node.client, cluster) == [], node.name
        assert inventory.networks(node.client, cluster) == [], node.name


def test_a_target_from_the_environment_names_bad_input() -> None:
    assert current_target({}) is None
    environ = {"FOGLAB_SWARM_ENGINES": "a=tcp://10.0.0.1:2375,b=tcp://10.0.0.2:2375",
               "FOGLAB_SWARM_REGISTRY": "reg.lab:5000"}
    target = current_target(environ)
    assert target is not None and target.manager == "a" and target.address_of("b") == "10.0.0.2"
    assert target.image_ref  # the registry's push
    with pytest.raises(ValueError, match=r"FOGLAB_SWARM_ENGINES: 'b' is not NODE=URL"):
        current_target({**environ, "FOGLAB_SWARM_ENGINES": "a=tcp://x:1,b"})
    with pytest.raises(ValueError, match=r"FOGLAB_SWARM_REGISTRY must be too"):
        current_target({k: v for k, v in environ.items() if k != "FOGLAB_SWARM_REGISTRY"})
    with pytest.raises(ValueError, match=r"manager 'c' is not one of"):
        SwarmTarget({"a": "tcp://x:1"}, "c", str)
    with pytest.raises(ValueError, match=r"node\(s\) b have an engine on a unix socket and "
                                         r"no address"):
        SwarmTarget({"a": "unix:///s/a.sock", "b": "unix:///s/b.sock"}, "a", str,
                    addresses={"a": "10.0.0.1"})
    assert SwarmTarget({"a": "unix:///s/a.sock"}, "a", str,
                       addresses={"a": "10.0.0.1"}).address_of("a") == "10.0.0.1"
    assert SwarmCluster.__init__.__kwdefaults__["target"] is None


class FakeAPI:
    """An engine's APIClient holding some containers: records which calls reached it."""

    def __init__(self, *ids: str) -> None:
        self.ids = ids
        self.calls: list[tuple[str, str]] = []

    def containers(self, **kwargs) -> list[dict]:
        return [{"Id": i, "Names": [f"/name-{i}"]} for i in self.ids]

    def kill(self, container: str, signal: str = "SIGKILL") -> None:
        self.calls.append(("kill", container))

    def exec_create(self, container: str, command) -> dict:
        self.calls.append(("exec_create", container))
        return {"Id": f"exec-{container}"}

    def exec_start(self, execution: str) -> bytes:
        self.calls.append(("exec_start", execution))
        return b""

    def services(self) -> list:
        self.calls.append(("services", ""))
        return []


def test_a_containers_calls_go_to_the_engine_of_its_node() -> None:
    from emu.engines.swarm.routing import RoutedAPI

    manager, worker = FakeAPI("aaa1"), FakeAPI("bbb2", "bbb3")
    api = RoutedAPI(manager, {"m": manager, "w": worker})
    assert [c["Id"] for c in api.containers(all=True)] == ["aaa1", "bbb2", "bbb3"]
    api.kill("bbb3", signal="SIGTERM")
    api.kill("name-aaa1")
    execution = api.exec_create("bbb2", ["true"])
    api.exec_start(execution["Id"])
    api.services()
    assert worker.calls == [("kill", "bbb3"), ("exec_create", "bbb2"), ("exec_start",
                                                                       "exec-bbb2")]
    assert manager.calls == [("kill", "name-aaa1"), ("services", "")]
    assert api.node_of("bbb") == "w" and api.node_of("zzz") is None


def test_the_cli_reaches_a_multi_node_swarm_named_in_the_environment(monkeypatch) -> None:
    """`foglab emu down/status/exec` take every node's engine from FOGLAB_SWARM_ENGINES (as a
    run does), and refuse a bad one naming the variable, before any engine is asked."""
    from typer.testing import CliRunner

    from emu.cli import clusters as cli_clusters
    from experiments.cli import app

    monkeypatch.setenv("FOGLAB_SWARM_ENGINES", "a=tcp://10.0.0.1:2375,b")
    refused = CliRunner().invoke(app, ["emu", "down", "--cluster", "c1"])
    assert refused.exit_code == 3
    assert "FOGLAB_SWARM_ENGINES: 'b' is not NODE=URL" in refused.output
    monkeypatch.setenv("FOGLAB_SWARM_ENGINES", "a=tcp://10.0.0.1:2375,b=tcp://10.0.0.2:2375")
    monkeypatch.setenv("FOGLAB_SWARM_REGISTRY", "reg.lab:5000")
    import emu.engines.swarm.engine

    made = []
    monkeypatch.setattr(emu.engines.swarm.engine, "routed_client", made.append)  # no engine to ask
    cli_clusters.docker_client()
    assert [sorted(target.engines) for target in made] == [["a", "b"]]


class VanishingAPI(FakeAPI):
    """A worker's engine that stops answering (`gone`), as a node whose host went away."""

    def __init__(self, *ids: str) -> None:
        super().__init__(*ids)
        self.gone: type[Exception] | None = None

    def containers(self, **kwargs) -> list[dict]:
        if self.gone is not None:
            raise self.gone("no answer")
        return super().containers(**kwargs)

    def kill(self, container: str, signal: str = "SIGKILL") -> None:
        if self.gone is not None:
            raise self.gone("no answer")
        super().kill(container, signal)


class ManagerAPI(FakeAPI):
    def __init__(self, *ids: str) -> None:
        super().__init__(*ids)
        self.states = {"m": "ready", "w": "ready"}

    def nodes(self) -> list[dict]:
        return [{"Description": {"Hostname": n}, "Status": {"State": s}}
                for n, s in self.states.items()]


def test_a_node_that_stops_answering_has_left_only_when_the_manager_has_it_down() -> None:
    from requests.exceptions import ConnectionError as Unreachable
    from requests.exceptions import ReadTimeout

    from emu.engines.swarm.routing import NodeLeft, RoutedAPI

    manager, worker = ManagerAPI("aaa1"), VanishingAPI("bbb2", "bbb3")
    api = RoutedAPI(manager, {"m": manager, "w": worker})
    assert len(api.containers(all=True)) == 3
    # Slow, but still in the swarm: its last listing stands, and calls still go to it.
    worker.gone = ReadTimeout
    assert [c["Id"] for c in api.containers(all=True)] == ["aaa1", "bbb2", "bbb3"]
    assert api.left == {}
    with pytest.raises(ReadTimeout):
        api.kill("bbb2")
    # Gone, and the manager has it down: it left; its containers are no longer listed, and a
    # call naming one fails at once (a NotFound, which the run takes as a container gone).
    worker.gone = Unreachable
    manager.states["w"] = "down"
    assert [c["Id"] for c in api.containers(all=True)] == ["aaa1"]
    assert set(api.left) == {"w"}
    worker.gone = None  # not asked again, even if it answered
    with pytest.raises(NodeLeft, match="swarm node w left the swarm"):
        api.kill("bbb3")
    assert ("kill", "bbb3") not in worker.calls
    from docker.errors import NotFound
    assert issubclass(NodeLeft, NotFound)


@pytest.mark.emu
def test_a_node_that_leaves_mid_run_is_a_fault_the_run_survives(
        target: SwarmTarget, nodes: SwarmNodes, host, tmp_path) -> None:
    """Runs last in this file: it kills a worker node (the module's nodes go after it)."""
    victim = nodes.nodes[2]
    text = EXPERIMENT.replace(f"duration: {DURATION}s", f"duration: {LEAVE_RUN_S}s")
    assert text != EXPERIMENT
    killed: list[float] = []

    def leave() -> None:
        """Kill the victim's node container (its dockerd, its tasks, its link agent) some
        seconds after its gateway's agent started: the run is under way by then."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            agents = victim.client.api.containers(filters={"label": ["foglab.role=agent"]})
            if agents:
                time.sleep(LEAVE_AFTER_S)
                killed.append(time.time())  # the node dies during the call, before it returns
                host.api.kill(victim.name)
                return
            time.sleep(0.5)

    thread = threading.Thread(target=leave, daemon=True)
    thread.start()
    try:
        with use_target(target):
            (outcome,) = run_experiment(parse_text(text), tmp_path, sweep_id="leave")
    finally:
        thread.join()
        # The killed node's volume holds the containers it had: its next start would restore
        # them first (minutes on a loaded host). Its pulled images go too; the others stay.
        host.api.remove_container(victim.name, force=True)
        host.api.remove_volume(victim.name)
    assert killed, "the victim's gateway never started"
    # The run went on and ended, degraded: the gateway on the node that left failed, named so.
    assert outcome.error is None and outcome.status == "degraded", outcome.failed
    facts = json.loads((outcome.folder / "manifest.json").read_text())["facts"]
    on_victim = sorted(n for n, where in facts["placement"].items() if where == victim.name)
    assert on_victim and set(outcome.failed) == set(on_victim), outcome.failed
    assert all(f"swarm node {victim.name} left" in outcome.failed[n] for n in on_victim)
    assert list(facts["hosts_left"]) == [victim.name]
    # When it left: the first listing its engine did not answer, within a poll and a listing's
    # timeout of the kill (the run's epoch is the host's clock at K = 1).
    left_at = killed[0] - facts["epoch"]
    assert 0 < left_at < LEAVE_RUN_S
    assert left_at - 0.01 <= facts["hosts_left"][victim.name] <= left_at + LIST_TIMEOUT_S + 2
    # The other gateway's readings all arrived; the lost node's records went with its host
    # (a task keeps /records in its container), which the facts say.
    assert facts["records_lost"] == on_victim
    counts = facts["messages"]
    assert counts["received"] == counts["sent"] > 0 and counts["lost"] == 0
    devices = load_run(outcome.folder).table("messages").groupby("source", observed=True).size()
    assert len(devices) == DEVICES // 2 and (devices >= RATE * LEAVE_RUN_S * 0.95).all()
    print(f"node left: {facts['hosts_left']} (killed at {left_at:.1f} s), failed "
          f"{outcome.failed}, {counts['received']} of {counts['sent']} readings")
