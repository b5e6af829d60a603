"""Bring a cluster plan up as Docker Swarm services (`run.engine: swarm`), and down again.

The same plan as emu.engines.docker.engine.Cluster, applied through a swarm manager: each container
plan a service (emu.engines.swarm.services: replicas 1, restart none, the same image, env, limits,
labels and records mount), on one attachable overlay network for the cluster (optionally
encrypted) when the swarm has several nodes, plus a swarm-scoped bridge on each node, which on
foglab's own node the host reaches (the controller, readiness checks). SwarmCluster has
Cluster's public methods (up, down, status, address, reshape, exec, logs, records_dir, facts)
and inherits those that work on a task's container as on a plain one.

What differs from the plain engine:
- No zygote: it forks agents from a privileged container, and a service cannot be privileged;
  each gateway starts its agent itself (the plain engine's "exec" path).
- Links are relayed by a link agent on every node (emu.engines.swarm.links, emu.links.link_agent: a
  global service in each node's network stack), each relaying the links of the clients its node
  runs; a client names it as emu.agent.config.NODE_HOST, its default route's gateway.
- No CPU share juggling while containers start (a service spec has no cpu shares).
- One node: no overlay (every task on the node's bridge: Swarm's per-task overlay work made
  start-up slower); records are a bind mount of the host's folder. A swarm of more than one
  node is refused without a target, naming a link.

Several nodes (a SwarmTarget, emu.engines.swarm.target: each node's engine, a registry): each broker
and ZooKeeper publishes its port in host mode on its node, where the link agents, the
controller and the readiness checks reach it (a task's `status().ip` is its node's address);
the client is a RoutedClient (a container's calls go to its node's engine, listings are
merged); each task keeps /records in its container, copied out (emu.engines.swarm.records) once it
ended, when the records are read, and at `down` before the services go. A node that leaves
mid-run (emu.engines.swarm.routing: its engine silent, the manager has it down) is a fault: its
tasks are `lost` in `status()` (the run fails their nodes, naming the node), its records
are lost with it (`facts["records_lost"]`), and the run's facts say when (`hosts_left`).

Anything that fails during `up` (a task Swarm could not start, with its error; a service
that never answers; Ctrl-C) removes everything made so far, by the cluster's label.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from emu.agent.config import SECRETS_FILE, SECRETS_VARIABLE, secrets_text
from emu.cluster.plan import ClusterPlan, ContainerPlan
from emu.engines.agent_environment import agent_environment
from emu.engines.base import ClusterError, NodeStatus, Removed, RunOption, interrupts_deferred
from emu.engines.docker import inventory
from emu.engines.docker.engine import Cluster
from emu.engines.docker.image_store import DOCKER_TIMEOUT_S, ensure_image
from emu.engines.startup import READY_TIMEOUT_S, WORKERS, Addresses, Progress
from emu.engines.swarm.links import NodeLinks
from emu.engines.swarm.records import copy_records
from emu.engines.swarm.removal import remove_cluster, remove_swarm_objects, wait_networks_gone
from emu.engines.swarm.routing import NodeLeft, RoutedClient
from emu.engines.swarm.services import (
    LOG_OPTIONS,
    SITE_LABEL,
    STOP_GRACE_NS,
    ServiceSpec,
    config_name,
    service_spec,
)
from emu.engines.swarm.target import SwarmTarget, current_target
from emu.images import SERVICES
from emu.links.link_agent import CONTROL_LINE, TOKEN_FILE_VARIABLE
from emu.links.probe import ShaperChoice

if TYPE_CHECKING:
    import docker

TASK_POLL_S = 0.2
FAILED_TASK_STATES = ("failed", "rejected", "complete", "shutdown", "orphaned", "remove")
RELAY_SHAPER = ShaperChoice("relay", "swarm: user-space relays by a link agent on each node")
# The link agents' global service (emu.links.link_agent), run from the services image.
LINK_AGENT_COMMAND = ("python3", "-m", "emu.links.link_agent")
# A link agent's pids.max: one asyncio loop and the resolver's few threads (issue 40's limits).
LINK_AGENT_PIDS = 64
LINKS_NODE = "(links)"  # its key among the cluster's services
# Docker secrets' file names under /run/secrets: an agent's (emu.agent.config.SECRETS_FILE's
# content), the link agents' token.
AGENT_SECRET = "foglab-agent.json"
LINK_TOKEN = "foglab-link-token"
# Containers an overlay of Docker's default size (a /24) holds: 256 less the network's and
# broadcast addresses, its gateway, and a load balancer's address per node (one node here).
DEFAULT_OVERLAY_CONTAINERS = 252


def check_encryption(client: docker.DockerClient, target: SwarmTarget | None,
                     where: str = "run.swarm_encrypted") -> None:
    """Refuse an encrypted overlay where this host's kernel, which the nodes share, cannot
    encrypt it (emu.engines.swarm.ipsec): its traffic between nodes would be dropped, not encrypted.
    Nodes on other kernels (a target of other hosts) are their owners' to know."""
    from emu.engines.swarm import ipsec

    engines = getattr(client.api, "engines", None) or {"this host": client.api}
    kernels = [api.info().get("KernelVersion", "") for api in engines.values()]
    if not ipsec.on_this_kernel(kernels):
        return
    refusal = ipsec.kernel_refusal()
    if refusal is not None:
        nodes = "this host's engine" if target is None else f"{len(engines)} nodes on this host"
        raise ClusterError(f"{where}: the overlay cannot be encrypted here ({nodes}): "
                           f"{refusal}; on a kernel with CONFIG_INET_ESP and AES-GCM it can, "
                           f"or drop {where}")


def overlay_name(cluster: str) -> str:
    return f"foglab-{cluster}"


def link_service_name(cluster: str) -> str:
    """Not a node's name: a topology's node names start with a letter or digit."""
    return f"foglab-{cluster}--links"


def host_network_name(cluster: str) -> str:
    return f"foglab-{cluster}-host"


def swarm_nodes(client: docker.DockerClient) -> list[dict]:
    """The swarm's ready nodes; ClusterError when this engine is no swarm manager."""
    swarm = client.info().get("Swarm") or {}
    if swarm.get("LocalNodeState") != "active" or not swarm.get("ControlAvailable"):
        raise ClusterError(
            f"run.engine swarm: this Docker Engine is not a swarm manager (swarm state "
            f"{swarm.get('LocalNodeState') or 'unknown'}): `docker swarm init` makes this host "
            f"a one-node swarm, or point DOCKER_HOST at a manager of your swarm")
    return [n for n in client.api.nodes() if (n.get("Status") or {}).get("State") == "ready"]


class SwarmCluster(Cluster):
    """A topology's services, overlay network and shaped links on a Docker Swarm.

    Cluster's options, and: `image_ref(tag)` the reference every node pulls a built image by
    (a registry's push: emu.engines.swarm.image_registry); without it, the local image's ID, which
    serves a one-node swarm: Swarm tries a pull of every task's image named by tag before it starts
    the
    task (from Docker Hub, for foglab's local tags), and skips it for an image named by ID;
    `encrypted` makes the overlay network encrypted (IPsec between nodes); `subnet` (CIDR) is
    its address range, which a plan of more than DEFAULT_OVERLAY_CONTAINERS containers needs
    (Docker's default is a /24); `overlay`: whether the tasks join an overlay network (None:
    when the swarm has several nodes, or `encrypted`; a one-node swarm's bridge serves them
    all, and starts faster). `zygote` is ignored: a service cannot be privileged. `shaper`
    may only be the relay (the link agents').
    """

    engine_name: ClassVar[str] = "swarm"
    live_acl: ClassVar[bool] = False  # the brokers' ACL is a Docker config, fixed while they run
    run_options: ClassVar[Mapping[str, RunOption]] = {
        "swarm_encrypted": RunOption("encrypted", "an encrypted overlay network")}

    @classmethod
    def before_remove(cls, client: docker.DockerClient, cluster: str) -> None:
        """A swarm cluster's services (and configs) first: Swarm holds their containers and
        networks, and removes the containers itself."""
        remove_swarm_objects(client, cluster)

    @classmethod
    def after_remove(cls, client: docker.DockerClient, cluster: str) -> None:
        wait_networks_gone(client, cluster)  # Swarm lets a network go after the call returned

    def __init__(self, plan: ClusterPlan, client: docker.DockerClient | None = None, *,
                 records: Path | None = None, shaper: ShaperChoice | None = None,
                 agent_command: Sequence[str] | None = None, workers: int = WORKERS,
                 progress: Progress | None = None, ready_timeout_s: float = READY_TIMEOUT_S,
                 seed: int | None = None, zygote: bool = False,
                 image_ref: Callable[[str], str] | None = None, encrypted: bool = False,
                 subnet: str | None = None, target: SwarmTarget | None = None,
                 overlay: bool | None = None) -> None:
        self.target = (target or current_target()) if client is None else target
        if client is None and self.target is not None:
            client = routed_client(self.target, workers)
        super().__init__(plan, client, records=records, shaper=shaper,
                         agent_command=agent_command, workers=workers, progress=progress,
                         ready_timeout_s=ready_timeout_s, seed=seed, zygote=False)
        self.agent_start = "exec (swarm: a service cannot run the privileged zygote)"
        self.image_ref = image_ref or (self.target.image_ref if self.target else self._local_id)
        self.encrypted = encrypted
        self.subnet = subnet
        self.overlay = overlay_name(plan.cluster)
        self.wants_overlay = overlay
        self.host_network = host_network_name(plan.cluster)
        self.node_sites: list[str] = []
        self.services: dict[str, str] = {}   # node -> service id
        self.configs: dict[str, str] = {}    # config name -> id
        self._ready: list[dict] = []  # the swarm's ready nodes, as up found them
        self.refs: dict[str, str] = {}       # image name -> the reference services run
        self.placement: dict[str, str] = {}  # node of the plan -> swarm node running its task
        self.link_containers: dict[str, str] = {}  # swarm node -> its link agent's container
        self._collected: set[str] = set()    # nodes whose records are copied to the host
        self._collecting = False

    # -- up: the steps of emu.engines.startup.Startup.up ---------------------------------------

    def _refuse(self) -> None:
        """What a swarm does not run (netem, Spark's shared work folder), an overlay this
        kernel cannot encrypt, an engine that is no swarm manager, nodes the target lacks."""
        if self.shaper is not None and self.shaper.shaper != "relay":
            raise ClusterError(f"cluster {self.name}: run.engine swarm shapes links with relays "
                               f"only, not {self.shaper.shaper} (netem on a swarm needs a "
                               f"privileged helper per node: not built)")
        shared = next((c for c in self.plan.containers.values() if c.shared_records), None)
        if shared is not None:
            raise ClusterError(f"cluster {self.name}: topology.spark on run.engine swarm: the "
                               f"Spark VMs' shared work folder ({shared.node} mounts "
                               f"{', '.join(shared.shared_records)}'s) is not built on a swarm; "
                               f"run it on engine docker")
        if self.encrypted:  # before anything: a kernel that cannot encrypt is the first
            check_encryption(self.client, self.target)
        self._ready = swarm_nodes(self.client)
        self._check_nodes(self._ready)

    def _taken(self) -> bool:
        label = {"label": [f"{inventory.CLUSTER}={self.name}"]}
        return bool(self.client.api.services(filters=label)
                    or inventory.networks(self.client, self.name)
                    or inventory.containers(self.client, self.name))

    def _arrange(self) -> None:
        """The overlay or not (one node: its bridge joins every task), and its size; the
        sites the swarm's nodes are labelled with."""
        if self.wants_overlay is None:
            self.wants_overlay = len(self._ready) > 1 or self.encrypted
        if not self.wants_overlay:
            self.overlay = ""
        if (self.overlay and self.subnet is None
                and len(self.plan.containers) > DEFAULT_OVERLAY_CONTAINERS):
            raise ClusterError(
                f"cluster {self.name}: {len(self.plan.containers)} containers do not fit the "
                f"overlay network's default /24 (at most {DEFAULT_OVERLAY_CONTAINERS}): give "
                f"SwarmCluster a subnet, e.g. subnet='10.200.0.0/20', free on every node")
        self.node_sites = sorted({(n.get("Spec") or {}).get("Labels", {}).get(SITE_LABEL)
                                  for n in self._ready} - {None})

    def _make_links(self) -> NodeLinks:
        self.shaper = self.shaper or RELAY_SHAPER
        return NodeLinks(self.plan, self.seed)

    # The plain engine's other steps do nothing here: no zygote to wait for, and relayed links
    # (no netem to attach, no service joining its clients' networks).

    def _after_ready(self) -> None:
        """Nothing: a service spec has no CPU share to give back."""

    def _running(self) -> None:
        """Where each task runs; on several nodes, the records are copied from now on."""
        self.placement = {}
        if self.target is not None:
            api = self.client.api
            self.placement = {s.node: api.node_of(s.container) or "" for s in self.status()}
        self._collecting = self.target is not None

    def _facts(self, seconds: float) -> dict[str, object]:
        assert isinstance(self.links, NodeLinks)
        return {**super()._facts(seconds), "engine": self.engine_name,
                "swarm_nodes": len(self._ready), "placement": dict(self.placement),
                "overlay": self.overlay, "link_agents": sorted(self.links.agents),
                "encrypted": self.encrypted, "image_refs": dict(self.refs),
                "networks": {"overlay": self.overlay, "host": self.host_network}}

    def _local_id(self, tag: str) -> str:
        return self.client.api.inspect_image(tag)["Id"]

    def _check_nodes(self, nodes: list[dict]) -> None:
        """Several nodes need a target (each node's engine, the relays' address, a registry):
        without one, the relays on this host's bridge reach only this node's containers; with
        one, every ready node's engine must be in it."""
        if self.target is None:
            if len(nodes) > 1 and self.plan.links:
                link = self.plan.links[0]
                raise ClusterError(
                    f"cluster {self.name}: link {link.client} -> {link.service} cannot be "
                    f"shaped on a swarm of {len(nodes)} nodes without a target: foglab must "
                    f"know each node's engine, where the nodes reach this host and a registry "
                    f"(FOGLAB_SWARM_ENGINES, FOGLAB_SWARM_REGISTRY: "
                    f"docs/swarm.md)")
            return
        for node in nodes:
            hostname = (node.get("Description") or {}).get("Hostname", "")
            if hostname not in self.target.engines:
                raise ClusterError(
                    f"cluster {self.name}: swarm node {hostname!r} has no engine URL in the "
                    f"target (FOGLAB_SWARM_ENGINES names {', '.join(self.target.engines)}): "
                    f"its tasks could not be inspected nor their records copied")

    def _ensure_images(self) -> None:
        """Build on this host's engine (a target's nodes pull what image_ref pushes); `refs`
        the references the services run."""
        if self.target is None:
            super()._ensure_images()
        else:
            import docker

            with contextlib.closing(docker.from_env(timeout=DOCKER_TIMEOUT_S)) as host:
                specs = {p.image.name: p.image for p in self.plan.containers.values()}
                for done, (name, spec) in enumerate(specs.items()):
                    self.progress("image", done, len(specs), name)
                    self.images[name] = ensure_image(spec, client=host).tag
            self.progress("image", len(specs), len(specs), "images ready")
        self.refs = {name: self.image_ref(tag) for name, tag in self.images.items()}

    def _start_machinery(self) -> None:
        """The link agents: a global service in each node's own network stack (the links'
        relays, emu.links.link_agent), from the services image; wait until one runs on every ready
        node, read its control port from its log, and hand them to the links."""
        from docker import types

        assert isinstance(self.links, NodeLinks) and self._made is not None
        image = self.refs.get(SERVICES.name) or self.image_ref(self._services_image())
        labels = {**self._labels(self.plan.labels), "foglab.role": inventory.LINK_AGENT_ROLE,
                  "foglab.kind": inventory.LINK_AGENT_ROLE}
        with interrupts_deferred():  # the token as a Docker secret, not in the environment
            token = self.client.api.create_secret(f"foglab-{self.name}--link-token",
                                                  self.links.token.encode(), labels=labels)
        task = types.TaskTemplate(
            types.ContainerSpec(image, command=list(LINK_AGENT_COMMAND), labels=labels,
                                env={TOKEN_FILE_VARIABLE: f"/run/secrets/{LINK_TOKEN}"},
                                secrets=[types.SecretReference(token["ID"], f"foglab-{self.name}"
                                                               f"--link-token", LINK_TOKEN,
                                                               mode=0o400)],
                                stop_grace_period=STOP_GRACE_NS),
            restart_policy=types.RestartPolicy(condition="none"),
            resources={"Limits": {"Pids": LINK_AGENT_PIDS}},
            log_driver=types.DriverConfig("json-file", LOG_OPTIONS))
        with interrupts_deferred():
            created = self.client.api.create_service(
                task, name=link_service_name(self.name), labels=labels,
                mode=types.ServiceMode("global"), networks=["host"])
        self.services[LINKS_NODE] = created["ID"]
        self.links.connect(self._link_controls(created["ID"]))

    def _services_image(self) -> str:
        """The services image's tag, built here if the plan did not need it."""
        if SERVICES.name not in self.images:
            import docker

            with contextlib.closing(docker.from_env(timeout=DOCKER_TIMEOUT_S)) as host:
                self.images[SERVICES.name] = ensure_image(SERVICES, client=host).tag
        return self.images[SERVICES.name]

    def _link_controls(self, service: str) -> dict[str, tuple[str, int]]:
        """node hostname -> where its link agent's control port answers: the node's address
        (this host's loopback on a one-node swarm), the port its agent's log names."""
        api = self.client.api
        hostnames = {n["ID"]: (n.get("Description") or {}).get("Hostname", n["ID"])
                     for n in swarm_nodes(self.client)}
        controls: dict[str, tuple[str, int]] = {}
        deadline = time.monotonic() + self.ready_timeout_s
        while len(controls) < len(hostnames):
            for task in api.tasks(filters={"service": service}):
                node = hostnames.get(task.get("NodeID", ""))
                status = task.get("Status") or {}
                container = (status.get("ContainerStatus") or {}).get("ContainerID")
                if node is None or node in controls:
                    continue
                if status.get("State") in FAILED_TASK_STATES:
                    raise ClusterError(f"the link agent of cluster {self.name} on swarm node "
                                       f"{node} did not run ({status.get('State')}: "
                                       f"{status.get('Err') or status.get('Message')})"
                                       + self._task_log(container))
                if status.get("State") == "running" and container:
                    log = api.logs(container).decode(errors="replace")
                    if CONTROL_LINE in log:
                        port = int(log.split(CONTROL_LINE, 1)[1].split()[0])
                        host = self.target.address_of(node) if self.target else "127.0.0.1"
                        controls[node] = (host, port)
                        self.link_containers[node] = container
            if len(controls) < len(hostnames):
                if time.monotonic() > deadline:
                    missing = sorted(set(hostnames.values()) - set(controls))
                    raise ClusterError(f"cluster {self.name}: the link agent did not start "
                                       f"within {self.ready_timeout_s:.0f} s on swarm node(s) "
                                       f"{', '.join(missing)}")
                time.sleep(TASK_POLL_S)
        return controls

    def _create_networks(self) -> None:
        """The overlay every service joins, and the swarm-scoped bridge the host reaches."""
        from docker.types import IPAMConfig, IPAMPool

        ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=self.subnet)]) if self.subnet else None
        made = [(self.overlay, "overlay", {"encrypted": ""} if self.encrypted else None, ipam),
                (self.host_network, "bridge", None, None)][0 if self.overlay else 1:]
        for done, (name, driver, options, pool) in enumerate(made):
            with interrupts_deferred():  # as Cluster._create_networks: the engine answers
                self.client.api.create_network(
                    name, driver=driver, options=options, ipam=pool, attachable=True,
                    scope="swarm", labels=self._labels(self.plan.labels), check_duplicate=True)
            self.progress("networks", done + 1, len(made), name)

    def _store_files(self) -> None:
        """The plan's files as Docker configs, each agent's secrets as a Docker secret."""
        for plan in self.plan.containers.values():
            for path, text in plan.files:
                name = config_name(self.name, plan.node, path, text)
                with interrupts_deferred():
                    created = self.client.api.create_config(
                        name, text.encode(), labels=self._labels(self.plan.labels))
                self.configs[name] = created["ID"]
            secret = secrets_text(plan.agent) if plan.agent is not None else None
            if secret:  # the agent's secrets: a Docker secret, not its environment
                name = config_name(self.name, plan.node, SECRETS_FILE, secret)
                with interrupts_deferred():
                    created = self.client.api.create_secret(
                        name, secret.encode(), labels=self._labels(self.plan.labels))
                self.configs[name] = created["ID"]

    def spec(self, plan: ContainerPlan, addresses: Addresses) -> ServiceSpec:
        """The service standing for a container plan, its agent's config pointing at links."""
        command = self.agent_command if plan.role == "agent" and self.agent_command else (
            plan.command)
        labels = {**self._labels(plan.labels), "foglab.network": self.host_network}
        several = self.target is not None
        secret = secrets_text(plan.agent) if plan.agent is not None else None
        spec = service_spec(plan, cluster=self.name,
                            image=self.refs[plan.image.name],
                            command=command, env=agent_environment(self.plan, plan, addresses),
                            labels=labels,
                            records=None if several else str(self.records_dir(plan.node)),
                            overlay=self.overlay, host_network=self.host_network,
                            node_sites=self.node_sites, publish=several)
        if not secret:
            return spec
        name = config_name(self.name, plan.node, SECRETS_FILE, secret)
        return replace(spec, secrets=((name, AGENT_SECRET),),
                       env={**spec.env, SECRETS_VARIABLE: f"/run/secrets/{AGENT_SECRET}"})

    def _start(self, plans: list[ContainerPlan], addresses: Addresses,
               done: int, total: int) -> None:
        """Create the services in parallel, then wait until each one's task runs."""
        if not plans:
            return
        self._in_parallel(plans, addresses, name="service")
        self._wait_tasks(plans, done, total)

    def _run(self, plan: ContainerPlan, addresses: Addresses) -> str | None:
        if self._cancel.is_set():
            return None
        arguments = self.spec(plan, addresses).create_arguments(self.configs)
        created = self.client.api.create_service(**arguments)
        self.services[plan.node] = created["ID"]
        return created["ID"]

    def _wait_tasks(self, plans: list[ContainerPlan], done: int, total: int) -> None:
        """Wait until each service's task runs (its container's id noted), or fail naming the
        first whose task Swarm could not start, with the task's error."""
        assert self._made is not None
        by_service = {self.services[p.node]: p for p in plans}
        pending = dict(by_service)
        deadline = time.monotonic() + self.ready_timeout_s
        while pending:
            for task in self.client.api.tasks(filters={"service": list(pending)}):
                plan = pending.get(task["ServiceID"])
                if plan is None:
                    continue
                status = task.get("Status") or {}
                state = status.get("State", "")
                container = (status.get("ContainerStatus") or {}).get("ContainerID")
                if state == "running" and container:
                    self._made.ids[plan.node] = container
                    del pending[task["ServiceID"]]
                    done += 1
                    self.progress("containers", done, total, plan.node)
                elif state in FAILED_TASK_STATES:
                    raise ClusterError(
                        f"{plan.role} {plan.node} of cluster {self.name}: Swarm could not run "
                        f"its task ({state}: {status.get('Err') or status.get('Message')})"
                        + self._task_log(container))
            if pending and time.monotonic() > deadline:
                plan = next(iter(pending.values()))
                raise ClusterError(f"{plan.role} {plan.node} of cluster {self.name}: its Swarm "
                                   f"task did not run within {self.ready_timeout_s:.0f} s")
            if pending:
                time.sleep(TASK_POLL_S)

    def _task_log(self, container: str | None) -> str:
        if not container:
            return ""
        try:
            return "; its log ends:\n" + self.client.api.logs(container, tail=20).decode(
                errors="replace")
        except Exception:  # noqa: BLE001 - the log is a courtesy in an error message
            return ""

    # -- while up: several nodes ---------------------------------------------------------------

    def status(self) -> list[NodeStatus]:
        """Each task's container, from every node's engine; on several nodes its `ip` is its
        node's address, where its published port answers (the host cannot reach a node's
        bridges)."""
        found = super().status()
        if self.target is None:
            return found
        api = self.client.api
        found = [replace(s, ip=self.target.address_of(node))
                 if (node := api.node_of(s.container)) else s for s in found]
        return found + self._lost(found)

    def _lost(self, listed: list[NodeStatus]) -> list[NodeStatus]:
        """The tasks of nodes that left the swarm mid-run, state `lost` (their engines no
        longer list them): a fault, as a crashed container is."""
        left = self.departed()
        if not left or self._made is None:
            return []
        seen = {s.node for s in listed}
        lost = []
        for node, swarm_node in self.placement.items():
            if swarm_node in left and node not in seen and node in self._made.ids:
                plan = self.plan.containers[node]
                lost.append(NodeStatus(node, plan.kind, plan.role, plan.name,
                                       self._made.ids[node], "lost",
                                       f"swarm node {swarm_node} left", "", "", ""))
        return lost

    def departed(self) -> dict[str, float]:
        """Swarm nodes that left mid-run (their engine stopped answering) -> when (host's
        clock, time.time())."""
        return dict(getattr(self.client.api, "left", {}))

    @property
    def records_root(self) -> Path:
        """The host's records folder; on several nodes, the records of every task whose
        container has ended are copied into it first (once each)."""
        self.collect_records()
        return self._records_base()

    def collect_records(self, final: bool = False) -> list[str]:
        """Copy the records of the tasks that ended (`final`: of every task, ended or not)
        from their nodes into the host's folder; the nodes copied. Nothing on one node."""
        if not self._collecting or self._made is None:
            return []
        from docker.errors import NotFound

        api = self.client.api
        copied = []
        for node, container in list(self._made.ids.items()):
            if node in self._collected:
                continue
            try:
                running = api.inspect_container(container)["State"].get("Running")
            except NodeLeft:  # its records went with its host: said in the run's facts
                lost = self.facts.setdefault("records_lost", [])
                if node not in lost:
                    lost.append(node)
                continue
            except NotFound:
                continue
            if running and not final:
                continue
            copy_records(api, container, self._records_base() / node)
            self._collected.add(node)
            copied.append(node)
        return copied

    def revive(self, node: str, revival: dict) -> None:
        raise ClusterError(f"cluster {self.name}: reviving {node} is not supported on "
                           f"run.engine swarm (a service's ended task is not restarted)")

    # -- down ----------------------------------------------------------------------------------

    def _before_removal(self) -> None:
        with contextlib.suppress(Exception):  # best effort: `down` must go on
            self.collect_records(final=True)

    def _remove(self) -> Removed:
        """Services and configs first (Swarm removes their containers), then what is left:
        containers, networks (once Swarm let them go), the scratch folder."""
        self._collecting = False
        removed = remove_cluster(self.client, self.name)
        self._remove_scratch()
        return removed


def routed_client(target: SwarmTarget, workers: int = WORKERS) -> RoutedClient:
    """Clients of the target's manager and of every node's engine, as one routed client."""
    import docker

    def client(url: str) -> docker.DockerClient:
        return docker.DockerClient(base_url=url, timeout=DOCKER_TIMEOUT_S,
                                   max_pool_size=workers + 4)

    engines = {node: client(url) for node, url in target.engines.items()}
    return RoutedClient(engines[target.manager], engines)
