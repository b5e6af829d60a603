"""Find what a cluster made by its labels, and remove it, from any process.

Every container and network of a cluster carries `foglab.cluster=<name>`; its networks also
carry the cluster's facts (topology, shaper, owner, scratch directory), since a network is made
before any container and outlives them all. The owner is the process that holds the cluster's
relays, `<host>:<pid>:<start time>`: a pid alone may have been reused by then.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from emu.engines import engine_of
from emu.engines.base import NodeStatus, Removed
from emu.engines.docker.nodes import DockerNode

if TYPE_CHECKING:
    import docker

CLUSTER = "foglab.cluster"
OWNER = "foglab.owner"
SCRATCH = "foglab.scratch"
ZYGOTE_ROLE = "zygote"
# A swarm's link agents (emu.links.link_agent): like the zygote, machinery of the cluster, no node.
LINK_AGENT_ROLE = "link-agent"
MACHINERY_ROLES = (ZYGOTE_ROLE, LINK_AGENT_ROLE)
# Containers removed at once. With 16, Docker Engine 20.10 kept a network's endpoints after two
# of two clusters of 150 and 200 gateways left it (StuckNetwork); with 4, two of two left none.
REMOVE_WORKERS = 4
OWNER_EXIT_S = 60
NETWORK_RELEASE_S = 15


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    topology: str
    shaper: str
    owner: str
    owner_running: bool
    records: str
    containers: int
    running: int
    networks: int


def _filters(cluster: str | None) -> dict[str, list[str]]:
    return {"label": [f"{CLUSTER}={cluster}" if cluster else CLUSTER]}


def containers(client: docker.DockerClient, cluster: str | None = None) -> list[dict]:
    """The engine's summaries of a cluster's containers (every cluster's when None)."""
    return client.api.containers(all=True, filters=_filters(cluster))


def networks(client: docker.DockerClient, cluster: str | None = None) -> list[dict]:
    return client.api.networks(filters=_filters(cluster))


def owner_token(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    # The command name, in parentheses, may hold spaces: count fields after its end.
    return stat[stat.rindex(")") + 2:].split()[19]


def owner_pid(token: str) -> int | None:
    """The pid of the process the token names, if that very process still runs here."""
    try:
        host, pid_text, start = token.rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return None
    if host != socket.gethostname() or start == "?" or _start_time(pid) != start:
        return None
    return pid


def node_status(client: docker.DockerClient, cluster: str) -> list[NodeStatus]:
    """Every node's container of a cluster, in the order the cluster made them (not the
    zygote's nor a swarm's link agents', which are no nodes: MACHINERY_ROLES)."""
    found = []
    def order(summary: dict) -> tuple[int, int]:
        labels = summary.get("Labels") or {}
        position = labels.get("foglab.order", "")
        return (int(position) if position.isdigit() else 1 << 30, summary.get("Created", 0))

    for summary in sorted(containers(client, cluster), key=order):
        labels = summary.get("Labels") or {}
        if labels.get("foglab.role") in MACHINERY_ROLES:
            continue
        attached = (summary.get("NetworkSettings") or {}).get("Networks") or {}
        network = labels.get("foglab.network", next(iter(attached), ""))
        ip = (attached.get(network) or {}).get("IPAddress", "")
        found.append(NodeStatus(
            node=labels.get("foglab.node", ""), kind=labels.get("foglab.kind", ""),
            role=labels.get("foglab.role", ""), name=summary["Names"][0].lstrip("/"),
            container=summary["Id"], state=summary.get("State", ""),
            status=summary.get("Status", ""), ip=ip, image=summary.get("Image", ""),
            network=network))
    return found


def clusters(client: docker.DockerClient) -> dict[str, ClusterInfo]:
    """Every cluster the engine holds something of, by name."""
    facts: dict[str, dict[str, str]] = {}
    counts: dict[str, list[int]] = {}
    for network in networks(client):
        labels = network.get("Labels") or {}
        facts.setdefault(labels[CLUSTER], labels)
        counts.setdefault(labels[CLUSTER], [0, 0, 0])[2] += 1
    for summary in containers(client):
        name = summary["Labels"][CLUSTER]
        facts.setdefault(name, summary["Labels"])
        count = counts.setdefault(name, [0, 0, 0])
        count[0] += 1
        count[1] += summary.get("State") == "running"
    return {name: ClusterInfo(
        name=name, topology=labels.get("foglab.topology", ""),
        shaper=labels.get("foglab.shaper", ""), owner=labels.get(OWNER, ""),
        owner_running=owner_pid(labels.get(OWNER, "")) is not None,
        records=labels.get("foglab.records", ""), containers=counts[name][0],
        running=counts[name][1], networks=counts[name][2])
        for name, labels in sorted(facts.items())}


def find_container(client: docker.DockerClient, cluster: str, node: str) -> dict:
    found = client.api.containers(all=True, filters={
        "label": [f"{CLUSTER}={cluster}", f"foglab.node={node}"]})
    if not found:
        raise LookupError(f"no node {node} in cluster {cluster}")
    return found[0]


def records_of_run(client: docker.DockerClient, topology: str) -> Path | None:
    """The records folder of the cluster this process runs for `topology`, found by its
    containers' labels (this process's owner token, the topology's name: how the nemesis finds
    its run, experiments.nemesis); None while the run has no container."""
    found = client.api.containers(all=True, filters={
        "label": [f"{OWNER}={owner_token()}", f"foglab.topology={topology}"]})
    return Path(found[0]["Labels"]["foglab.records"]) if found else None


def node_of(client: docker.DockerClient, cluster: str, node: str) -> DockerNode:
    """A node of a cluster found on the host, to act on (LookupError: no such node)."""
    return DockerNode(client.api, find_container(client, cluster, node)["Id"])


def end_owner(token: str, timeout_s: float = OWNER_EXIT_S) -> bool:
    """Ask the process holding a cluster's relays to bring it down; wait for it to end."""
    pid = owner_pid(token)
    if pid is None or pid == os.getpid():
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and owner_pid(token) is not None:
        time.sleep(0.2)
    return True


class StuckNetwork(RuntimeError):
    """A network the engine will not remove though the cluster's containers are gone."""

    def __init__(self, network: str, cluster: str) -> None:
        super().__init__(
            f"Docker will not remove network {network} of cluster {cluster}: it still counts "
            f"endpoints though no container of the cluster is left (a fault of Docker Engine "
            f"20.10 after many containers leave one bridge at once). Restarting dockerd "
            f"releases them; then `foglab emu down --cluster {cluster}` removes the network.")
        self.network, self.cluster = network, cluster


def remove(client: docker.DockerClient, cluster: str, end_owner_process: bool = True,
           workers: int = REMOVE_WORKERS) -> Removed:
    """Remove a cluster's containers and networks, and its scratch directory; first ask the
    process that holds its relays, if another, to end (it then cleans up after itself)."""
    from docker.errors import APIError, NotFound

    found = networks(client, cluster)
    labels = next((n.get("Labels") or {} for n in found), {})
    counts = len(containers(client, cluster)), len(found)
    ended = end_owner(labels.get(OWNER, "")) if end_owner_process else False
    engine = engine_of(labels).load()  # what its engine removes before and after (Swarm's)
    engine.before_remove(client, cluster)
    ids = [summary["Id"] for summary in containers(client, cluster)]

    def remove_container(container: str) -> None:
        with contextlib.suppress(NotFound):
            client.api.remove_container(container, force=True, v=True)

    if ids:
        with ThreadPoolExecutor(min(workers, len(ids))) as pool:
            list(pool.map(remove_container, ids))
    scratch = labels.get(SCRATCH)
    try:
        for network in networks(client, cluster):
            deadline = time.monotonic() + NETWORK_RELEASE_S
            while True:
                try:
                    client.api.remove_network(network["Id"])
                    break
                except NotFound:
                    break
                except APIError:
                    # Endpoints the engine has not released yet, or a container another process
                    # started meanwhile: remove strays and try again for a while.
                    if time.monotonic() > deadline:
                        raise StuckNetwork(network.get("Name", network["Id"]), cluster) from None
                    for stray in containers(client, cluster):
                        remove_container(stray["Id"])
                    time.sleep(0.5)
    finally:
        # Also when a network stays (StuckNetwork): the scratch folder is foglab's alone.
        if scratch and not remove_scratch(scratch):
            scratch = None
    engine.after_remove(client, cluster)
    # What the cluster had, whether this process or its owner removed it.
    return Removed(*counts, scratch, ended)


def remove_scratch(path: str) -> bool:
    """Remove a scratch directory the cluster made: only a foglab-* one under the temp dir."""
    folder = Path(path)
    if folder.parent != Path(tempfile.gettempdir()) or not folder.name.startswith("foglab-"):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def follow_logs(client: docker.DockerClient, container: str, follow: bool) -> Iterator[bytes]:
    return client.api.logs(container, stream=True, follow=follow)
