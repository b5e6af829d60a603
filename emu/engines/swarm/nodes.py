"""A real multi-node Docker Swarm on one host: each node a container running its own dockerd.

For the tests and for users without a cluster: the same Swarm code path as on real hosts, with
a manager and workers that are separate engines (their own images, containers, overlay
endpoints), joined over a bridge network of their own.

Each node's engine listens on unix sockets only, no TCP: one inside the node, and one in a
folder of the host's (0700, root's; one per node, removed at close) bind-mounted into it,
which the host's client uses (`unix://<folder>/docker.sock`). A task container of the swarm,
which reaches its node at its default route, finds no engine there; another local user cannot
pass the folder. The swarm's own ports (2377 control, 7946 gossip, 4789 VXLAN) stay on the
bridge: the nodes need them among themselves. A real swarm's engines are reached the way their
owner set them up (see docs/swarm-nodes.md).

The nodes are not privileged: Docker's default capabilities (which the tasks inside get, so
the node must have them) and two more, SYS_ADMIN (dockerd and runc mount and make namespaces)
and NET_ADMIN (dockerd's bridges, iptables, the overlay's VXLAN); Docker's default devices;
a seccomp profile of foglab's own that allows what dockerd and runc need (mount, namespaces,
keyrings: Docker's default refuses runc's session keyring) and refuses what no node needs
(modules, kexec, open_by_handle_at, bpf, ptrace, the clock, swap, reboot, ...).
"""

from __future__ import annotations

import ipaddress
import json
import platform
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from emu.engines.docker.image_store import DOCKER_TIMEOUT_S, ensure_image
from emu.engines.swarm.target import SwarmTarget
from emu.images import SWARM_NODE

if TYPE_CHECKING:
    import docker

    from emu.engines.swarm.image_registry import LocalRegistry

SOCKETS = "/run/foglab"  # in a node: its engine's socket for the host (a host folder's bind)
SOCKETS_LABEL = "foglab.swarm-sockets"  # the host's folder, for remove() after a killed run
SOCKETS_PREFIX = "foglab-swarm-"
CGROUPS = "/sys/fs/cgroup"
SWARM_PORT = 2377
READY_S = 180  # a node's dockerd under CI's load took over 60 s to answer
REMOVE_TRIES = 15
SWARM_READY_S = 60
LOG_TAIL = 20
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
LABEL = "foglab.swarm-nodes"
# What a node needs besides Docker's default capabilities (which its tasks get, and runc cannot
# give what the node lacks: without MKNOD, NET_RAW, SYS_CHROOT, SETFCAP or AUDIT_WRITE a task
# fails "unable to apply caps"). Without SYS_ADMIN a node's dockerd cannot unpack an image
# ("creating mount namespace before pivot: operation not permitted"); without NET_ADMIN it
# does not start (iptables: "Permission denied"). Tried and not needed: SYS_PTRACE,
# SYS_RESOURCE, SYS_MODULE, every device (Docker's default devices do: the storage is overlay2
# on the node's volume, no loop or device-mapper).
CAP_ADD = ("SYS_ADMIN", "NET_ADMIN")
# Refused in a node with EPERM (seccomp, the node and every task in it). Everything else is
# allowed: dockerd and runc need mount, unshare, setns, pivot_root and keyctl, which Docker's
# default profile refuses to a container (keyctl at all; runc's "unable to join session
# keyring"), and an allow-list of dockerd's, containerd's, runc's and the tasks' calls (arm64
# under QEMU too) is more than this module can keep right.
DENIED_SYSCALLS = (
    "_sysctl", "acct", "bpf", "clock_adjtime", "clock_settime", "delete_module",
    "finit_module", "init_module", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load",
    "lookup_dcookie", "name_to_handle_at", "nfsservctl", "open_by_handle_at",
    "perf_event_open", "process_vm_readv", "process_vm_writev", "ptrace", "quotactl",
    "reboot", "settimeofday", "swapoff", "swapon", "syslog", "uselib", "userfaultfd", "vm86",
    "vm86old")
# Every ABI of the host's architecture: a denied call is denied through each (a 32-bit call
# on x86_64 too).
ARCHITECTURES = {"x86_64": ("SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"),
                 "aarch64": ("SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM")}
# AppArmor: none on foglab's host. Docker's docker-default profile refuses mount, which a
# node's dockerd needs; so unconfined where AppArmor is (not tested here).
APPARMOR = "apparmor=unconfined"
# Before dockerd: make /sys, /proc/sys (dockerd sets forwarding there) and the cgroup
# hierarchies writable, and forget a swarm of a previous run kept in the volume (its manager is
# gone; the node joins the new one) and that run's networks: their subnets were chosen beside
# the bridge of that run, and the new bridge may have one of them (a docker_gwbridge restored
# at the bridge's subnet took the host's address on it: every pull from the registry there was
# refused). Without them the engine chooses its bridges beside the node's new address; the
# images stay. The node shares the host's cgroup namespace and sees the
# host's cgroup hierarchies (a bind of /sys/fs/cgroup: Docker would mount the node's own
# sub-hierarchy there): its tasks' cgroups are then where the host's containers' are
# (docker/<id>), so foglab's samplers (emu.host.metrics, emu.host.accounting), which read cgroups on
# this host, find them as on one host. Ids are unique across engines: no two share a cgroup.
START = """set -e
mount -o remount,rw /sys
mount -o remount,bind,rw /proc/sys
for d in /sys/fs/cgroup/*; do [ -L "$d" ] || mount -o remount,bind,rw "$d"; done
rm -rf /var/lib/docker/swarm /var/lib/docker/network
exec dockerd -H unix:///var/run/docker.sock -H unix://{sockets}/docker.sock --group root {flags}
"""


def seccomp_profile() -> str:
    """The nodes' seccomp profile (JSON): allow by default, DENIED_SYSCALLS refused."""
    return json.dumps({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": list(ARCHITECTURES.get(platform.machine(), ())),
        "syscalls": [{"names": list(DENIED_SYSCALLS), "action": "SCMP_ACT_ERRNO",
                      "errnoRet": 1}]})


class SwarmNodesError(RuntimeError):
    """The nodes could not be made; whatever was made is removed before this is raised."""


@dataclass
class Node:
    """One node: its container (also its hostname), its address on the bridge, its engine
    (reached by the host at engine_url, a unix socket)."""

    index: int
    name: str
    address: str
    client: docker.DockerClient
    engine_url: str
    site: str | None = None


@dataclass
class SwarmNodes:
    """`count` Docker-in-Docker nodes on a bridge `name`: node 0 the manager, the others workers.

    Labels every node `foglab.node=<index>` and, when `sites` gives one, `foglab.site=<site>`.
    Each node keeps /var/lib/docker on the volume `<name>-<index>`: with keep_volumes a second
    run finds its pulled images there. The bridge's subnet is an insecure registry for every
    node (a registry on the bridge speaks plain HTTP); `insecure_registries` adds others.
    `subnet` (CIDR) sets the bridge's, where the host's engine's choice would meet a network
    of the user's (a VPN's); without it the host's engine chooses.
    Use as a context manager, or call start() then close().
    """

    count: int = 3
    name: str = "foglab-swarm"
    sites: Sequence[str | None] = ()
    keep_volumes: bool = False
    insecure_registries: Sequence[str] = ()
    subnet: str | None = None
    ready_s: float = READY_S
    host: docker.DockerClient | None = None
    nodes: list[Node] = field(default_factory=list, init=False)
    network: str | None = field(default=None, init=False)
    sockets: Path | None = field(default=None, init=False)  # the engines' sockets' folder
    _made: list[tuple[str, str]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ValueError(f"SwarmNodes name {self.name!r}: lower-case letters, digits and -, "
                             "starting with a letter or digit, at most 40 characters")
        if self.subnet is not None:
            try:
                network = ipaddress.IPv4Network(self.subnet)
            except ValueError as error:
                raise ValueError(f"SwarmNodes subnet {self.subnet!r}: {error}") from None
            if network.num_addresses < 8:
                raise ValueError(f"SwarmNodes subnet {self.subnet!r}: too small for a bridge "
                                 "(a /29 at least)")
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

    def target(self, registry: LocalRegistry) -> SwarmTarget:
        """The swarm target of these nodes (emu.engines.swarm.target): each node's engine socket and
        address, the manager, and images pushed to `registry` and pulled by every node."""
        return SwarmTarget({n.name: n.engine_url for n in self.nodes}, self.nodes[0].name,
                           registry.image_ref([n.client for n in self.nodes]),
                           addresses={n.name: n.address for n in self.nodes})

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
        # 0700, root's (this process's): only root reaches the engines' sockets in it.
        self.sockets = Path(tempfile.mkdtemp(prefix=f"{SOCKETS_PREFIX}{self.name}-"))
        labels = {"foglab": "1", LABEL: self.name}
        ipam = None
        if self.subnet is not None:
            from docker.types import IPAMConfig, IPAMPool

            gateway = str(next(ipaddress.ip_network(self.subnet).hosts()))
            ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=self.subnet, gateway=gateway)])
        network = host.networks.create(self.name, driver="bridge", labels=labels, ipam=ipam)
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
                                  f" close them, or remove them with emu.engines.swarm.nodes.remove"
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
        assert self.sockets is not None
        sockets = self.sockets / str(index)
        sockets.mkdir(mode=0o700)
        # Named before it exists: a failure while the engine creates it still finds it.
        self._made.append(("container", name))
        return host.containers.run(
            image, ["sh", "-c", START.format(sockets=SOCKETS, flags=flags)], name=name,
            hostname=name, detach=True, init=True, network=self.network,
            labels={**labels, "foglab.swarm-node": str(index), SOCKETS_LABEL: str(self.sockets)},
            volumes={name: {"bind": "/var/lib/docker", "mode": "rw"},
                     CGROUPS: {"bind": CGROUPS, "mode": "rw"},
                     str(sockets): {"bind": SOCKETS, "mode": "rw"}},
            cap_add=list(CAP_ADD), security_opt=[f"seccomp={seccomp_profile()}", APPARMOR],
            cgroupns="host")

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
            socket = self.sockets / str(index) / "docker.sock" if self.sockets else None
            if address and socket and socket.exists():
                url = f"unix://{socket}"
                try:  # the client asks the engine its API version when made
                    client = docker.DockerClient(base_url=url, timeout=DOCKER_TIMEOUT_S)
                except DockerException:
                    pass
                else:
                    # Tasks of a previous swarm, kept in the volume, stopped with their node.
                    client.containers.prune()
                    site = self.sites[index] if index < len(self.sites) else None
                    return Node(index, container.name, address, client, url, site)
            time.sleep(0.5)
        tail = container.logs(tail=LOG_TAIL).decode(errors="replace").rstrip()
        why = (f"does not answer on its socket within {self.ready_s:g} s"
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
        if self._made:
            _remove(self._host(), self._made)
            self._made.clear()
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)
            self.sockets = None


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
    containers = host.containers.list(all=True, filters=selector)
    made = [("container", c.name) for c in containers]
    made += [("network", n.id) for n in host.networks.list(filters=selector)]
    if not keep_volumes:
        made += [("volume", v.name) for v in host.volumes.list(filters=selector)]
    _remove(host, made)
    folders = {c.labels.get(SOCKETS_LABEL) for c in containers} - {None}
    for folder in folders:  # only a folder start() made: in the temporary folder, by its name
        path = Path(folder)
        if (path.parent == Path(tempfile.gettempdir())
                and path.name.startswith(f"{SOCKETS_PREFIX}{name}-")
                and not path.is_symlink() and path.is_dir()):
            shutil.rmtree(path, ignore_errors=True)
    return [ident for _, ident in made]
