"""Bring a cluster plan up as running containers, and down again leaving nothing behind.

Order: images; a records directory per node; the site networks; the services (brokers,
ZooKeeper, idle coordinators) and the agents' zygote (emu.engines.docker.zygote); the links (relays
need the services' addresses, and the agents need the relays' addresses in their config); the
agents; then wait for the services to answer.
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

import contextlib
import io
import posixpath
import secrets
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Self

from emu.agent.config import (
    CONFIG_VARIABLE,
    RECORDS_DIR,
    SECRETS_FILE,
    secrets_text,
    without_secrets,
)
from emu.cluster.access import save as save_access
from emu.cluster.capacity import check_host_cap
from emu.cluster.links import Links, make_links
from emu.cluster.plan import SPARK_WORK, ClusterPlan, ContainerPlan
from emu.cluster.services import mqtt_answers, zookeeper_answers
from emu.engines import ENGINE_LABEL
from emu.engines.base import Made, NodeStatus, Removed, RunOption, interrupts_deferred
from emu.engines.docker import inventory
from emu.engines.docker.nodes import DockerLocator, DockerNode
from emu.engines.docker.zygote import (
    Zygote,
    start_zygote,
    static_busybox,
    wait_listening,
    waiter_binds,
    waiter_command,
)
from emu.images import DOCKER_TIMEOUT_S, GATEWAY, ImageSpec, ensure_image
from emu.links.probe import ShaperChoice, choose_shaper
from emu.links.spec import LinkShape
from workloads.spark.jvm import JVM_OPTIONS_VARIABLE, jvm_options

if TYPE_CHECKING:
    import docker

# (stage, done, total, detail): stages are shaper, image, networks, containers, zygote, ready.
Progress = Callable[[str, int, int, str], None]
WORKERS = 16
READY_TIMEOUT_S = 180
STARTING_CPU_SHARES = 2
DEFAULT_CPU_SHARES = 1024
LOG_CONFIG = {"type": "json-file", "config": {"max-size": "10m", "max-file": "2"}}


class ClusterError(RuntimeError):
    """A cluster could not be brought up (after cleaning up) or is not there."""


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    output: bytes


def _noop(stage: str, done: int, total: int, detail: str) -> None:
    pass


class Cluster:
    """A topology's containers, networks and shaped links, running on one Docker Engine.

    `records`: the folder under which each node's records directory (mounted at /records)
    is made; without it, a scratch folder that `down` removes. `agent_command` replaces the
    agents' `python3 -m emu.agent` (a test, or a stand-in). `shaper` skips the netem probe.
    `zygote`: the gateways' agents are forked from one warm interpreter (emu.agent.zygote)
    rather than each started afresh, where the host has a static busybox; `facts` says which.
    `progress` hears each stage and each container started, on the calling thread: raising
    there (Ctrl-C) aborts `up` and cleans up.
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
        self.plan = plan
        self._client = client
        self.records = Path(records) if records is not None else None
        self.shaper = shaper
        self.agent_command = tuple(agent_command) if agent_command is not None else None
        self.workers = workers
        self.progress = progress or _noop
        self.ready_timeout_s = ready_timeout_s
        self.seed = seed
        self.agent_start = self._agent_start(zygote)
        self.zygote: Zygote | None = None
        self.links: Links | None = None
        self.addresses: dict[tuple[str, str], str] = {}
        self.bridges: dict[str, str] = {}
        self.images: dict[str, str] = {}
        self.facts: dict[str, object] = {}
        self._made: Made | None = None
        self._cancel = threading.Event()
        self._owner = inventory.owner_token()
        self._images_s = 0.0

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

    @property
    def name(self) -> str:
        return self.plan.cluster

    # -- up ------------------------------------------------------------------------------------

    def up(self) -> Self:
        """Make and start everything; on any failure remove what was made, then raise. A
        plan beyond what this host takes is refused first (emu.cluster.capacity.check_host_cap)."""
        if self._made is not None:
            raise ClusterError(f"cluster {self.name} is already up")
        check_host_cap(self.plan)
        if inventory.containers(self.client, self.name) or inventory.networks(self.client,
                                                                             self.name):
            raise ClusterError(f"a cluster named {self.name} exists already: "
                               f"foglab emu down --cluster {self.name}, or choose another name")
        started = time.monotonic()
        self._cancel.clear()
        self._made = Made()
        try:
            if self.shaper is None:
                self.progress("shaper", 0, 1, "probing kernel netem")
                self.shaper = choose_shaper()
            self.links = make_links(self.shaper.shaper, self.plan, self.seed, DockerLocator())
            self._ensure_images()
            self._images_s = time.monotonic() - started
            self._make_records()
            self._create_networks()
            total = len(self.plan.containers)
            services = self.plan.services()
            self._start(services, {}, 0, total)
            self._start_zygote()
            ips = {s.node: s.ip for s in self.status()}
            for service, joined in self.links.service_networks().items():
                for network in sorted(joined):
                    with interrupts_deferred():
                        self.client.api.connect_container_to_network(
                            self._made.ids[service], network, aliases=[service])
            self.addresses = self.links.addresses(ips, self.bridges)
            if self.zygote is not None:
                self.progress("zygote", 0, 1, "waiting for the agents' zygote")
                wait_listening(self.client, self.zygote)
                self.progress("zygote", 1, 1, "zygote listening")
            self._start(self.plan.agents(), self.addresses, len(services), total)
            if self.links.shaper == "netem":
                self.links.attach({n: self._pid(n) for n in
                                   (a.node for a in self.plan.agents())})
            self._wait_ready()
            self._restore_cpu_shares()
            self._check_agents_run()
        except BaseException:
            self._abort()
            raise
        self.facts = self._facts(time.monotonic() - started)
        return self

    def _start_zygote(self) -> None:
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

    @property
    def records_root(self) -> Path:
        assert self._made is not None
        root = self.records or self._made.scratch
        assert root is not None
        return root

    def records_dir(self, node: str) -> Path:
        return self.records_root / node

    def _make_records(self) -> None:
        assert self._made is not None
        access = self.plan.access
        if self.records is None or access is not None:
            # Named before it is made: a Ctrl-C between the two leaves nothing `down` misses.
            scratch = Path(tempfile.gettempdir()) / f"foglab-{self.name}-{secrets.token_hex(4)}"
            self._made.scratch = scratch
            scratch.mkdir(mode=0o700)
        if access is not None:  # a closed cluster's secrets, for the host's `foglab emu`
            save_access(access, self._made.scratch)  # commands from another process
        for node in self.plan.containers:
            self.records_dir(node).mkdir(parents=True, exist_ok=True)

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

    def _start(self, plans: list[ContainerPlan], addresses: dict[tuple[str, str], str],
               done: int, total: int) -> None:
        """Create and start containers in parallel; report each on this thread."""
        def started(plan: ContainerPlan) -> None:
            nonlocal done
            done += 1
            self.progress("containers", done, total, plan.node)

        self._in_parallel(plans, addresses, started)

    def _in_parallel(self, plans: list[ContainerPlan], addresses: dict[tuple[str, str], str],
                     each: Callable[[ContainerPlan], object] | None = None,
                     name: str = "start") -> None:
        """`self._run(plan, addresses)` for every plan on a pool of `workers` threads; `each`
        on this thread as each ends. A failure or an interrupt cancels what has not begun."""
        if not plans:
            return
        pool = ThreadPoolExecutor(min(self.workers, len(plans)), thread_name_prefix=name)
        try:
            futures: dict[Future[str | None], ContainerPlan] = {
                pool.submit(self._run, plan, addresses): plan for plan in plans}
            for future in as_completed(futures):
                future.result()
                if each is not None:
                    each(futures[future])
        except BaseException:
            # In-flight starts finish (their containers carry the label), queued ones never run;
            # a second Ctrl-C must not cut this wait, or one could make a container after
            # `down` listed them.
            self._cancel.set()
            with interrupts_deferred():
                pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _environment(self, plan: ContainerPlan, addresses: dict[tuple[str, str], str], *,
                     keep_secrets: bool = False) -> dict[str, str]:
        """The agent's environment; `keep_secrets`: with its secrets in the config, for the
        zygote's request only (a socket only root reaches), never a container's."""
        if plan.agent is None:
            return {}
        config = plan.agent
        links = self.plan.links_of(plan.node)
        broker = self.plan.brokers.get(plan.node)
        mqtt = [addresses[link.key] for link in links if link.role == "mqtt"
                and link.service == broker]
        zookeeper = [addresses[link.key] for link in links if link.role == "zookeeper"]
        # The spares its drivers may move to (emu.cluster.plan), through their links too.
        spares = {link.service: addresses[link.key] for link in links
                  if link.service in config.spares}
        # The other brokers its operators read on (emu.cluster.plan), likewise.
        others = {link.service: addresses[link.key] for link in links
                  if link.service in config.other_brokers}
        config = replace(config, mqtt=mqtt[0] if mqtt else config.mqtt,
                         zookeeper=",".join(zookeeper), records=RECORDS_DIR, spares=spares,
                         other_brokers=others)
        # Its secrets go in a 0400 file instead (SECRETS_FILE, put by `_run`), or in the
        # zygote's request: the environment is in `docker inspect` for anyone who may use the
        # engine.
        if not keep_secrets:
            config = without_secrets(config)[0]
        # The host's Spark JVM options, for the node's jobs (workloads.spark.jvm).
        options = jvm_options()
        return {CONFIG_VARIABLE: config.to_json(), "PYTHONUNBUFFERED": "1",
                **({JVM_OPTIONS_VARIABLE: options} if options else {})}

    def _run(self, plan: ContainerPlan, addresses: dict[tuple[str, str], str]) -> str | None:
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
        environment = self._environment(plan, addresses)
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

    def _restore_cpu_shares(self) -> None:
        assert self._made is not None
        agents = [a for a in self.plan.agents() if not self._forked(a)]
        if not agents:
            return
        with ThreadPoolExecutor(min(self.workers, len(agents))) as pool:
            list(pool.map(lambda agent: self._set_shares(agent, DEFAULT_CPU_SHARES), agents))

    def _check_agents_run(self) -> None:
        """Fail naming the first agent container that is no longer running (a process that
        could not start behind an init ends after `start` returned)."""
        states = {s.node: s for s in self.status()}
        for agent in self.plan.agents():
            if states[agent.node].state != "running":
                self._ended(agent)

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
                    addresses: dict[tuple[str, str], str]) -> None:
        """Have the zygote start a node's agent in its running container; its relays learn
        the container's address from the zygote's check of it (no lookup of their own)."""
        assert self.zygote is not None
        self.zygote.start_agent(container, self._environment(plan, addresses, keep_secrets=True),
                                plan.node)
        address = self.zygote.addresses.pop(container, {}).get(plan.network)
        if address and self.links is not None:
            self.links.admit(plan.node, address)

    def _wait_ready(self) -> None:
        """Wait until every broker and ZooKeeper server answers, or fail naming the first
        that does not."""
        status = {s.node: s for s in self.status()}
        ensemble = len(self.plan.zookeeper) > 1
        checks: dict[str, Callable[[], bool]] = {}
        for service in self.plan.services():
            ip = status[service.node].ip
            if service.role == "broker":
                checks[service.node] = lambda ip=ip, port=service.port: mqtt_answers(ip, port)
            elif service.role == "zookeeper":
                checks[service.node] = lambda ip=ip, port=service.port: zookeeper_answers(
                    ip, port, quorum=ensemble)
        deadline = time.monotonic() + self.ready_timeout_s
        pending = dict(checks)
        self.progress("ready", 0, len(checks), ", ".join(pending))
        while pending:
            for node, check in list(pending.items()):
                if check():
                    del pending[node]
                    self.progress("ready", len(checks) - len(pending), len(checks), node)
            if not pending:
                break
            states = {s.node: s.state for s in self.status()}
            stopped = [n for n in pending if states.get(n) != "running"]
            if stopped or time.monotonic() > deadline:
                node = (stopped or list(pending))[0]
                why = (f"its container is {states.get(node)}" if stopped else
                       f"no answer within {self.ready_timeout_s:.0f} s")
                raise ClusterError(f"{self.plan.containers[node].role} {node} of cluster "
                                   f"{self.name} does not answer: {why}; its log ends:\n"
                                   + self._log_tail(node))
            time.sleep(0.25)

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

    def exec(self, node: str, command: Sequence[str] | str) -> ExecResult:
        """Run a command in a node's container to its end; its stdout and stderr together."""
        return run_in(self.client, self._container(node), command)

    def logs(self, node: str, follow: bool = False) -> Iterator[bytes]:
        return inventory.follow_logs(self.client, self._container(node), follow)

    # -- down ----------------------------------------------------------------------------------

    def down(self) -> Removed:
        """Remove exactly what the cluster made: relays, containers, networks, scratch folder."""
        with interrupts_deferred():
            self._cancel.set()
            try:
                if self.links is not None:
                    self.links.close()
            finally:
                removed = inventory.remove(self.client, self.name, end_owner_process=False)
                if self._made is not None and self._made.scratch is not None:
                    inventory.remove_scratch(str(self._made.scratch))
                self._made = None
                self.zygote = None
        return removed

    def _abort(self) -> None:
        with contextlib.suppress(Exception):
            self.down()

    def __enter__(self) -> Self:
        return self.up()

    def __exit__(self, *exc_info: object) -> None:
        if self._made is not None:
            self.down()


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
