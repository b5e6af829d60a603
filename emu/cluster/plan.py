"""Plan a topology's containers, networks and shaped links as plain data, without Docker.

What becomes a container. Gateways and cloud VMs run the agent (`python3 -m emu.agent`, its
AgentConfig as JSON in FOGLAB_AGENT); brokers run Mosquitto, or RabbitMQ where the node's
`broker.kind` is rabbitmq (`check_broker_kinds` says where it cannot); ZooKeeper runs on
coordinators.
The agents' configs come whole from emu.cluster.deployment (drivers, operators, seed, index); the
plan fills in only the addresses of each one's broker and ZooKeeper.
Devices are not containers of their own: the drivers inside their gateway's agent emulate
them; devices that link to no gateway run as a group in one agent container (kind device,
drivers only), which stands at its first device (its devices link alike) and is linked from
there like any agent. Switches are only where paths go through.

Images. A gateway with an arm64 profile runs the arm64 gateway image (through QEMU); one with an
amd64 profile, and every cloud VM, the amd64 cloud image, which holds the same agent. Brokers and
coordinators run the services image; a broker of kind rabbitmq the rabbitmq image. A node
whose profile is not arm64 or amd64 (a sensor, a switch) cannot be a container. A device group
runs the cloud image.

Limits. Memory is the profile's; CPU is its cores, times its relative speed when the image runs
natively (an amd64 image here), capped at the host's CPUs, which the engine refuses to exceed.
An arm64 image under QEMU already runs several times slower than the hardware it stands for, so
its speed is not applied a second time. A device group's container has its devices' cores and
memory together, where their profile is a machine's; a microcontroller's profile says nothing
of what emulating it takes, so then the agent gets one core and 256 MiB.

ZooKeeper. By default one server; `zookeeper=3` makes an ensemble, each server with a zoo.cfg
listing all (`server.N=`) and its `myid`. Servers run on the coordinators nearest their clients
(least total path latency from the agents, ties to the first declared); when there are fewer
coordinators than servers, containers named `zookeeper` (or `zookeeper-N` in an ensemble) are
added beside the first coordinator, or beside the broker nearest the agents when the topology
has no coordinator. A coordinator that hosts no server idles. Clients reach an added server
through the path to the node it stands beside.

Networks. One Docker bridge per site, `foglab-<cluster>-<site>`, holding the site's containers;
nodes without a site share the `default` segment. Site networks are not joined to each other:
every link a client uses crosses the host, through a relay or a shaped interface.

Links. A client (gateway or cloud VM) talks TCP to its broker, the one nearest by routing
(topologies.routing.nearest, as the model picks it: clients of one kind take equally near
brokers in turn) among those that are no spare, and to every ZooKeeper server. Each such
pair gets the shape of its topology path, hop by hop: latencies add up; jitters, independent
per hop, add as variances (root sum of squares); the bandwidth is the narrowest hop's (none
when no hop has one); losses combine as 1 - prod(1 - loss). The shape applies to each
direction: a round trip costs twice the latency. Pairs whose paths cross one hop with a
bandwidth share it (with the relay shaper: `LinkPlan.bandwidths` gives each hop's); netem
shapes each client's interface on its own, so there each pair has the path's narrowest
bandwidth to itself.

Several brokers. Brokers are not bridged: a client publishes to its own broker and hears
requests there. As a sim broker hands each message to every operator that reads its topic
wherever the operator is, an agent whose operators read through its node session also
subscribes on every other broker of the run (`AgentConfig.other_brokers`, each over a link
shaped as its path to that broker), so its operators get every publisher's messages once,
from the publisher's broker; the host's controller holds a session on every broker
(emu.control.commands.Controller.of_plan).

An instance reading through a session of its own (one that may move) reads on the broker of
the node it starts on, where every publisher of its input is (`_check_own_sessions` refuses
it otherwise); its config names that broker (`OperatorConfig.broker`, the agents' own in
`AgentConfig.broker`). A scheduled migration, a recovery re-placement or a replica may take
the instance to a node behind another broker: the session it takes over, with the input the
broker held meanwhile, is on the first broker still, so every node that may take it
(`targets`: by default every gateway and cloud VM) gets a link there, shaped as its path,
in `AgentConfig.other_brokers`. A node that reads nothing through its own session connects
there only when it takes such an instance over.

Spare brokers (`scenario.broker_scaling`, workloads.broker_scaling). A spare runs Mosquitto
from the start, idle, as a warm standby VM would: no agent takes it as its broker; "joining"
is the moment its readers subscribe there and publishers move to it (emu.features.broker_scaling).
There is no bridge: a bridge to the watched broker would route every moved message through
that broker again and relieve it of nothing; the readers take the spare's messages from it
directly, as IoTCloud's shared channels let a subscriber read from any broker. Each agent of
the watched broker (a mover-to-be or a reader) has a link to the spare, shaped as their path,
and its address in `AgentConfig.spares`. The spare's conf (`spare_files`) is the image's
with $SYS counters every second (the host reads what it received).

Time dilation (`dilation`, K: emulated time runs K times slower than the host's clock,
emu.agent.timebase). The plan keeps every link's emulated shape (`LinkPlan.shape`, what the
topology says: the run's tables read it); the shapers install it dilated (emu.cluster.links).
The services' own timers are scaled by K in their configs, so that they keep their emulated
values: ZooKeeper's tickTime (its session bounds and an ensemble's initLimit and syncLimit count
ticks, so they follow; an ensemble's connection timeout and election notification intervals
too), and Mosquitto's (autosave_interval, sys_interval) in a conf of their own
(`mosquitto_files`). At K = 1 nothing is written beyond what an undilated plan has. What no
config reaches: the kernel's TCP timers (a minimum RTO of 200 host ms is 200/K emulated ms),
the JVM's pauses (garbage collection, JIT) and Mosquitto's and ZooKeeper's handling time,
which are host work, so they shrink K times in emulated time.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Literal

from emu.agent.config import AGENT_KINDS, AgentConfig
from emu.agent.spark_cluster import MASTER_PORT as SPARK_MASTER_PORT
from emu.cluster.access import ACL_FILE, PASSWORD_FILE, Access, closed_conf, read_grants
from emu.cluster.rabbitmq_access import closed_rabbitmq
from emu.cluster.tls import TLSPlan, tls_plan
from emu.images import (
    CLOUD,
    GATEWAY,
    MOSQUITTO_COMMAND,
    RABBITMQ,
    SERVICES,
    ZOOKEEPER_COMMAND,
    ImageSpec,
)
from emu.links.spec import LinkShape, check_dilation
from topologies.errors import SpecError
from topologies.model import Node, Topology
from topologies.routing import NoRoute, Routes, latency, nearest
from workloads.broker_scaling import first_brokers
from workloads.operator_engines import Move, operator_engine
from workloads.recovery import ZK_MAX_SESSION_TICKS, ZK_MIN_SESSION_TICKS, ZK_TICK_S

MQTT_PORT = 1883
ZOOKEEPER_PORT = 2181
ZOOKEEPER_PEER_PORTS = (2888, 3888)
AGENT_COMMAND = ("python3", "-m", "emu.agent")
IDLE_COMMAND = ("sleep", "infinity")
DEFAULT_SEGMENT = "default"
SPARE_CONFIG = "/etc/foglab/spare.conf"  # a spare broker's mosquitto.conf (spare_files)
SPARE_COMMAND = ("mosquitto", "-c", SPARE_CONFIG)
# A broker's mosquitto.conf at a dilation (mosquitto_files): the image's with its timers scaled.
DILATED_CONFIG = "/etc/foglab/dilated.conf"
DILATED_COMMAND = ("mosquitto", "-c", DILATED_CONFIG)
# A Spark standalone cluster (_Planner._spark_cluster): the master's port, and where every VM
# of it mounts each driver's records (a job's work, its journal), alike on all.
SPARK_WORK = "/spark"
# A closed cluster's broker (closed_plan): its conf, the users' hashes and the ACL.
CLOSED_CONFIG = "/etc/foglab/closed.conf"
# Mosquitto's timers foglab's conf leaves at their defaults (s): the persistence database's
# autosave and the $SYS topics' period (a spare's is SPARE_SYS_INTERVAL_S).
MOSQUITTO_AUTOSAVE_S = 1800
MOSQUITTO_SYS_INTERVAL_S = 10
SPARE_SYS_INTERVAL_S = 1
# ZooKeeper's timers beside the tick, for an ensemble's quorum (ms): the connection timeout
# between servers and the leader election's notification intervals (their defaults).
ZK_CNX_TIMEOUT_MS = 5000
ZK_ELECTION_NOTIFICATION_MS = (200, 60000)
# The services image's mosquitto.conf, whose settings a spare's conf keeps.
MOSQUITTO_DEFAULTS = Path(__file__).resolve().parents[1] / "rootfs/services/mosquitto.conf"
# A broker of kind rabbitmq (rabbitmq_files): the image's rabbitmq.conf, written again with the
# container's memory limit, which the Erlang VM does not read from its cgroup.
RABBITMQ_CONFIG = "/etc/foglab/rabbitmq/rabbitmq.conf"
RABBITMQ_DEFAULTS = Path(__file__).resolve().parents[1] / "rootfs/rabbitmq/rabbitmq.conf"
# The least memory a RabbitMQ broker's profile may have: the node takes about 100 MiB idle
# with the MQTT plugin (measured: docs/brokers.md), and its flow control blocks publishers at
# the watermark's share of the rest.
RABBITMQ_MIN_MEMORY = 256 * 1024**2
ZOOKEEPER_NAME = "zookeeper"
ZOOKEEPER_CONFIG = "/etc/foglab/zoo.cfg"
ZOOKEEPER_DATA = "/var/lib/zookeeper"
CONTAINER_KINDS = ("gateway", "cloud_vm", "broker", "coordinator")
DEVICE_KIND = "device"  # a device group's container (emu.cluster.deployment.device_hosts)
# Docker's own rule for container and network names; the length keeps names readable.
CLUSTER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,39}$")
HOSTNAME_MAX = 63
MIN_MEMORY = 6 * 1024**2  # Docker refuses a smaller memory limit
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


@dataclass(frozen=True)
class LinkPlan:
    """A client's TCP connection to a service, shaped as its topology path."""

    client: str
    service: str
    role: Literal["mqtt", "zookeeper"]
    port: int
    shape: LinkShape
    path: tuple[str, ...]
    bandwidths: tuple[float | None, ...] = ()  # each hop's of the path, in bit/s

    @property
    def key(self) -> tuple[str, str]:
        return self.client, self.service


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
        """Whether the cluster's persistent MQTT sessions speak MQTT 5: not when a broker
        runs RabbitMQ, whose MQTT plugin (3.10) has MQTT 3.1 and 3.1.1 only; its clients are
        then MQTT 3.1.1 with clean session off (emu.agent.mqtt.use_mqtt5)."""
        return all(c.image.name != RABBITMQ.name for c in self.containers.values()
                   if c.role == "broker")

    def links_of(self, client: str) -> list[LinkPlan]:
        return [link for link in self.links if link.client == client]

    def link(self, client: str, service: str) -> LinkPlan:
        for link in self.links:
            if link.key == (client, service):
                return link
        raise KeyError(f"no link from {client} to {service} in cluster {self.cluster}")


def path_shape(topology: Topology, path: Iterable[str]) -> LinkShape:
    """The shape of a path: latencies add, jitters add as variances, the narrowest bandwidth,
    losses combine."""
    path = list(path)
    variance, bandwidth, delivered = 0.0, None, 1.0
    graph = topology.graph
    for a, b in pairwise(path):
        hop = graph.edges[a, b]["link"]
        variance += hop.jitter ** 2
        if hop.bandwidth is not None:
            bandwidth = hop.bandwidth if bandwidth is None else min(bandwidth, hop.bandwidth)
        delivered *= 1 - hop.loss
    return LinkShape(latency(topology, path), math.sqrt(variance), bandwidth,
                     min(1.0, max(0.0, 1 - delivered)))


def _reads_through_broker(config: AgentConfig) -> bool:
    """Whether an agent's operators read through its node session, which then reads on the
    other brokers too (AgentConfig.other_brokers)."""
    return any(not (op.session or operator_engine(op.engine).own_session)
               for op in config.operators)


def cluster_labels(cluster: str) -> dict[str, str]:
    return {"foglab": "1", "foglab.cluster": cluster}


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
    brokers and ZooKeeper take only the cluster's own clients (emu.cluster.access; a RabbitMQ
    broker in its own terms, emu.cluster.rabbitmq_access). `tls` (closed only): they speak TLS
    only (emu.cluster.tls).
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
        plan = closed_rabbitmq(plan, closed_plan(plan, targets, live_acl=live_acl), ACL_FILE,
                               RABBITMQ_CONFIG)
    return tls_plan(plan) if tls else plan


def broker_kind(node: Node | None) -> str:
    """The server a broker node runs: its `broker.kind` (topologies.spec.BrokerSpec)."""
    return node.broker.kind if node is not None and node.broker is not None else "mosquitto"


def check_broker_kinds(topology: Topology, *, dilation: float | str = 1.0,
                       closed: bool = False, engine: str = "docker",
                       spares: Collection[str] = ()) -> None:
    """Refuse, naming the broker's `kind`, a RabbitMQ broker where the emulation only knows
    Mosquitto's ways: a time dilation (its timers are not scaled: heartbeats, the session
    queues' expiry), a swarm
    (not tried), a spare (the host reads a spare's $SYS counters, which are Mosquitto's); and
    one whose profile has less memory than the Erlang node needs. `dilation` as written
    (`auto` and `real-speed` may choose K > 1: refused too). `experiments.checks` calls this
    with the run's settings before anything starts; plan_cluster with those it knows."""
    for node in topology.of_kind("broker"):
        if broker_kind(node) != "rabbitmq":
            continue
        path = ("nodes", node.name, "broker", "kind")
        why = None
        if dilation != 1:
            shown = dilation if isinstance(dilation, str) else f"{dilation:g}"
            why = (f"run.dilation is {shown}: RabbitMQ's timers are not scaled with it, "
                   "run it at dilation 1")
        elif engine != "docker":
            why = f"run.engine is {engine}: a RabbitMQ broker runs on the docker engine only"
        elif node.name in spares:
            why = ("it is a spare of scenario.broker_scaling, whose load the host reads from "
                   "Mosquitto's $SYS counters")
        elif node.profile.memory < RABBITMQ_MIN_MEMORY:
            why = (f"its profile {node.profile_name} has {node.profile.memory / 1024**2:.0f} "
                   f"MiB: a RabbitMQ node needs at least {RABBITMQ_MIN_MEMORY // 1024**2} MiB")
        if why is not None:
            raise SpecError(path, "rabbitmq", f"kind mosquitto for broker {node.name}: {why}",
                            f"topology {topology.name}")


def closed_plan(plan: ClusterPlan, targets: Mapping[str, Collection[str]] | None = None, *,
                live_acl: bool = True) -> ClusterPlan:
    """The plan closed to outsiders (emu.cluster.access): each broker's conf refuses anonymous
    clients and reads the cluster's password file and ACL, where each node reads what the
    operators placed on it read (those that may come to it, `targets`, plan_cluster's, are
    granted at the move, emu.cluster.grants; or here, where the brokers cannot take a new
    ACL while they run: not `live_acl`, or RabbitMQ); each agent
    logs in as its node, to the broker and to ZooKeeper (and adds the run's identity there);
    each ZooKeeper server takes the host as its super user."""
    configs = plan.agent_configs()
    # Mosquitto takes a new ACL while it runs (emu.cluster.grants: a move's target is granted
    # then) where its engine can rewrite the file (`live_acl`: the engine class's; a swarm's
    # brokers read it from a Docker config); a RabbitMQ broker loads its permissions at boot.
    # Otherwise a move's targets are granted now.
    mosquitto = all(c.image.name != RABBITMQ.name for c in plan.containers.values()
                    if c.role == "broker")
    reads, common = read_grants(configs, targets, at_move=mosquitto and live_acl)
    access = Access.make(configs, common, reads)
    files = ((PASSWORD_FILE, access.password_file()), (ACL_FILE, access.acl_file()))
    containers = dict(plan.containers)
    for name, container in plan.containers.items():
        if container.role == "broker":
            conf = container.command[-1] if container.command[-2:-1] == ("-c",) else None
            written = dict(container.files)
            text = written.pop(conf, None) or MOSQUITTO_DEFAULTS.read_text()
            containers[name] = replace(
                container, command=("mosquitto", "-c", CLOSED_CONFIG),
                files=(*written.items(),
                       (CLOSED_CONFIG, closed_conf(text, PASSWORD_FILE, ACL_FILE)), *files))
        elif container.role == "zookeeper":
            containers[name] = replace(container, files=tuple(
                (path, text + access.zookeeper_super() + "\n" if path == ZOOKEEPER_CONFIG
                 else text) for path, text in container.files))
        elif container.agent is not None:
            user, password = access.credentials(name)
            containers[name] = replace(container, agent=replace(
                container.agent, mqtt_user=user, mqtt_password=password,
                zookeeper_auth=access.zookeeper_identities(name)))
    return replace(plan, containers=containers, access=access)


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
        self.labels = {**labels, **cluster_labels(cluster), "foglab.topology": topology.name}
        self.spares = spares or {}
        self.targets = targets
        self.dilation = dilation

    def error(self, path: tuple, value: object, expected: str) -> SpecError:
        return SpecError(path, value, expected, f"topology {self.topology.name}")

    def plan(self) -> ClusterPlan:
        nodes = self._checked_nodes()
        # Each agent container and the topology node it stands at (a device group's: its
        # first device, all of them linked alike).
        standing = {n.name: n for n in nodes if n.kind in AGENT_KINDS}
        self._check_configs(list(standing))
        for name, config in self.configs.items():
            if name not in standing:
                standing[name] = self._device_group(config)
        brokers = {name: self._broker(name, node) for name, node in standing.items()}
        self._check_own_sessions(brokers)
        sessions = self._session_brokers(standing, brokers)
        # Each spare's clients-to-be: the agents of the broker it backs (movers, readers).
        clients = {spare: [name for name in standing if brokers[name] == watched]
                   for spare, watched in self.spares.items()}
        servers, anchors = self._zookeeper(list(standing.values()))
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

    def _checked_nodes(self) -> list[Node]:
        """The topology's nodes that become containers, each checked, once the cluster's name
        and its number of ZooKeeper servers are."""
        if not CLUSTER_NAME.match(self.cluster):
            raise self.error(("cluster",), self.cluster,
                             "a cluster name Docker accepts: letters, digits, _ . or -, starting"
                             " with a letter or digit, at most 40 characters")
        if self.servers not in (1, 3):
            raise self.error(("zookeeper",), self.servers, "1 or 3 ZooKeeper servers")
        nodes = [n for n in self.topology.nodes.values() if n.kind in CONTAINER_KINDS]
        for node in nodes:
            self._check(node)
        return nodes

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
        mqtt5 = all(broker_kind(n) != "rabbitmq" for n in nodes if n.kind == "broker")
        for name, node in standing.items():
            broker = brokers[name]
            links.append(self._link(name, broker, broker, "mqtt", MQTT_PORT, node.name))
            links += [self._link(name, server, anchors[server], "zookeeper", ZOOKEEPER_PORT,
                                 node.name) for server in servers]
            spares = {spare: containers[spare].address for spare in self.spares
                      if name in clients[spare]}
            links += [self._link(name, spare, spare, "mqtt", MQTT_PORT, node.name)
                      for spare in spares]
            reads = (set(brokers.values()) if _reads_through_broker(self.configs[name])
                     else set())
            others = {other: containers[other].address
                      for other in sorted((reads | sessions.get(name, set())) - {broker})}
            links += [self._link(name, other, other, "mqtt", MQTT_PORT, node.name)
                      for other in others]
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

    def _check_own_sessions(self, brokers: dict[str, str]) -> None:
        """Refuse, before anything starts, an operator instance reading through a session of
        its own (one that may move: migrations, recovery, replication; or a Spark query)
        that would read topics another broker carries: such a session reads its node's
        broker only, and the readings published elsewhere would be silently missing."""
        from emu.agent.protocol import output_topic, stream_topic
        from workloads.topics import matches, shared

        published = {name: {stream_topic(d.stream, name, device, d.channel)
                            for d in config.drivers for device in d.devices}
                     | {output_topic(op.writes, name) for op in config.operators if op.writes}
                     for name, config in self.configs.items()}
        for reader, config in self.configs.items():
            for op in config.operators:
                engine = operator_engine(op.engine)
                if not (op.session or engine.own_session):
                    continue
                for publisher, topics in published.items():
                    if brokers[publisher] == brokers[reader]:
                        continue
                    topic = next((t for t in sorted(topics) for f in op.reads
                                  if matches(shared(f)[1], t)), None)
                    if topic is not None:
                        why = f"a {engine.title} query" if engine.own_session else "it may move"
                        raise self.error(("pipeline", op.name, "on"), reader, (
                            f"on emu, {op.name} on {reader} reads through a session of its "
                            f"own ({why}), on its broker {brokers[reader]} only, and {publisher} "
                            f"publishes {topic} to {brokers[publisher]}: link them to one "
                            "broker, or run it on sim"))

    def _session_brokers(self, standing: Mapping[str, Node],
                         brokers: dict[str, str]) -> dict[str, set[str]]:
        """Node -> the brokers of the input sessions it may take over, other than its own:
        an instance that may move (a Python one with a session of its own) keeps its session
        on the broker of the node it starts on, and every node it may move to (`targets`, by
        default every gateway and cloud VM) reaches that broker. A Spark query's session
        moves with emu.features.moves.spark_query, which the migrations feature keeps to one
        broker."""
        nodes = self.topology.nodes
        movers = [n for n in standing if n in nodes and nodes[n].kind in AGENT_KINDS]
        reach: dict[str, set[str]] = {}
        for start, config in self.configs.items():
            for op in config.operators:
                if (not op.session or operator_engine(op.engine).moves_by is not Move.AGENTS
                        or op.broker == ""):
                    continue  # a follow instance reads on its node's broker, wherever it is
                home = op.broker or brokers[start]
                if self.targets is None:
                    targets = movers
                else:
                    targets = self.targets.get(op.name, ())
                    unknown = sorted(set(targets) - set(movers))
                    if unknown:
                        raise self.error(("pipeline", op.name), unknown[0], (
                            f"a gateway or cloud VM of topology {self.topology.name} to move "
                            f"{op.name} to ({', '.join(movers)})"))
                for target in targets:
                    if brokers[target] != home:
                        reach.setdefault(target, set()).add(home)
        return reach

    def _check_configs(self, agents: list[str]) -> None:
        """One config per agent node, for that node, and device groups' (kind device): the
        configs are another topology's otherwise (a caller's mistake, not the user's)."""
        nodes = self.topology.nodes
        given = {name for name, config in self.configs.items() if config.kind != DEVICE_KIND}
        if given != set(agents):
            raise ValueError(f"agent configs for {sorted(given)}, but topology "
                             f"{self.topology.name}'s agents are {sorted(agents)}")
        for name, config in self.configs.items():
            if config.node != name or (name in given and config.kind != nodes[name].kind):
                raise ValueError(f"the agent config given for {name} is for "
                                 f"{config.kind} {config.node}")

    def _device_group(self, config: AgentConfig) -> Node:
        """Where a device group's container stands: at its first device (emu.cluster.deployment
        groups devices linked alike)."""
        devices = [d for driver in config.drivers for d in driver.devices]
        nodes = self.topology.nodes
        if not devices or any(nodes.get(d) is None or nodes[d].kind != DEVICE_KIND
                              for d in devices):
            raise ValueError(f"device group {config.node}: its drivers' devices {devices} "
                             f"are not devices of topology {self.topology.name}")
        if config.node in nodes and config.node not in devices:
            raise ValueError(f"device group {config.node} is named like another node")
        if len(config.node) > HOSTNAME_MAX:
            raise self.error(("nodes", devices[0], "name"), config.node,
                             f"a name of at most {HOSTNAME_MAX} characters for the container "
                             "of its device group")
        return nodes[devices[0]]

    def _check(self, node: Node) -> None:
        if len(node.name) > HOSTNAME_MAX:
            raise self.error(("nodes", node.name, "name"), node.name,
                             f"a node name of at most {HOSTNAME_MAX} characters, the longest "
                             "hostname a container may have")
        if node.profile.arch not in ("arm64", "amd64"):
            raise self.error(("nodes", node.name, "profile"), node.profile_name,
                             f"a profile of arch arm64 or amd64 for a {node.kind} container "
                             f"(profile {node.profile_name} is {node.profile.arch})")
        if node.profile.memory < MIN_MEMORY:
            raise self.error(("nodes", node.name, "profile"), node.profile_name,
                             f"a profile with at least 6MiB of memory, the least Docker allows "
                             f"(profile {node.profile_name} has {node.profile.memory} bytes)")

    def _latency(self, source: str, target: str) -> float | None:
        try:
            return self.routes.latency(source, target)
        except NoRoute:
            return None

    def _broker(self, name: str, agent: Node) -> str:
        """The broker the container `name`, standing at node `agent`, talks to: the nearest
        of those that are no spare."""
        brokers = first_brokers(self.topology, set(self.spares))
        if not brokers:
            raise self.error(("nodes", agent.name, "kind"), agent.kind,
                             f"a broker node in the topology for {agent.kind} {agent.name} "
                             "to talk to (there is none)")
        broker = nearest(self.routes, agent.name, brokers)
        if broker is None:
            raise self.error(("nodes", agent.name, "links"), agent.name,
                             f"a route from {agent.name} to a broker ({', '.join(brokers)}): "
                             "no links connect them")
        return broker

    def _central(self, candidates: list[Node], clients: list[Node]) -> list[Node]:
        """Candidates by total path latency from the clients; unreachable ones last."""
        def total(candidate: Node) -> float:
            latencies = [self._latency(c.name, candidate.name) for c in clients]
            return math.inf if None in latencies else sum(latencies)

        order = {n.name: i for i, n in enumerate(candidates)}
        return sorted(candidates, key=lambda n: (total(n), order[n.name]))

    def _zookeeper(self, agents: list[Node]) -> tuple[list[str], dict[str, str | None]]:
        """The servers' names in myid order, and the node each stands beside."""
        coordinators = self._central(self.topology.of_kind("coordinator"), agents)
        hosts = [c.name for c in coordinators[:self.servers]]
        anchor = (coordinators[0].name if coordinators else
                  next((b.name for b in self._central(self.topology.of_kind("broker"), agents)),
                       None))
        added = self.servers - len(hosts)
        names = ([ZOOKEEPER_NAME] if self.servers == 1 else
                 [f"{ZOOKEEPER_NAME}-{i}" for i in range(len(hosts) + 1, self.servers + 1)])
        names = names[:added] if added else []
        for name in names:
            if name in self.topology.nodes:
                raise self.error(("nodes", name, "name"), name,
                                 f"a node name other than {name}: the cluster adds a ZooKeeper "
                                 "server of that name (or make the node kind: coordinator)")
        anchors = {host: host for host in hosts} | {name: anchor for name in names}
        return hosts + names, anchors

    def _link(self, client: str, service: str, anchor: str | None, role, port: int,
              origin: str) -> LinkPlan:
        """The client's link to a service, shaped as the path from the node it stands at
        (`origin`) to the node the service stands at (`anchor`)."""
        if anchor is None:
            return LinkPlan(client, service, role, port, LinkShape(0.0), (origin, service))
        try:
            path = self.routes.path(origin, anchor)
        except NoRoute:
            raise self.error(("nodes", origin, "links"), origin,
                             f"a route from {origin} to {anchor}, where the {role} server "
                             f"{service} runs: no links connect them") from None
        graph = self.topology.graph
        return LinkPlan(client, service, role, port, path_shape(self.topology, path),
                        tuple(path), tuple(graph.edges[a, b]["link"].bandwidth
                                           for a, b in pairwise(path)))

    def _container(self, name: str, kind: str, role: Role, site: str | None, node: Node | None,
                   servers: list[str], agent: AgentConfig | None = None,
                   broker: str | None = None) -> ContainerPlan:
        segment = site or DEFAULT_SEGMENT
        profile = node.profile if node is not None and kind != ZOOKEEPER_NAME else None
        image, command, port, files = SERVICES, (), None, ()
        if role == "agent":
            image = GATEWAY if kind == "gateway" and profile.arch == "arm64" else CLOUD
            command = AGENT_COMMAND
        elif role == "broker" and broker_kind(node) == "rabbitmq":
            image, command, port = RABBITMQ, RABBITMQ.cmd, MQTT_PORT
            files = rabbitmq_files(self.cluster, name, node.profile.memory)
        elif role == "broker":
            command, port = MOSQUITTO_COMMAND, MQTT_PORT
            if self.dilation != 1:
                command, files = DILATED_COMMAND, mosquitto_files(self.cluster, name,
                                                                  self.dilation)
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
        if profile.arch not in ("arm64", "amd64") or profile.memory < MIN_MEMORY:
            return DEVICE_CPUS, DEVICE_MEMORY
        return profile.cores * profile.speed * devices, profile.memory * devices


def _pids_limit(role: Role, image: ImageSpec) -> int:
    """A container's pids.max: an agent's, with room for Spark jobs where its image runs
    them (the cloud image), or its service's."""
    if role == "agent":
        return PIDS_AGENT if image == GATEWAY else PIDS_SPARK
    return PIDS_SERVICE[role]


def container_name(cluster: str, node: str) -> str:
    return f"foglab-{cluster}-{node}"


def network_name(cluster: str, segment: str) -> str:
    return f"foglab-{cluster}-{segment}"


def zookeeper_files(cluster: str, servers: list[str], server: str,
                    dilation: float = 1.0) -> tuple[tuple[str, str], ...]:
    """A server's zoo.cfg and, in an ensemble, every server.N (by container name) and its myid.

    The tick and the sessions it accepts come from workloads.recovery, which the model's
    failure detector reads too: a session expires on the first tick after its timeout. At a
    dilation K the tick lasts K times as long on the host, so every bound counted in ticks
    (sessions, initLimit, syncLimit) keeps its emulated value; an ensemble's quorum timers
    (cnxTimeout, the election's notification intervals: ZooKeeper reads unknown keys as
    `zookeeper.<key>` system properties) are scaled with it."""
    peer, election = ZOOKEEPER_PEER_PORTS
    tick_ms = round(ZK_TICK_S * 1000 * dilation)
    lines = [
        "# foglab's ZooKeeper server, written by emu.cluster.plan",
        f"tickTime={tick_ms}", f"minSessionTimeout={ZK_MIN_SESSION_TICKS * tick_ms}",
        f"maxSessionTimeout={ZK_MAX_SESSION_TICKS * tick_ms}",
        # An ensemble's start and follower lag, in ticks: 20 s and 10 s.
        f"initLimit={round(20 / ZK_TICK_S)}", f"syncLimit={round(10 / ZK_TICK_S)}",
        f"dataDir={ZOOKEEPER_DATA}",
        f"clientPort={ZOOKEEPER_PORT}", "maxClientCnxns=0", "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,stat,srvr,mntr",
    ]
    if len(servers) == 1:
        return ((ZOOKEEPER_CONFIG, "\n".join(lines) + "\n"),)
    lines += [
        # Bind the quorum ports on every interface: a container's own name may resolve to an
        # address of another of its networks.
        "quorumListenOnAllIPs=true",
        *_quorum_timers(dilation),
        *(f"server.{i}={container_name(cluster, name)}:{peer}:{election}"
          for i, name in enumerate(servers, start=1)),
    ]
    myid = servers.index(server) + 1
    return ((ZOOKEEPER_CONFIG, "\n".join(lines) + "\n"), (f"{ZOOKEEPER_DATA}/myid", f"{myid}\n"))


def _quorum_timers(dilation: float) -> list[str]:
    if dilation == 1:
        return []
    low, high = ZK_ELECTION_NOTIFICATION_MS
    return [f"# Quorum timers at dilation {dilation:g}: their defaults x {dilation:g}",
            f"cnxTimeout={round(ZK_CNX_TIMEOUT_MS * dilation)}",
            f"fastleader.minNotificationInterval={round(low * dilation)}",
            f"fastleader.maxNotificationInterval={round(high * dilation)}"]


def _scaled_seconds(seconds: float, dilation: float) -> int:
    # Mosquitto reads whole seconds: at a K that is not a whole number, the nearest one.
    return max(1, round(seconds * dilation))


def mosquitto_timers(dilation: float, sys_interval_s: float = MOSQUITTO_SYS_INTERVAL_S) -> str:
    """The conf lines of Mosquitto's own timers at a dilation K: each K times its emulated
    value (the defaults; `sys_interval_s` a spare's). Clients' keepalives are the clients':
    Mosquitto enforces 1.5 times what each CONNECT asks for, so a client that scales its
    keepalive (the agents do, emu.agent) is held to the scaled one."""
    return "\n".join([
        f"# Mosquitto's timers at dilation {dilation:g}: emulated value x {dilation:g}",
        f"autosave_interval {_scaled_seconds(MOSQUITTO_AUTOSAVE_S, dilation)}",
        f"sys_interval {_scaled_seconds(sys_interval_s, dilation)}"]) + "\n"


def mosquitto_files(cluster: str, broker: str, dilation: float) -> tuple[tuple[str, str], ...]:
    """A broker's mosquitto.conf at a dilation (DILATED_CONFIG): the image's settings and its
    timers scaled (`mosquitto_timers`)."""
    header = f"# {broker}: a broker of cluster {cluster} (emu.cluster.plan.mosquitto_files)\n"
    return ((DILATED_CONFIG,
             MOSQUITTO_DEFAULTS.read_text() + header + mosquitto_timers(dilation)),)


def rabbitmq_files(cluster: str, broker: str, memory: int) -> tuple[tuple[str, str], ...]:
    """A RabbitMQ broker's rabbitmq.conf (RABBITMQ_CONFIG): the image's, with the memory its
    container has (its profile's), which the Erlang VM would otherwise read as the host's: the
    memory watermark, a share of it, then blocks publishers before the kernel kills the node."""
    header = f"# {broker}: a broker of cluster {cluster} (emu.cluster.plan.rabbitmq_files)\n"
    return ((RABBITMQ_CONFIG, RABBITMQ_DEFAULTS.read_text() + header
             + f"total_memory_available_override_value = {int(memory)}\n"),)


def spare_files(cluster: str, spare: str,
                dilation: float = 1.0) -> tuple[tuple[str, str], ...]:
    """A spare broker's mosquitto.conf: the image's settings, and its $SYS counters published
    every (emulated) second, so the host can read how many messages it received
    (emu.features.broker_scaling); at a dilation, its timers scaled (`mosquitto_timers`)."""
    defaults = MOSQUITTO_DEFAULTS.read_text()
    header = f"# {spare}: a spare broker of cluster {cluster} (emu.cluster.plan.spare_files)\n"
    timers = (f"sys_interval {SPARE_SYS_INTERVAL_S}\n" if dilation == 1 else
              mosquitto_timers(dilation, SPARE_SYS_INTERVAL_S))
    return ((SPARE_CONFIG, defaults + header + timers),)

