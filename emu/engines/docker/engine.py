"""Bring a cluster plan up as running containers on this host's Docker Engine, and down again
leaving nothing behind.

The order of `up` and its clean-up are emu.engines.startup.Startup's; this class supplies its
steps: images; a records directory per node; the site networks (bridges); the services
(brokers, ZooKeeper, idle coordinators) and the agents' zygote (emu.engines.docker.zygote);
the links (relays need the services' addresses, and the agents need the relays' addresses in
their config); the agents; then wait for the services to answer.
Containers start in parallel through the engine's API (create then start; for a gateway whose
agent the zygote forks, its pid and the zygote's request too): on a 2-core host the engine's own
work per container is the limit, about 0.5 s of CPU on a user-defined network (measured here),
where a forked agent costs about 0.2 s. An agent started afresh under QEMU (no zygote) costs
about 1.1 s, and yields the CPU (a cpu share of 2) until every container is up and every
service answers, so that the containers still starting are not starved; the default share
(1024) comes back once all are up.

Anything that goes wrong during `up` (a Docker error, a service that never answers, Ctrl-C)
removes everything made so far, by the cluster's label, before the error propagates; a plan
error comes before anything is made. So that a Ctrl-C at any moment leaves nothing: what this
thread asks the engine to make (a network, the zygote, a network connection) holds the Ctrl-C
until the engine has answered, containers made on worker threads are waited for, the scratch
folder is named before it is made, and relays are known before they start.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from emu.agent.config import RECORDS_DIR, SECRETS_FILE, secrets_text
from emu.cluster.capacity import check_host_cap
from emu.cluster.grants import Grants
from emu.cluster.links import Links, make_links
from emu.cluster.plan import SPARK_WORK, ClusterPlan, ContainerPlan
from emu.cluster.tls import host_context
from emu.engines import ENGINE_LABEL
from emu.engines.agent_environment import agent_environment
from emu.engines.base import ClusterError, NodeStatus, Removed, RunOption, interrupts_deferred
from emu.engines.docker import inventory
from emu.engines.docker.acl_reload import cluster_grants
from emu.engines.docker.image_store import DOCKER_TIMEOUT_S, ensure_image
from emu.engines.docker.nodes import DockerLocator, DockerNode
from emu.engines.docker.zygote import (
    Zygote,
    start_zygote,
    static_busybox,
    wait_listening,
    waiter_binds,
    waiter_command,
)
from emu.engines.startup import READY_TIMEOUT_S, WORKERS, Addresses, Progress, Startup
from emu.images import GATEWAY, ImageSpec
from emu.links.probe import ShaperChoice, choose_shaper
from emu.links.spec import LinkShape

if TYPE_CHECKING:
    import docker

STARTING_CPU_SHARES = 2
DEFAULT_CPU_SHARES = 1024
LOG_CONFIG = {"type": "json-file", "config": {"max-size": "10m", "max-file": "2"}}


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    output: bytes


class Cluster(Startup):
    """A topology's containers, networks and shaped links, running on one Docker Engine.

    The options of emu.engines.startup.Startup (records, agent_command, progress, ...), and:
    `shaper` skips the netem probe. `zygote`: the gateways' agents are forked from one warm
    interpreter (emu.agent.zygote) rather than each started afresh, where the host has a
    static busybox; `facts` says which.
    """

    engine_name: ClassVar[str] = "docker"  # its name in emu.engines.ENGINES
    # Whether a closed cluster's brokers take a new ACL while they run (emu.cluster.grants:
    # a move's target is granted its reads then, not every possible target from the start).
    live_acl: ClassVar[bool] = True
    # The run fields it takes besides the plan (emu.engines.engine_options): none.
    run_options: ClassVar[Mapping[str, RunOption]] = {}

    @classmethod
    def before_remove(cls, client: docker.DockerClient, cluster: str) -> None:
        """`foglab emu down`, before the cluster's containers and networks are removed."""

    @classmethod
    def after_remove(cls, client: docker.DockerClient, cluster: str) -> None:
        """`foglab emu down`, after the cluster's containers and networks are removed."""

    def __init__(self, plan: ClusterPlan, client: docker.DockerClient | None = None, *,
                 records: Path | None = None, shaper: ShaperChoice | None = None,
                 agent_command: Sequence[str] | None = None, workers: int = WORKERS,
                 progress: Progress | None = None, ready_timeout_s: float = READY_TIMEOUT_S,
                 seed: int | None = None, zygote: bool = True) -> None:
        super().__init__(plan, records=records, agent_command=agent_command, workers=workers,
                         progress=progress, ready_timeout_s=ready_timeout_s, seed=seed)
        self._client = client
        self.shaper = shaper
        self.agent_start = self._agent_start(zygote)
        self.zygote: Zygote | None = None
        self._owner = inventory.owner_token()

    def _agent_start(self, zygote: bool) -> str:
        """How the gateways' agents start: "zygote", or "exec" and why not the zygote."""
        gateways = [a for a in self.plan.agents() if a.image.name == GATEWAY.name]
        if not gateways or self.agent_command is not None:
            return "exec"
        if not zygote:
            return "exec (zygote off)"
        missing = static_busybox()
        return f"exec ({missing})" if missing else "zygote"

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            import docker

            self._client = docker.from_env(timeout=DOCKER_TIMEOUT_S,
                                           max_pool_size=self.workers + 4)
        return self._client

    # -- up: the steps of emu.engines.startup.Startup.up ---------------------------------------

    def _refuse(self) -> None:
        check_host_cap(self.plan)  # a plan beyond what this host takes

    def _taken(self) -> bool:
        return bool(inventory.containers(self.client, self.name)
                    or inventory.networks(self.client, self.name))

    def _make_links(self) -> Links:
        if self.shaper is None:
            self.progress("shaper", 0, 1, "probing kernel netem")
            self.shaper = choose_shaper()
        return make_links(self.shaper.shaper, self.plan, self.seed, DockerLocator())

    def _connect_services(self) -> None:
        assert self.links is not None and self._made is not None
        for service, joined in self.links.service_networks().items():
            for network in sorted(joined):
                with interrupts_deferred():
                    self.client.api.connect_container_to_network(
                        self._made.ids[service], network, aliases=[service])

    def _before_agents(self) -> None:
        if self.zygote is not None:
            self.progress("zygote", 0, 1, "waiting for the agents' zygote")
            wait_listening(self.client, self.zygote)
            self.progress("zygote", 1, 1, "zygote listening")

    def _after_agents(self) -> None:
        assert self.links is not None
        if self.links.shaper == "netem":
            self.links.attach({n: self._pid(n) for n in (a.node for a in self.plan.agents())})

    def _start_machinery(self) -> None:
        """Start the zygote's container; it imports the agent while the links are made."""
        if self.agent_start != "zygote":
            return
        with interrupts_deferred():  # see _create_networks
            gateways = [a for a in self.plan.agents() if a.image.name == GATEWAY.name]
            self.zygote = start_zygote(self.client, self.name, self.images[GATEWAY.name],
                                       self._labels(self.plan.labels), LOG_CONFIG,
                                       len(gateways))

    def _forked(self, plan: ContainerPlan) -> bool:
        return self.zygote is not None and plan.role == "agent" and (
            plan.image.name == GATEWAY.name)

    def _labels(self, labels: dict[str, str]) -> dict[str, str]:
        """Labels plus the cluster's facts, which `foglab emu` reads from another process (its
        engine's name: `foglab emu down` removes it through that engine's hooks)."""
        assert self.shaper is not None and self._made is not None
        extra = {"foglab.shaper": self.shaper.shaper, inventory.OWNER: self._owner,
                 "foglab.records": str(self.records_root), ENGINE_LABEL: self.engine_name}
        if self._made.scratch is not None:
            extra[inventory.SCRATCH] = str(self._made.scratch)
        return {**labels, **extra}

    def _ensure_images(self) -> None:
        specs: dict[str, ImageSpec] = {}
        for plan in self.plan.containers.values():
            specs.setdefault(plan.image.name, plan.image)
        for done, (name, spec) in enumerate(specs.items()):
            def stage(step: str, fraction: float | None, name: str = name,
                      done: int = done) -> None:
                self.progress("image", done, len(specs), f"{name}: {step}")

            built = ensure_image(spec, client=self.client, progress=stage)
            self.images[name] = built.tag
        self.progress("image", len(specs), len(specs), "images ready")

    def _create_networks(self) -> None:
        networks = list(self.plan.networks.values())
        for done, network in enumerate(networks):
            # A Ctrl-C waits for the engine's answer: cut short, the request goes on in the
            # engine, which could make the network after `down` looked for it (measured: one
            # network left of eight interrupted starts).
            with interrupts_deferred():
                created = self.client.api.create_network(network.name, driver="bridge",
                                                         labels=self._labels(network.labels),
                                                         check_duplicate=True)
            config = self.client.api.inspect_network(created["Id"])["IPAM"]["Config"]
            self.bridges[network.segment] = config[0]["Gateway"]
            self.progress("networks", done + 1, len(networks), network.name)

    def _start(self, plans: list[ContainerPlan], addresses: Addresses,
               done: int, total: int) -> None:
        """Create and start containers in parallel; report each on this thread."""
        def started(plan: ContainerPlan) -> None:
            nonlocal done
            done += 1
            self.progress("containers", done, total, plan.node)

        self._in_parallel(plans, addresses, started)

    def _run(self, plan: ContainerPlan, addresses: Addresses) -> str | None:
        """Create and start one container; the least work per container the engine allows."""
        if self._cancel.is_set():
            return None
        api = self.client.api
        command = self.agent_command if plan.role == "agent" and self.agent_command else (
            plan.command)
        binds = {str(self.records_dir(plan.node)): {"bind": RECORDS_DIR, "mode": "rw"}}
        forked = self._forked(plan)
        if forked:
            command = waiter_command()  # the container's process; the zygote forks the agent
            binds.update(waiter_binds())
        # "host:container:mode" strings: a Spark cluster's drivers' work at one path on all
        # its VMs, a driver's own records folder a second time.
        binds = [f"{host}:{bind['bind']}:{bind['mode']}" for host, bind in binds.items()] + [
            f"{self.records_dir(node)}:{SPARK_WORK}/{node}:rw" for node in plan.shared_records]
        environment = agent_environment(self.plan, plan, addresses)
        host_config = api.create_host_config(
            nano_cpus=plan.nano_cpus, mem_limit=plan.mem_limit, binds=binds,
            pids_limit=plan.pids_limit,
            network_mode=plan.network, log_config=LOG_CONFIG,
            # A cloud VM's agent runs Spark jobs as its children: an init reaps what they
            # leave, or the engine cannot kill a container whose process is a zombie.
            init=plan.kind == "cloud_vm" or None)
        networking = api.create_networking_config(
            {plan.network: api.create_endpoint_config(aliases=[plan.node])})
        created = api.create_container(
            self.images[plan.image.name], list(command) or None, name=plan.name,
            hostname=plan.node, labels=self._labels(plan.labels),
            environment=environment, host_config=host_config,
            networking_config=networking, detach=True)
        container = created["Id"]
        assert self._made is not None
        self._made.ids[plan.node] = container
        # An agent the zygote forks takes its secrets in the request: no file, and no second
        # call to the engine per gateway (a put_archive each cost 200 gateways 6 s).
        secret = secrets_text(plan.agent) if plan.agent is not None and not forked else None
        if plan.files or secret:
            api.put_archive(container, "/", _archive(
                plan.files, ((SECRETS_FILE, secret),) if secret else ()))
        for network in plan.extra_networks:
            api.connect_container_to_network(container, network, aliases=[plan.node])
        if self._cancel.is_set():
            return container
        api.start(container)
        if forked:
            self._fork_agent(plan, container, addresses)
        elif plan.role == "agent":
            self._set_shares(plan, STARTING_CPU_SHARES)
        return container

    def _set_shares(self, plan: ContainerPlan, shares: int) -> None:
        """Set an agent container's CPU share. A process that could not start behind an init
        (a cloud VM's) ends after `start` returned: name it and its command, not the engine's
        refusal to update a stopped container."""
        from docker.errors import APIError

        assert self._made is not None
        container = self._made.ids[plan.node]
        try:
            self.client.api.update_container(container, cpu_shares=shares)
        except APIError as error:
            if self.client.api.inspect_container(container)["State"].get("Running"):
                raise
            self._ended(plan, error)

    def _after_ready(self) -> None:
        """Every agent not forked back to the default CPU share."""
        assert self._made is not None
        agents = [a for a in self.plan.agents() if not self._forked(a)]
        if not agents:
            return
        with ThreadPoolExecutor(min(self.workers, len(agents))) as pool:
            list(pool.map(lambda agent: self._set_shares(agent, DEFAULT_CPU_SHARES), agents))

    def _ended(self, plan: ContainerPlan, error: Exception | None = None) -> None:
        assert self._made is not None
        state = self.client.api.inspect_container(self._made.ids[plan.node])["State"]
        command = self.agent_command or plan.command
        raise ClusterError(
            f"{plan.role} {plan.node} of cluster {self.name} ended as it started (exit code "
            f"{state.get('ExitCode')}, command {' '.join(command)!r}); its log ends:\n"
            + self._log_tail(plan.node)) from error

    def _pid(self, node: str) -> int:
        assert self._made is not None
        return self.client.api.inspect_container(self._made.ids[node])["State"]["Pid"]

    def revive(self, node: str, revival: dict) -> None:
        """Start the container of an agent node that was killed (a crash healed) with its
        agent: the records' last line the kill cut is dropped, the revival (the run's epoch,
        the agent's incarnation, the operators that left the node: emu.agent.config.revived)
        written beside them (never through a link the container planted: emu.agent.records);
        a container whose process is the agent starts it again itself, a forked agent's
        container is given one by the zygote again."""
        import json

        from emu.agent.config import REVIVAL_FILE
        from emu.agent.records import trim_cut_lines, write_record

        assert self._made is not None
        plan = self.plan.containers[node]
        records = self.records_dir(node)
        trim_cut_lines(records)
        write_record(records, REVIVAL_FILE, json.dumps(revival).encode())
        self.client.api.start(self._made.ids[node])
        if self._forked(plan):
            self._fork_agent(plan, self._made.ids[node], self.addresses)

    def _fork_agent(self, plan: ContainerPlan, container: str,
                    addresses: Addresses) -> None:
        """Have the zygote start a node's agent in its running container; its relays learn
        the container's address from the zygote's check of it (no lookup of their own)."""
        assert self.zygote is not None
        self.zygote.start_agent(
            container, agent_environment(self.plan, plan, addresses, keep_secrets=True),
            plan.node)
        address = self.zygote.addresses.pop(container, {}).get(plan.network)
        if address and self.links is not None:
            self.links.admit(plan.node, address)

    def _log_tail(self, node: str, lines: int = 20) -> str:
        try:
            return self.client.api.logs(self._container(node), tail=lines).decode(
                errors="replace")
        except Exception as error:  # noqa: BLE001 - the log is a courtesy in an error message
            return f"(no log: {error})"

    def _facts(self, seconds: float) -> dict[str, object]:
        assert self.shaper is not None and self.links is not None
        return {
            "cluster": self.name, "topology": self.plan.topology,
            "shaper": self.shaper.shaper, "shaper_reason": self.shaper.reason,
            "agent_start": self.agent_start,
            "images": dict(self.images),
            "networks": {n.segment: n.name for n in self.plan.networks.values()},
            "containers": len(self.plan.containers), "zookeeper": list(self.plan.zookeeper),
            "links": len(self.plan.links), "records": str(self.records_root),
            "up_s": round(seconds, 2), "images_s": round(self._images_s, 2),
        }

    # -- while up ------------------------------------------------------------------------------

    def _container(self, node: str) -> str:
        if self._made is not None and node in self._made.ids:
            return self._made.ids[node]
        return inventory.find_container(self.client, self.name, node)["Id"]

    def status(self) -> list[NodeStatus]:
        """Each container: node, kind, id, state, IP on its own network, image."""
        return inventory.node_status(self.client, self.name)

    def departed(self) -> dict[str, float]:
        """Hosts of the cluster that left mid-run -> when (time.time()): none on one host
        (a swarm's nodes may: emu.engines.swarm.engine)."""
        return {}

    def address(self, client: str, service: str) -> str:
        """Where `client` reaches `service`: a relay on the host, or the service directly."""
        return self.addresses[(client, service)]

    def reshape(self, client: str, service: str, shape: LinkShape) -> None:
        if self.links is None:
            raise ClusterError(f"cluster {self.name} is not up")
        self.links.reshape(client, service, shape)

    def node(self, name: str) -> DockerNode:
        """The node's container, to kill, stop, start, limit, inspect (emu.engines.docker.nodes):
        by its id, which every engine's containers have (a Swarm task's name is Swarm's)."""
        return DockerNode(self.client.api, self._container(name))

    def grants(self) -> Grants | None:
        """A closed cluster's read grants (emu.cluster.grants), made from the broker containers
        this host's engine lists: None for an open cluster."""
        if self.plan.access is None:
            return None
        return cluster_grants(self.name, self.client, tls=host_context(self.plan),
                              access=self.plan.access)

    def exec(self, node: str, command: Sequence[str] | str) -> ExecResult:
        """Run a command in a node's container to its end; its stdout and stderr together."""
        return run_in(self.client, self._container(node), command)

    def logs(self, node: str, follow: bool = False) -> Iterator[bytes]:
        return inventory.follow_logs(self.client, self._container(node), follow)

    # -- down ----------------------------------------------------------------------------------

    def _remove(self) -> Removed:
        """Everything of the cluster by its label (inventory.remove), its scratch folder."""
        removed = inventory.remove(self.client, self.name, end_owner_process=False)
        self._remove_scratch()
        self.zygote = None
        return removed

    def _remove_scratch(self) -> None:
        if self._made is not None and self._made.scratch is not None:
            inventory.remove_scratch(str(self._made.scratch))


def run_in(client: docker.DockerClient, container: str,
           command: Sequence[str] | str) -> ExecResult:
    api = client.api
    execution = api.exec_create(container, command if isinstance(command, str) else list(command),
                                stdout=True, stderr=True)
    output = api.exec_start(execution["Id"])
    return ExecResult(api.exec_inspect(execution["Id"])["ExitCode"], output)


def _archive(files: tuple[tuple[str, str], ...],
             private: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A tar of `files` (0644) and `private` ones (root's, 0400, in a 0700 folder)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for folder in sorted({posixpath.dirname(path.lstrip("/")) for path, _ in private}):
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o700, int(time.time())
            archive.addfile(info)
        for mode, entries in ((0o644, files), (0o400, private)):
            for path, text in entries:
                data = text.encode()
                info = tarfile.TarInfo(path.lstrip("/"))
                info.size, info.mode, info.mtime = len(data), mode, int(time.time())
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
