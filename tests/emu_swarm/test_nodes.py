"""A real three-node Docker Swarm on this host (Docker-in-Docker nodes): the manager lists three
Ready nodes with their labels, a gateway image pulled through the local registry runs as a
service on the worker it is constrained to (arm64 under the host's QEMU), services on two
workers talk over an overlay network, a node whose engine fails is named with its log and
nothing of it stays, and close() leaves nothing on the host.

And as an attacker would try them (issue 40): a task reaching its node's engine (none: the
engines listen on root's unix sockets only), a node reading the host's disk (its devices are
Docker's default), and the registry without the login, a delete, a tag."""

from __future__ import annotations

import base64
import json
import os
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from docker.types import EndpointSpec, RestartPolicy

from emu.engines.docker.image_store import ensure_image
from emu.engines.swarm.image_registry import ExternalRegistry, LocalRegistry
from emu.engines.swarm.nodes import CAP_ADD, LABEL, Node, SwarmNodes, SwarmNodesError, remove
from emu.images import CACHE_DIR, GATEWAY
from tests.engine import docker_engine

pytestmark = pytest.mark.emu

NAME = "foglab-test-swarm-nodes"
SITES = ("cloud", "field", "field")
SERVICE_S = 90
# Asks the server on the other worker until its name resolves (the task registers a moment
# after it starts).
FETCH = """
import time, urllib.request
for attempt in range(60):
    try:
        print(urllib.request.urlopen("http://server:9000/", timeout=2).status)
        break
    except OSError:
        time.sleep(0.5)
"""
# From a task: its node's engine, at the task's default route and at the node's address, on
# the port the nodes' engines listened on before (tcp://0.0.0.0:2375, no TLS).
KNOCK = """
import socket, struct
for line in open("/proc/net/route").read().splitlines()[1:]:
    fields = line.split()
    if fields[1] == "00000000":
        gateway = socket.inet_ntoa(struct.pack("<L", int(fields[2], 16)))
for host in (gateway, "{node}"):
    try:
        socket.create_connection((host, 2375), timeout=5).close()
        print("open")
    except ConnectionRefusedError:
        print("refused")
    except OSError as error:
        print(type(error).__name__)
"""


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
    from emu.host.doctor import dockerd_pids

    # The nodes' engines are their containers', not this host's: the doctor counts one.
    assert len(dockerd_pids()) == 1
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


def _finished(service) -> dict:
    """The service's one task once it ended (a service started with restart condition none)."""
    deadline = time.monotonic() + SERVICE_S
    while not (tasks := [t for t in service.tasks()
                         if t["Status"]["State"] in ("complete", "failed", "rejected")]):
        assert time.monotonic() < deadline, service.tasks()
        time.sleep(0.5)
    return tasks[0]


def _output(node: Node, service) -> list[str]:
    """What the service's containers on node printed: they are on that node's own engine."""
    containers = node.client.containers.list(
        all=True, filters={"label": f"com.docker.swarm.service.id={service.id}"})
    return [c.logs().decode().strip() for c in containers]


@pytest.fixture(scope="module")
def gateway_ref(swarm: SwarmNodes, registry: LocalRegistry, host) -> str:
    return swarm.target(registry).image_ref(ensure_image(GATEWAY, client=host).tag)


def test_a_gateway_service_pulled_from_the_registry_runs_on_its_worker(
        swarm: SwarmNodes, registry: LocalRegistry, gateway_ref: str) -> None:
    # By digest: what the nodes run is what the host pushed, whatever a tag says later.
    assert gateway_ref.startswith(f"{swarm.gateway}:{registry.port}/foglab/gateway@sha256:")
    service = swarm.manager.services.create(
        gateway_ref, ["python3", "-c", "import platform; print(platform.machine())"],
        name="arch", constraints=["node.labels.foglab.node==2"],
        restart_policy=RestartPolicy(condition="none"))
    try:
        task = _finished(service)
        assert task["Status"]["State"] == "complete", task["Status"]
        worker = swarm.manager.nodes.get(task["NodeID"]).attrs["Description"]["Hostname"]
        assert worker == f"{NAME}-2"
        # It ran the arm64 interpreter, through the host kernel's binfmt_misc.
        assert _output(swarm.nodes[2], service) == ["aarch64"]
    finally:
        service.remove()


def test_services_on_two_workers_talk_over_an_overlay(swarm: SwarmNodes,
                                                      gateway_ref: str) -> None:
    """VXLAN between the nodes' engines. Names resolve to the tasks (dnsrr): this host's
    kernel has no IPVS, which a service's virtual IP needs."""
    network = swarm.manager.networks.create("foglab-test-overlay", driver="overlay",
                                            attachable=True)
    services = []
    try:
        services.append(swarm.manager.services.create(
            gateway_ref, ["python3", "-m", "http.server", "9000"], name="server",
            networks=[network.name], constraints=["node.labels.foglab.node==1"],
            endpoint_spec=EndpointSpec(mode="dnsrr")))
        services.append(swarm.manager.services.create(
            gateway_ref, ["python3", "-c", FETCH], name="fetch", networks=[network.name],
            constraints=["node.labels.foglab.node==2"],
            restart_policy=RestartPolicy(condition="none")))
        task = _finished(services[1])
        assert task["Status"]["State"] == "complete", task["Status"]
        assert _output(swarm.nodes[2], services[1]) == ["200"]
    finally:
        for service in services:
            service.remove()
        _remove_when_free(network)


def test_a_task_cannot_reach_its_nodes_engine(swarm: SwarmNodes, gateway_ref: str) -> None:
    """The exploit: a task (code an experiment names) connects to its node's engine at its
    default route (or at the node's address) and starts a privileged container, root on the
    host. Now nothing listens there; only the host reaches the engines, on unix sockets in a
    folder only root may enter."""
    node = swarm.nodes[2]
    service = swarm.manager.services.create(
        gateway_ref, ["python3", "-c", KNOCK.format(node=node.address)], name="knock",
        constraints=["node.labels.foglab.node==2"], restart_policy=RestartPolicy(condition="none"))
    try:
        task = _finished(service)
        assert task["Status"]["State"] == "complete", task["Status"]
        assert _output(node, service) == ["refused\nrefused"]
    finally:
        service.remove()
    assert swarm.sockets is not None
    folder = os.stat(swarm.sockets)
    assert (folder.st_uid, stat.S_IMODE(folder.st_mode)) == (0, 0o700)
    for each in swarm.nodes:
        assert each.engine_url == f"unix://{swarm.sockets}/{each.index}/docker.sock"
        assert each.client.ping()


def test_a_node_has_the_least_privileges_that_run_its_tasks(swarm: SwarmNodes, host) -> None:
    """Not privileged: two capabilities besides Docker's defaults, a seccomp filter, Docker's
    default devices. The exploit of a node's root (were a task to become it): make a device
    node of the host's and open it. Refused by the node's device cgroup (it was every device)."""
    node = host.containers.get(swarm.nodes[1].name)
    config = node.attrs["HostConfig"]
    assert config["Privileged"] is False
    assert sorted(config["CapAdd"]) == sorted(CAP_ADD) and not config["CapDrop"]
    assert not config["DeviceCgroupRules"] and not config["Devices"]
    status = node.exec_run(["grep", "^Seccomp:", "/proc/1/status"]).output.decode()
    assert status.split() == ["Seccomp:", "2"]  # a filter, not unconfined (0)
    # The host's disk, and the host kernel's log (/dev/kmsg: read and forge it). With every
    # device the node read the log; this host refuses raw reads of its disk even to root.
    disk = os.stat("/").st_dev
    for kind, major, minor in (("b", os.major(disk), os.minor(disk)), ("c", 1, 11)):
        # The count last, after the refusal (stdout and stderr interleave in any order).
        read = node.exec_run(["sh", "-c", f"rm -f /tmp/dev; mknod /tmp/dev {kind} {major} "
                                          f"{minor} && n=$(timeout 2 head -c 512 /tmp/dev "
                                          f"2>/tmp/err | wc -c); cat /tmp/err; echo count=$n"])
        assert read.output.split()[-1] == b"count=0", read.output
        assert b"Operation not permitted" in read.output, read.output
    # A call the profile denies (syslog: the kernel's log) fails in the node.
    assert node.exec_run(["dmesg"]).exit_code != 0


def test_the_registry_takes_only_its_login_and_deletes_nothing(
        swarm: SwarmNodes, registry: LocalRegistry, gateway_ref: str) -> None:
    """The exploits: a node (or a task, routed there by its node) pulling without the login;
    any local user reading the host's side; a delete of what the nodes run."""
    from docker.errors import APIError

    # A tag no node has: the engine must ask the registry, which wants the login first.
    with pytest.raises(APIError, match="no basic auth credentials"):
        swarm.nodes[1].client.api.pull(gateway_ref.split("@")[0], tag="not-pulled")
    for address in (registry.push_address, registry.pull_address):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://{address}/v2/_catalog", timeout=5)
        assert refused.value.code == 401
    repository, digest = gateway_ref.split("/", 1)[1].split("@")
    login = base64.b64encode(f"{registry.auth['username']}:{registry.auth['password']}"
                             .encode()).decode()
    for address in (registry.push_address, registry.pull_address):
        delete = urllib.request.Request(f"http://{address}/v2/{repository}/manifests/{digest}",
                                        method="DELETE",
                                        headers={"Authorization": f"Basic {login}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(delete, timeout=5)
        assert refused.value.code == 405
    # The password is in no node's environment nor command line, nor in any file of a node.
    for node in swarm.nodes:
        container = swarm._host().containers.get(node.name)
        assert registry.auth["password"] not in json.dumps(container.attrs)
        found = container.exec_run(["grep", "-rl", registry.auth["password"], "/root", "/etc",
                                    "/var/lib/docker/image"])
        assert found.output == b"", found.output


def _remove_when_free(network) -> None:
    """An overlay is removable once its services' tasks are gone, a moment after."""
    from docker.errors import APIError

    deadline = time.monotonic() + 20
    while True:
        try:
            network.remove()
            return
        except APIError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_node_whose_engine_fails_is_named_and_nothing_stays(host) -> None:
    name = "foglab-test-swarm-broken"
    remove(name, keep_volumes=False, host=host)  # what a killed run of this test left
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
    sockets = swarm.sockets
    swarm.close()
    assert sockets is not None and not sockets.exists()  # the engines' sockets' folder
    selector = {"label": f"{LABEL}={NAME}"}
    assert host.containers.list(all=True, filters=selector) == []
    assert host.networks.list(names=[NAME]) == []
    # The volumes stay, a cache of the nodes' images; nothing else of the swarm does.
    assert sorted(v.name for v in host.volumes.list(filters=selector)) == [
        f"{NAME}-{i}" for i in range(3)]
