"""A real three-node Docker Swarm on this host (Docker-in-Docker nodes): the manager lists three
Ready nodes with their labels, a gateway image pulled through the local registry runs as a
service on the worker it is constrained to (arm64 under the host's QEMU), a node whose engine
fails is named with its log and nothing of it stays, and close() leaves nothing on the host."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from emu.images import CACHE_DIR, GATEWAY, ensure_image
from emu.swarm.nodes import LABEL, SwarmNodes, SwarmNodesError, remove
from emu.swarm.registry import ExternalRegistry, LocalRegistry
from tests.engine import docker_engine

pytestmark = pytest.mark.emu

NAME = "foglab-test-swarm-nodes"
SITES = ("cloud", "field", "field")
SERVICE_S = 90


@pytest.fixture(scope="module")
def host():
    return docker_engine()


@pytest.fixture(scope="module")
def swarm(host) -> Iterator[SwarmNodes]:
    # A run killed before its teardown left these: its volumes (the nodes' images) are kept.
    remove(NAME, host=host)
    with SwarmNodes(3, name=NAME, sites=SITES, keep_volumes=True, host=host) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def registry(swarm, host) -> Iterator[LocalRegistry]:
    # A kept store: pushing a gateway whose base layer is there already sends its sources only.
    with LocalRegistry(swarm.gateway, storage=CACHE_DIR / "test-registry", host=host) as running:
        yield running


def test_the_manager_lists_three_ready_labelled_nodes(swarm: SwarmNodes) -> None:
    listed = swarm.manager.nodes.list()
    assert len(listed) == 3
    by_name = {n.attrs["Description"]["Hostname"]: n.attrs for n in listed}
    assert set(by_name) == {f"{NAME}-{i}" for i in range(3)}
    for index in range(3):
        attrs = by_name[f"{NAME}-{index}"]
        assert attrs["Status"]["State"] == "ready"
        assert attrs["Spec"]["Role"] == ("manager" if index == 0 else "worker")
        assert attrs["Spec"]["Labels"] == {"foglab.node": str(index),
                                           "foglab.site": SITES[index]}
    # Each node is an engine of its own, reached over the bridge.
    ids = {node.client.info()["ID"] for node in swarm.nodes}
    assert len(ids) == 3


def test_a_gateway_service_pulled_from_the_registry_runs_on_its_worker(
        swarm: SwarmNodes, registry: LocalRegistry, host) -> None:
    from docker.types import RestartPolicy

    ref = registry.push(ensure_image(GATEWAY, client=host).tag)
    assert ref.startswith(f"{swarm.gateway}:{registry.port}/foglab/gateway:")
    service = swarm.manager.services.create(
        ref, ["python3", "-c", "import platform; print(platform.machine())"],
        name="arch", constraints=["node.labels.foglab.node==2"],
        restart_policy=RestartPolicy(condition="none"))
    try:
        deadline = time.monotonic() + SERVICE_S
        while not (tasks := [t for t in service.tasks()
                             if t["Status"]["State"] in ("complete", "failed", "rejected")]):
            assert time.monotonic() < deadline, service.tasks()
            time.sleep(0.5)
        task = tasks[0]
        assert task["Status"]["State"] == "complete", task["Status"]
        worker = swarm.manager.nodes.get(task["NodeID"]).attrs["Description"]["Hostname"]
        assert worker == f"{NAME}-2"
        # The container is on that node's own engine, and it ran the arm64 interpreter.
        containers = swarm.nodes[2].client.containers.list(
            all=True, filters={"label": f"com.docker.swarm.service.id={service.id}"})
        assert [c.logs().decode().strip() for c in containers] == ["aarch64"]
    finally:
        service.remove()


def test_a_node_whose_engine_fails_is_named_and_nothing_stays(host) -> None:
    name = "foglab-test-swarm-broken"
    # dockerd refuses an insecure registry that is no address: the node exits at once.
    nodes = SwarmNodes(2, name=name, insecure_registries=("not a registry",), ready_s=20,
                       host=host)
    expected = rf"{name}-0: its dockerd exited before it answered"
    with pytest.raises(SwarmNodesError, match=expected) as raised:
        nodes.start()
    assert "not a registry" in str(raised.value)  # from the node's log
    selector = {"label": f"{LABEL}={name}"}
    assert host.containers.list(all=True, filters=selector) == []
    assert host.networks.list(names=[name]) == []
    assert host.volumes.list(filters=selector) == []


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="'Bad_Name'"):
        SwarmNodes(name="Bad_Name")
    with pytest.raises(ValueError, match="more sites"):
        SwarmNodes(2, sites=("a", "b", "c"))
    with pytest.raises(ValueError, match="'registry.lab'"):
        ExternalRegistry("registry.lab")


def test_close_leaves_nothing_on_the_host(swarm: SwarmNodes, registry: LocalRegistry,
                                          host) -> None:
    """Last in the file: it closes the module's swarm (the fixture's close is then a no-op)."""
    registry.stop()
    swarm.close()
    selector = {"label": f"{LABEL}={NAME}"}
    assert host.containers.list(all=True, filters=selector) == []
    assert host.networks.list(names=[NAME]) == []
    # The volumes stay, a cache of the nodes' images; nothing else of the swarm does.
    assert sorted(v.name for v in host.volumes.list(filters=selector)) == [
        f"{NAME}-{i}" for i in range(3)]
