"""Plan a topology's containers, networks and shaped links as plain data, without Docker.

What becomes a container. Gateways and cloud VMs run the agent (`python3 -m emu.agent`, its
AgentConfig as JSON in FOGLAB_AGENT); brokers run the server of their `broker.kind`
(emu.cluster.broker_kinds: Mosquitto, or RabbitMQ; its `check_broker_kinds` says where a
kind cannot run); ZooKeeper runs on coordinators.
The agents' configs come whole from emu.cluster.deployment (drivers, operators, seed, index); the
plan fills in only the addresses of each one's broker and ZooKeeper.
Devices are not containers of their own: the drivers inside their gateway's agent emulate
them; devices that link to no gateway run as a group in one agent container (kind device,
drivers only), which stands at its first device (its devices link alike) and is linked from
there like any agent. Switches are only where paths go through.

Images. A gateway with an arm64 profile runs the arm64 gateway image (through QEMU); one with an
amd64 profile, and every cloud VM, the amd64 cloud image, which holds the same agent. Brokers run
their kind's image (Mosquitto's: the services image), coordinators the services image. A node
whose profile is not arm64 or amd64 (a sensor, a switch) cannot be a container. A device group
runs the cloud image.

Limits. Memory is the profile's; CPU is its cores, times its relative speed when the image runs
natively (an amd64 image here), capped at the host's CPUs, which the engine refuses to exceed.
An arm64 image under QEMU already runs several times slower than the hardware it stands for, so
its speed is not applied a second time. A device group's container has its devices' cores and
memory together, where their profile is a machine's; a microcontroller's profile says nothing
of what emulating it takes, so then the agent gets one core and 256 MiB.

ZooKeeper. By default one server; `zookeeper=3` makes an ensemble, on the coordinators nearest
their clients, or added beside one (emu.cluster.zookeeper_servers).

Networks. One Docker bridge per site, `foglab-<cluster>-<site>`, holding the site's containers;
nodes without a site share the `default` segment. Site networks are not joined to each other:
every link a client uses crosses the host, through a relay or a shaped interface.

Links. A client (gateway or cloud VM) talks TCP to its broker, the nearest one that is no
spare, and to every ZooKeeper server, each pair shaped as its topology path
(emu.cluster.plan_links).

Several brokers. Brokers are not bridged: a client publishes to its own broker and hears
requests there. As a sim broker hands each message to every operator that reads its topic
wherever the operator is, an agent whose operators read through its node session also
subscribes on every other broker of the run (`AgentConfig.other_brokers`, each over a link
shaped as its path to that broker), so its operators get every publisher's messages once,
from the publisher's broker; the host's controller holds a session on every broker
(emu.control.commands.Controller.of_plan).

An instance reading through a session of its own (one that may move) reads on the broker of
the node it starts on, where every publisher of its input is (emu.cluster.plan_checks.
check_own_sessions refuses it otherwise); its config names that broker
(`OperatorConfig.broker`, the agents' own in `AgentConfig.broker`). A scheduled migration, a
recovery re-placement or a replica may take the instance to a node behind another broker: the
session it takes over, with the input the broker held meanwhile, is on the first broker still,
so every node that may take it (`targets`: by default every gateway and cloud VM) gets a link
there, shaped as its path, in `AgentConfig.other_brokers`. A node that reads nothing through
its own session connects there only when it takes such an instance over.

Spare brokers (`scenario.broker_scaling`, workloads.broker_scaling). A spare runs Mosquitto
from the start, idle, as a warm standby VM would: no agent takes it as its broker; "joining"
is the moment its readers subscribe there and publishers move to it (emu.features.broker_scaling).
There is no bridge: a bridge to the watched broker would route every moved message through
that broker again and relieve it of nothing; the readers take the spare's messages from it
directly, as IoTCloud's shared channels let a subscriber read from any broker. Each agent of
the watched broker (a mover-to-be or a reader) has a link to the spare, shaped as their path,
and its address in `AgentConfig.spares`. The spare's conf (emu.cluster.broker_kinds.
spare_files) is the image's with $SYS counters every second (the host reads what it received).

Time dilation (`dilation`, K: emulated time runs K times slower than the host's clock,
emu.agent.timebase). The plan keeps every link's emulated shape (`LinkPlan.shape`, what the
topology says: the run's tables read it); the shapers install it dilated (emu.cluster.links).
The services' own timers are scaled by K in their configs, so that they keep their emulated
values: ZooKeeper's tickTime (its session bounds and an ensemble's initLimit and syncLimit count
ticks, so they follow; an ensemble's connection timeout and election notification intervals
too), and Mosquitto's (autosave_interval, sys_interval) in a conf of their own
(emu.cluster.broker_kinds.mosquitto_files). At K = 1 nothing is written beyond what an
undilated plan has. What no config reaches: the kernel's TCP timers (a minimum RTO of 200 host
ms is 200/K emulated ms), the JVM's pauses (garbage collection, JIT) and Mosquitto's and
ZooKeeper's handling time, which are host work, so they shrink K times in emulated time.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from emu.agent.config import AGENT_KINDS, AgentConfig
from emu.agent.spark_cluster import MASTER_PORT as SPARK_MASTER_PORT
from emu.cluster.access import Access
from emu.cluster.broker_kinds import (
    SPARE_COMMAND,
    check_broker_kinds,
    kind_of,
    kind_of_container,
    spare_files,
)
from emu.cluster.closing import closed_plan, tls_plan
from emu.cluster.names import cluster_labels, container_name, network_name
from emu.cluster.plan_checks import (
    ARCHES,
    DEVICE_KIND,
    MIN_MEMORY,
    check_configs,
    check_own_sessions,
    checked_nodes,
    device_group,
    topology_error,
)
from emu.cluster.plan_links import LinkPlan, LinkPlanner, reads_through_broker
from emu.cluster.tls import TLSPlan
from emu.cluster.zookeeper_servers import (
    ZOOKEEPER_NAME,
    ZOOKEEPER_PORT,
    place_servers,
    zookeeper_files,
)
from emu.images import CLOUD, GATEWAY, SERVICES, ZOOKEEPER_COMMAND, ImageSpec
from emu.links.spec import check_dilation
from topologies.errors import SpecError
from topologies.model import Node, Topology
from topologies.routing import Routes
from workloads.operator_engines import operator_engine

MQTT_PORT = 1883  # every broker kind's
AGENT_COMMAND = ("python3", "-m", "emu.agent")
IDLE_COMMAND = ("sleep", "infinity")
DEFAULT_SEGMENT = "default"
# A Spark standalone cluster (_Planner._spark_cluster): the master's port, and where every VM
# of it mounts each driver's records (a job's work, its journal), alike on all.
SPARK_WORK = "/spark"
HOST_ARCH = "amd64"
# A device group's container whose devices are microcontrollers: the agent's own needs.
DEVICE_CPUS = 1.0
DEVICE_MEMORY = 256 * 1024**2
# The most processes and threads each container may hold (its cgroup's pids.max), so that a
# fork bomb in one ends against it instead of taking the host's pids. Measured at work
# (pids.current, the quickstart on emu; docs/capacity.md) and given headroom: a gateway's
# agent 8-9, a cloud VM's agent with its Spark job (JVM and Python workers) 164, ZooKeeper's
# JVM 24, RabbitMQ's Erlang VM 26, Mosquitto 1; an idle coordinator 1.
PIDS_AGENT = 256
PIDS_SPARK = 1024  # a cloud VM or device group (cloud image): its agent may start Spark jobs
PIDS_SERVICE = {"broker": 512, "zookeeper": 512, "idle": 32}

Role = Literal["agent", "broker", "zookeeper", "idle"]


@dataclass(frozen=True)
class NetworkPlan:
    """A Docker bridge network for one site (or the default segment)."""

    segment: str
    name: str
    labels: dict[str, str]


@dataclass(frozen=True)
class ContainerPlan:
    """One container: a topology node, or a ZooKeeper server the cluster adds."""

    node: str
    kind: str                          # the node's kind; "zookeeper" for an added server
    role: Role
    name: str                          # the container's name
    image: ImageSpec
    command: tuple[str, ...]
    segment: str
    network: str
    nano_cpus: int
    mem_limit: int
    labels: dict[str, str]
    port: int | None = None            # the port a service answers on
    agent: AgentConfig | None = None   # addresses are direct; the engine points them at links
    files: tuple[tuple[str, str], ...] = ()  # (path in the container, text) put before start
    profile: str | None = None
    extra_networks: tuple[str, ...] = ()  # joined before start: an ensemble's quorum network
    # Nodes whose records folder this container also mounts at SPARK_WORK/<node>: a Spark
    # cluster's VMs see each driver's work (its source's journal) at one path.
    shared_records: tuple[str, ...] = ()
    pids_limit: int = PIDS_AGENT       # the container's pids.max (PIDS_*)

    @property
    def address(self) -> str:
        """The service's direct address on the networks it is on (Docker DNS by name)."""
        assert self.port is not None
        return f"{self.name}:{self.port}"


@dataclass
class ClusterPlan:
    cluster: str
    topology: str
    networks: dict[str, NetworkPlan]
    containers: dict[str, ContainerPlan]
    links: list[LinkPlan]
    brokers: dict[str, str]            # client -> its broker
    zookeeper: list[str]               # the servers' node names, in myid order
    labels: dict[str, str] = field(default_factory=dict)  # what every object carries
    spares: dict[str, str] = field(default_factory=dict)  # spare broker -> the one it backs
    dilation: float = 1.0              # K: the shapers install links and services' timers at K
    access: Access | None = None       # a closed cluster's secrets (emu.cluster.access)
    tls: TLSPlan | None = None         # a cluster with TLS: its authority (emu.cluster.tls)

    def services(self) -> list[ContainerPlan]:
        return [c for c in self.containers.values() if c.role != "agent"]

    def agents(self) -> list[ContainerPlan]:
        return [c for c in self.containers.values() if c.role == "agent"]

    def agent_configs(self) -> dict[str, AgentConfig]:
        """Each agent's config as planned: brokers named and direct addresses (the engine
        points them at links)."""
        return {c.node: c.agent for c in self.agents() if c.agent is not None}

    @property
    def mqtt5(self) -> bool:
        """Whether the cluster's persistent MQTT sessions speak MQTT 5: not when a broker's
        kind has no MQTT 5 (RabbitMQ, whose MQTT plugin (3.10) has MQTT 3.1 and 3.1.1 only);
        its clients are then MQTT 3.1.1 with clean session off (emu.agent.mqtt.use_mqtt5)."""
        return all(kind_of_container(c).kind.mqtt5 for c in self.containers.values()
                   if c.role == "broker")

    def links_of(self, client: str) -> list[LinkPlan]:
        return [link for link in self.links if link.client == client]

    def link(self, client: str, service: str) -> LinkPlan:
        for link in self.links:
            if link.key == (client, service):
                return link
        raise KeyError(f"no link from {client} to {service} in cluster {self.cluster}")


def plan_cluster(topology: Topology, cluster: str | None = None, *,
                 agents: Mapping[str, AgentConfig] | None = None, zookeeper: int = 1,
                 host_cpus: int | None = None, labels: dict[str, str] | None = None,
                 spares: Mapping[str, str] | None = None,
                 targets: Mapping[str, Collection[str]] | None = None,
                 dilation: float = 1.0, closed: bool = False, tls: bool = False,
                 live_acl: bool = True) -> ClusterPlan:
    """Plan the containers, networks and links of a topology; raise SpecError naming the node
    and field for anything Docker would refuse, before anything is made.

    `agents`: each agent's config, as emu.cluster.deployment.agent_configs makes it for an
    experiment, one per gateway and cloud VM; the plan fills in the addresses only. Without
    it the agents idle (deployment's configs of the bare topology). `labels` are added to
    every object. `spares`: spare broker -> the broker it stands by (scenario.broker_scaling,
    as workloads.broker_scaling.resolve checked it): no agent takes a spare at the start.
    `targets`: operator -> the nodes an instance of it reading through a session of its own
    may move to (migrations, recovery, replication), each given a link to the broker that
    holds the session; None: every gateway and cloud VM may take any. `dilation`: the run's
    K (at least 1): the services' timers are scaled by it and the links installed dilated
    (see the module docstring); the links' shapes in the plan stay emulated. `closed`: the
    brokers and ZooKeeper take only the cluster's own clients (emu.cluster.closing; each broker
    in its kind's terms, emu.cluster.broker_kinds). `tls` (closed only): they speak TLS only
    (emu.cluster.tls).
    """
    dilation = check_dilation(dilation, "plan_cluster's dilation")
    check_broker_kinds(topology, dilation=dilation, closed=closed, spares=spares or {})
    if agents is None:
        from emu.cluster.deployment import agent_configs

        agents = agent_configs(topology)
    plan = _Planner(topology, cluster or topology.name, zookeeper, agents,
                    host_cpus or os.cpu_count() or 1, labels or {}, dict(spares or {}),
                    targets, dilation).plan()
    if tls and not closed:
        raise ValueError("plan_cluster: tls needs closed (run.access: closed)")
    if closed:
        plan = closed_plan(plan, targets, live_acl=live_acl)
    return tls_plan(plan) if tls else plan


class _Planner:
    def __init__(self, topology: Topology, cluster: str, zookeeper: int,
                 agents: Mapping[str, AgentConfig], host_cpus: int, labels: dict[str, str],
                 spares: dict[str, str] | None = None,
                 targets: Mapping[str, Collection[str]] | None = None, dilation: float = 1.0):
        self.topology = topology
        self.cluster = cluster
        self.servers = zookeeper
        self.configs = agents
        self.host_cpus = host_cpus
        self.routes = Routes(topology)
        self.links = LinkPlanner(topology, self.routes)
        self.labels = {**labels, **cluster_labels(cluster), "foglab.topology": topology.name}
        self.spares = spares or {}
        self.targets = targets
        self.dilation = dilation

    def error(self, path: tuple, value: object, expected: str) -> SpecError:
        return topology_error(self.topology, path, value, expected)

    def plan(self) -> ClusterPlan:
        nodes = checked_nodes(self.topology, self.cluster, self.servers)
        # Each agent container and the topology node it stands at (a device group's: its
        # first device, all of them linked alike).
        standing = {n.name: n for n in nodes if n.kind in AGENT_KINDS}
        check_configs(self.topology, self.configs, list(standing))
        for name, config in self.configs.items():
            if name not in standing:
                standing[name] = device_group(self.topology, config)
        brokers = {name: self.links.broker(node, self.spares) for name, node in standing.items()}
        check_own_sessions(self.topology, self.configs, brokers)
        sessions = self.links.session_brokers(self.configs, self.targets, standing, brokers)
        # Each spare's clients-to-be: the agents of the broker it backs (movers, readers).
        clients = {spare: [name for name in standing if brokers[name] == watched]
                   for spare, watched in self.spares.items()}
        servers, anchors = place_servers(self.topology, self.routes, self.servers,
                                         list(standing.values()))
        containers = self._service_containers(nodes, servers, anchors)
        links = self._agent_containers(containers, nodes, standing, brokers, sessions, clients,
                                       servers, anchors)
        if self.topology.spark is not None:
            self._spark_cluster(containers)
        self._join_quorum(containers, servers)
        containers = self._in_declaration_order(containers, standing)
        networks = self._networks(containers)
        return ClusterPlan(self.cluster, self.topology.name, networks, containers, links,
                           brokers, servers, dict(self.labels), dict(self.spares), self.dilation)

    def _service_containers(self, nodes: list[Node], servers: list[str],
                            anchors: dict[str, str | None]) -> dict[str, ContainerPlan]:
        """The containers that run no agent: brokers (spares with their own command),
        ZooKeeper servers (an added one beside its anchor) and idle nodes."""
        containers: dict[str, ContainerPlan] = {}
        for node in nodes:
            if node.kind in AGENT_KINDS:
                continue
            role: Role = ("broker" if node.kind == "broker" else
                          "zookeeper" if node.name in servers else "idle")
            containers[node.name] = self._container(node.name, node.kind, role, node.site,
                                                    node, servers)
        for spare in self.spares:
            containers[spare] = replace(containers[spare], command=SPARE_COMMAND,
                                        files=spare_files(self.cluster, spare, self.dilation))
        for name in servers:
            if name not in containers:  # an added server, beside its anchor
                anchor = self.topology.nodes.get(anchors[name])
                containers[name] = self._container(name, ZOOKEEPER_NAME, "zookeeper",
                                                   anchor.site if anchor else None, anchor,
                                                   servers)
        return containers

    def _agent_containers(self, containers: dict[str, ContainerPlan], nodes: list[Node],
                          standing: dict[str, Node], brokers: dict[str, str],
                          sessions: dict[str, set[str]], clients: dict[str, list[str]],
                          servers: list[str], anchors: dict[str, str | None]) -> list[LinkPlan]:
        """Each agent's container, added to `containers`, its config told where its broker,
        ZooKeeper, spares and other brokers are; the links of its sessions to them."""
        links = []
        # One protocol for every session of the cluster: an agent's clients share it.
        mqtt5 = all(n.broker_kind.mqtt5 for n in nodes if n.kind == "broker")
        for name, node in standing.items():
            broker = brokers[name]
            spares = {spare: containers[spare].address for spare in self.spares
                      if name in clients[spare]}
            reads = (set(brokers.values()) if reads_through_broker(self.configs[name])
                     else set())
            others = {other: containers[other].address
                      for other in sorted((reads | sessions.get(name, set())) - {broker})}
            services = [(broker, broker, "mqtt", MQTT_PORT),
                        *((s, anchors[s], "zookeeper", ZOOKEEPER_PORT) for s in servers),
                        *((other, other, "mqtt", MQTT_PORT) for other in [*spares, *others])]
            links += [self.links.link(name, *service, node.name) for service in services]
            config = self.configs[name]
            config = replace(config, mqtt=containers[broker].address,
                             zookeeper=",".join(containers[s].address for s in servers),
                             spares=spares, other_brokers=others, broker=broker,
                             mqtt5=mqtt5,
                             operators=[replace(op, broker=broker)
                                        if op.session and op.broker is None else op
                                        for op in config.operators])
            containers[name] = self._container(name, config.kind, "agent", node.site, node,
                                               servers, config, broker)
        return links

    @staticmethod
    def _join_quorum(containers: dict[str, ContainerPlan], servers: list[str]) -> None:
        """Put every ZooKeeper server on the first one's network too (in `containers`)."""
        if len(servers) > 1:
            # The quorum talks directly on the first server's network, unshaped.
            quorum = containers[servers[0]].network
            for name in servers[1:]:
                if containers[name].network != quorum:
                    containers[name] = replace(containers[name], extra_networks=(quorum,))

    def _in_declaration_order(self, containers: dict[str, ContainerPlan],
                              standing: dict[str, Node]) -> dict[str, ContainerPlan]:
        """The containers in the topology's order, each labelled with its place."""
        # Declaration order, whatever the roles: status tables read like the topology file.
        order = {name: i for i, name in enumerate(self.topology.nodes)}
        order.update({name: order[node.name] for name, node in standing.items()})
        return {name: replace(plan, labels={**plan.labels, "foglab.order": str(i)})
                for i, (name, plan) in enumerate(sorted(
                    containers.items(), key=lambda item: order.get(item[0], len(order))))}

    def _networks(self, containers: dict[str, ContainerPlan]) -> dict[str, NetworkPlan]:
        """One network per segment the containers stand on, in their order."""
        networks = {}
        for plan in containers.values():
            if plan.segment not in networks:
                networks[plan.segment] = NetworkPlan(
                    plan.segment, plan.network,
                    {**self.labels, "foglab.node": plan.segment, "foglab.kind": "network",
                     "foglab.site": plan.segment})
        return networks

    def _spark_cluster(self, containers: dict[str, ContainerPlan]) -> None:
        """The topology's Spark standalone cluster (emu.agent.spark_cluster): the master's and
        each worker's daemon, each `engine: spark` job driving it from its VM, the drivers'
        work shared with every VM of the cluster. They must share a site: the daemons and the
        drivers reach each other by name on its network, unshaped, as a cloud site's VMs do."""
        spark = self.topology.spark
        drivers = [name for name, c in containers.items() if c.agent is not None
                   and c.kind == "cloud_vm"
                   and any(operator_engine(op.engine).jvm for op in c.agent.operators)]
        members = [(("spark", "master"), spark.master)] + [
            (("spark", "workers", i), w) for i, w in enumerate(spark.workers)] + [
            (("pipeline",), d) for d in drivers]
        segment = containers[spark.master].segment
        for path, name in members:
            if containers[name].segment != segment:
                raise self.error(path, name, f"a cloud VM in the Spark master's site "
                                 f"({segment}): the cluster's VMs reach each other by name")
        url = f"spark://{spark.master}:{SPARK_MASTER_PORT}"
        roles = {spark.master: {"role": "master", "host": spark.master}}
        roles.update({worker: {"role": "worker", "host": worker, "master": url,
                               "cores": spark.cores, "memory": spark.memory}
                      for worker in spark.workers})
        everyone = list(dict.fromkeys([*roles, *drivers]))
        for name in everyone:
            container = containers[name]
            config = replace(container.agent, spark=roles.get(name, {}))
            if name in drivers:
                config = replace(config, spark_master=url, spark_work=f"{SPARK_WORK}/{name}")
            containers[name] = replace(container, agent=config,
                                       shared_records=tuple(drivers))

    def _container(self, name: str, kind: str, role: Role, site: str | None, node: Node | None,
                   servers: list[str], agent: AgentConfig | None = None,
                   broker: str | None = None) -> ContainerPlan:
        segment = site or DEFAULT_SEGMENT
        profile = node.profile if node is not None and kind != ZOOKEEPER_NAME else None
        image, command, port, files = SERVICES, (), None, ()
        if role == "agent":
            image = GATEWAY if kind == "gateway" and profile.arch == "arm64" else CLOUD
            command = AGENT_COMMAND
        elif role == "broker":
            server = kind_of(node)
            image, port = server.image, MQTT_PORT
            command, files = server.planned(self.cluster, name, node, self.dilation)
        elif role == "zookeeper":
            command, port = ZOOKEEPER_COMMAND, ZOOKEEPER_PORT
            files = zookeeper_files(self.cluster, servers, name, self.dilation)
        else:
            command = IDLE_COMMAND
        if profile is None:  # an added ZooKeeper server: what its JVM needs
            cpus, memory = 1.0, 1024**3
        elif kind == DEVICE_KIND:
            cpus, memory = self._device_limits(profile, agent)
        else:
            native = image.arch == HOST_ARCH
            cpus, memory = profile.cores * (profile.speed if native else 1.0), profile.memory
        cpus = max(0.01, min(cpus, float(self.host_cpus)))
        return ContainerPlan(
            node=name, kind=kind, role=role, name=container_name(self.cluster, name),
            image=image, command=tuple(command), segment=segment,
            network=network_name(self.cluster, segment), nano_cpus=int(cpus * 1e9),
            mem_limit=int(memory), pids_limit=_pids_limit(role, image),
            labels={**self.labels, "foglab.node": name, "foglab.kind": kind,
                    "foglab.role": role, "foglab.network": network_name(self.cluster, segment),
                    **({"foglab.broker": broker} if broker else {})},
            port=port, agent=agent, files=files,
            profile=node.profile_name if profile is not None else None)

    @staticmethod
    def _device_limits(profile, agent: AgentConfig) -> tuple[float, int]:
        """A device group's container: its devices' cores and memory together, where their
        profile is a machine's (arm64 or amd64, run natively on the cloud image); else (a
        microcontroller) what the agent needs, DEVICE_CPUS and DEVICE_MEMORY."""
        devices = len({d for driver in agent.drivers for d in driver.devices})
        if profile.arch not in ARCHES or profile.memory < MIN_MEMORY:
            return DEVICE_CPUS, DEVICE_MEMORY
        return profile.cores * profile.speed * devices, profile.memory * devices


def _pids_limit(role: Role, image: ImageSpec) -> int:
    """A container's pids.max: an agent's, with room for Spark jobs where its image runs
    them (the cloud image), or its service's."""
    if role == "agent":
        return PIDS_AGENT if image == GATEWAY else PIDS_SPARK
    return PIDS_SERVICE[role]
