"""A real multi-node Docker Swarm on one host: each node a container running its own dockerd.

For the tests and for users without a cluster: the same Swarm code path as on real hosts, with
a manager and workers that are separate engines (their own images, containers, overlay
endpoints), joined over a bridge network of their own.

Each node's engine listens on TCP 2375 without TLS. That is only acceptable because the bridge
is private to this host (nothing is published on the host's interfaces); a real swarm's engines
are reached the way their owner set them up (see docs/swarm-nodes.md).
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from emu.images import DOCKER_TIMEOUT_S, SWARM_NODE, ensure_image

if TYPE_CHECKING:
    import docker

ENGINE_PORT = 2375
CGROUPS = "/sys/fs/cgroup"
SWARM_PORT = 2377
READY_S = 180  # a node's dockerd under CI's load took over 60 s to answer
REMOVE_TRIES = 15
SWARM_READY_S = 60
LOG_TAIL = 20
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
LABEL = "foglab.swarm-nodes"
# --privileged asks for every capability, and a host whose bounding set lacks one (this one
# lacks CAP_SYS_RESOURCE) refuses the container: so every capability the host has, no
# confinement, every device; what --privileged adds besides (/sys, /proc/sys and the
# container's own cgroups writable) the node's start script does itself.
CAP_DROP = ("SYS_RESOURCE",)
SECURITY = ("seccomp=unconfined", "apparmor=unconfined")
# Before dockerd: make /sys, /proc/sys (dockerd sets forwarding there) and the cgroup
# hierarchies writable, and forget a swarm of a previous run kept in the volume (its manager is
# gone; the node joins the new one). The node shares the host's cgroup namespace and sees the
# host's cgroup hierarchies (a bind of /sys/fs/cgroup: Docker would mount the node's own
# sub-hierarchy there): its tasks' cgroups are then where the host's containers' are
# (docker/<id>), so foglab's samplers (emu.metrics, emu.accounting), which read cgroups on this
# host, find them as on one host. Ids are unique across engines: no two share a cgroup.
START = """set -e
mount -o remount,rw /sys
mount -o remount,bind,rw /proc/sys
for d in /sys/fs/cgroup/*; do [ -L "$d" ] || mount -o remount,bind,rw "$d"; done
rm -rf /var/lib/docker/swarm
exec dockerd -H unix:///var/run/docker.sock -H tcp://0.0.0.0:{port} --tls=false {flags}
"""


class SwarmNodesError(RuntimeError):
    """The nodes could not be made; whatever was made is removed before this is raised."""


@dataclass
class Node:
    """One node: its container (also its hostname), its address on the bridge, its engine."""

    index: int
    name: str
    address: str
    client: docker.DockerClient
    site: str | None = None

    @property
    def engine_url(self) -> str:
        return f"tcp://{self.address}:{ENGINE_PORT}"


@dataclass
class SwarmNodes:
    """`count` Docker-in-Docker nodes on a bridge `name`: node 0 the manager, the others workers.

    Labels every node `foglab.node=<index>` and, when `sites` gives one, `foglab.site=<site>`.
    Each node keeps /var/lib/docker on the volume `<name>-<index>`: with keep_volumes a second
    run finds its pulled images there. The bridge's subnet is an insecure registry for every
    node (a registry on the bridge speaks plain HTTP); `insecure_registries` adds others.
    Use as a context manager, or call start() then close().
    """

    count: int = 3
    name: str = "foglab-swarm"
    sites: Sequence[str | None] = ()
    keep_volumes: bool = False
    insecure_registries: Sequence[str] = ()
    ready_s: float = READY_S
    host: docker.DockerClient | None = None
    nodes: list[Node] = field(default_factory=list, init=False)
    network: str | None = field(default=None, init=False)
    _made: list[tuple[str, str]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ValueError(f"SwarmNodes name {self.name!r}: lower-case letters, digits and -, "
                             "starting with a letter or digit, at most 40 characters")
        if self.count < 1:
            raise ValueError(f"SwarmNodes count {self.count}: at least 1 node")
        if len(self.sites) > self.count:
            raise ValueError(f"SwarmNodes sites {list(self.sites)}: more sites than the "
                             f"{self.count} nodes")

    def __enter__(self) -> SwarmNodes:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def manager(self) -> docker.DockerClient:
        """The manager's engine: services and node listings go there."""
        return self.nodes[0].client

    @property
    def gateway(self) -> str:
        """The host's address on the nodes' bridge: where a registry on the host listens."""
        network = self._host().networks.get(self.network)
        return network.attrs["IPAM"]["Config"][0]["Gateway"]

    def _host(self) -> docker.DockerClient:
        if self.host is None:
            import docker

            self.host = docker.from_env(timeout=DOCKER_TIMEOUT_S)
        return self.host

    def start(self) -> SwarmNodes:
        """Make the network, the nodes and the swarm; on any failure remove what was made."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        host = self._host()
        self._refuse_existing(host)
        image = ensure_image(SWARM_NODE, client=host).tag
        labels = {"foglab": "1", LABEL: self.name}
        network = host.networks.create(self.name, driver="bridge", labels=labels)
        self._made.append(("network", network.id))
        self.network = network.name
        subnet = network.attrs["IPAM"]["Config"][0]["Subnet"]
        flags = " ".join(shlex.quote(f"--insecure-registry={r}")
                         for r in (subnet, *self.insecure_registries))
        containers = []
        for index in range(self.count):
            containers.append(self._start_node(host, image, index, flags, labels))
        for index, container in enumerate(containers):
            self.nodes.append(self._wait_for_engine(container, index))
        self._form_swarm()

    def _refuse_existing(self, host: docker.DockerClient) -> None:
        found = [c.name for c in host.containers.list(all=True,
                                                      filters={"label": f"{LABEL}={self.name}"})]
        found += [n.name for n in host.networks.list(names=[self.name]) if n.name == self.name]
        if found:
            raise SwarmNodesError(f"swarm nodes {self.name!r} exist already ({', '.join(found)}):"
                                  f" close them, or remove them with emu.swarm.nodes.remove"
                                  f"({self.name!r})")

    def _start_node(self, host: docker.DockerClient, image: str, index: int, flags: str,
                    labels: dict[str, str]):
        from docker.errors import NotFound

        name = f"{self.name}-{index}"
        try:
            host.volumes.get(name)  # kept by an earlier run: not this run's to remove
        except NotFound:
            host.volumes.create(name, labels=labels)
            if not self.keep_volumes:
                self._made.append(("volume", name))
        # Named before it exists: a failure while the engine creates it still finds it.
        self._made.append(("container", name))
        return host.containers.run(
            image, ["sh", "-c", START.format(port=ENGINE_PORT, flags=flags)], name=name,
            hostname=name, detach=True, init=True, network=self.network,
            labels={**labels, "foglab.swarm-node": str(index)},
            volumes={name: {"bind": "/var/lib/docker", "mode": "rw"},
                     CGROUPS: {"bind": CGROUPS, "mode": "rw"}},
            cap_add=["ALL"], cap_drop=list(CAP_DROP), security_opt=list(SECURITY),
            device_cgroup_rules=["a *:* rwm"], cgroupns="host")

    def _wait_for_engine(self, container, index: int) -> Node:
        """The node once its engine answers, its leftover containers of a previous run removed."""
        import docker
        from docker.errors import DockerException

        deadline = time.monotonic() + self.ready_s
        address = None
        while time.monotonic() < deadline:
            container.reload()
            if container.status not in ("created", "running"):
                break
            address = address or container.attrs["NetworkSettings"]["Networks"][
                self.network]["IPAddress"]
            if address:
                try:  # the client asks the engine its API version when made
                    client = docker.DockerClient(base_url=f"tcp://{address}:{ENGINE_PORT}",
                                                 timeout=DOCKER_TIMEOUT_S)
                except DockerException:
                    pass
                else:
                    # Tasks of a previous swarm, kept in the volume, stopped with their node.
                    client.containers.prune()
                    site = self.sites[index] if index < len(self.sites) else None
                    return Node(index, container.name, address, client, site)
            time.sleep(0.5)
        tail = container.logs(tail=LOG_TAIL).decode(errors="replace").rstrip()
        why = (f"does not answer on port {ENGINE_PORT} within {self.ready_s:g} s"
               if container.status == "running" else f"{container.status} before it answered")
        raise SwarmNodesError(f"swarm node {container.name}: its dockerd {why}; the last lines "
                              f"of its log:\n{tail}")

    def _form_swarm(self) -> None:
        manager = self.nodes[0]
        manager.client.swarm.init(advertise_addr=manager.address,
                                  listen_addr=f"0.0.0.0:{SWARM_PORT}")
        manager.client.swarm.reload()
        token = manager.client.swarm.attrs["JoinTokens"]["Worker"]
        for node in self.nodes[1:]:
            node.client.swarm.join(remote_addrs=[f"{manager.address}:{SWARM_PORT}"],
                                   join_token=token, advertise_addr=node.address,
                                   listen_addr=f"0.0.0.0:{SWARM_PORT}")
        self._label_nodes()

    def _label_nodes(self) -> None:
        """Label each node once the manager lists all of them Ready."""
        by_name = {node.name: node for node in self.nodes}
        deadline = time.monotonic() + SWARM_READY_S
        while True:
            listed = self.manager.nodes.list()
            ready = {n.attrs["Description"]["Hostname"]: n for n in listed
                     if n.attrs["Status"]["State"] == "ready"}
            if set(by_name) <= set(ready):
                break
            if time.monotonic() > deadline:
                raise SwarmNodesError(f"swarm {self.name!r}: the manager lists "
                                      f"{sorted(ready)} ready, not all of {sorted(by_name)}, "
                                      f"after {SWARM_READY_S} s")
            time.sleep(0.5)
        for hostname, node in by_name.items():
            entry = ready[hostname]
            spec = dict(entry.attrs["Spec"])
            labels = {**spec.get("Labels", {}), "foglab.node": str(node.index)}
            if node.site is not None:
                labels["foglab.site"] = node.site
            spec["Labels"] = labels
            entry.update(spec)

    def close(self) -> None:
        """Remove exactly what start() made: containers, then the network, then volumes
        (kept with keep_volumes). Safe to call twice, and after a failed start."""
        for node in self.nodes:
            node.client.close()
        self.nodes.clear()
        if not self._made:
            return
        _remove(self._host(), self._made)
        self._made.clear()


def _remove(host: docker.DockerClient, made: list[tuple[str, str]]) -> None:
    from docker.errors import APIError, NotFound

    order = {"container": 0, "network": 1, "volume": 2}
    for kind, ident in sorted(made, key=lambda item: order[item[0]]):
        for attempt in range(REMOVE_TRIES):
            try:
                if kind == "container":
                    host.containers.get(ident).remove(force=True)
                elif kind == "network":
                    host.networks.get(ident).remove()
                else:
                    host.volumes.get(ident).remove(force=True)
                break
            except NotFound:
                break
            except APIError as error:
                # 409: a removal already under way (the engine's own, or an earlier call's),
                # or a network whose last container is still going: wait, then again.
                if error.status_code != 409 or attempt == REMOVE_TRIES - 1:
                    raise
                time.sleep(1.0)


def remove(name: str, *, keep_volumes: bool = True,
           host: docker.DockerClient | None = None) -> list[str]:
    """Remove the swarm nodes `name` that a run left (its process killed): what was removed."""
    import docker

    host = host or docker.from_env(timeout=DOCKER_TIMEOUT_S)
    selector = {"label": f"{LABEL}={name}"}
    made = [("container", c.name) for c in host.containers.list(all=True, filters=selector)]
    made += [("network", n.id) for n in host.networks.list(filters=selector)]
    if not keep_volumes:
        made += [("volume", v.name) for v in host.volumes.list(filters=selector)]
    _remove(host, made)
    return [ident for _, ident in made]
