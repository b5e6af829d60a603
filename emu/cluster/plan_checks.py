"""What a cluster's plan refuses before anything is made (emu.cluster.plan): a name, node,
profile or agent config Docker or the agents cannot take, each a SpecError naming the node and
field (or a ValueError for a caller's mistake). Plain data, without Docker."""

from __future__ import annotations

from collections.abc import Mapping

from emu.agent.config import AgentConfig
from emu.agent.protocol import output_topic, stream_topic
from emu.cluster.names import CLUSTER_NAME
from topologies.errors import SpecError
from topologies.model import Node, Topology
from workloads.operator_engines import operator_engine
from workloads.topics import matches, shared

CONTAINER_KINDS = ("gateway", "cloud_vm", "broker", "coordinator")
DEVICE_KIND = "device"  # a device group's container (emu.cluster.deployment.device_hosts)
HOSTNAME_MAX = 63
MIN_MEMORY = 6 * 1024**2  # Docker refuses a smaller memory limit
ARCHES = ("arm64", "amd64")  # what a container can run: natively, or under QEMU


def topology_error(topology: Topology, path: tuple, value: object, expected: str) -> SpecError:
    return SpecError(path, value, expected, f"topology {topology.name}")


def checked_nodes(topology: Topology, cluster: str, servers: int) -> list[Node]:
    """The topology's nodes that become containers, each checked, once the cluster's name
    and its number of ZooKeeper servers are."""
    if not CLUSTER_NAME.match(cluster):
        raise topology_error(topology, ("cluster",), cluster,
                             "a cluster name Docker accepts: letters, digits, _ . or -, "
                             "starting with a letter or digit, at most 40 characters")
    if servers not in (1, 3):
        raise topology_error(topology, ("zookeeper",), servers, "1 or 3 ZooKeeper servers")
    nodes = [n for n in topology.nodes.values() if n.kind in CONTAINER_KINDS]
    for node in nodes:
        _check_node(topology, node)
    return nodes


def _check_node(topology: Topology, node: Node) -> None:
    if len(node.name) > HOSTNAME_MAX:
        raise topology_error(topology, ("nodes", node.name, "name"), node.name,
                             f"a node name of at most {HOSTNAME_MAX} characters, the longest "
                             "hostname a container may have")
    if node.profile.arch not in ARCHES:
        raise topology_error(topology, ("nodes", node.name, "profile"), node.profile_name,
                             f"a profile of arch arm64 or amd64 for a {node.kind} container "
                             f"(profile {node.profile_name} is {node.profile.arch})")
    if node.profile.memory < MIN_MEMORY:
        raise topology_error(topology, ("nodes", node.name, "profile"), node.profile_name,
                             "a profile with at least 6MiB of memory, the least Docker allows "
                             f"(profile {node.profile_name} has {node.profile.memory} bytes)")


def check_configs(topology: Topology, configs: Mapping[str, AgentConfig],
                  agents: list[str]) -> None:
    """One config per agent node, for that node, and device groups' (kind device): the
    configs are another topology's otherwise (a caller's mistake, not the user's)."""
    nodes = topology.nodes
    given = {name for name, config in configs.items() if config.kind != DEVICE_KIND}
    if given != set(agents):
        raise ValueError(f"agent configs for {sorted(given)}, but topology "
                         f"{topology.name}'s agents are {sorted(agents)}")
    for name, config in configs.items():
        if config.node != name or (name in given and config.kind != nodes[name].kind):
            raise ValueError(f"the agent config given for {name} is for "
                             f"{config.kind} {config.node}")


def device_group(topology: Topology, config: AgentConfig) -> Node:
    """Where a device group's container stands: at its first device (emu.cluster.deployment groups
    devices linked alike)."""
    devices = [d for driver in config.drivers for d in driver.devices]
    nodes = topology.nodes
    if not devices or any(nodes.get(d) is None or nodes[d].kind != DEVICE_KIND
                          for d in devices):
        raise ValueError(f"device group {config.node}: its drivers' devices {devices} "
                         f"are not devices of topology {topology.name}")
    if config.node in nodes and config.node not in devices:
        raise ValueError(f"device group {config.node} is named like another node")
    if len(config.node) > HOSTNAME_MAX:
        raise topology_error(topology, ("nodes", devices[0], "name"), config.node,
                             f"a name of at most {HOSTNAME_MAX} characters for the container "
                             "of its device group")
    return nodes[devices[0]]


def check_own_sessions(topology: Topology, configs: Mapping[str, AgentConfig],
                       brokers: Mapping[str, str]) -> None:
    """Refuse, before anything starts, an operator instance reading through a session of
    its own (one that may move: migrations, recovery, replication; or a Spark query)
    that would read topics another broker carries: such a session reads its node's
    broker only, and the readings published elsewhere would be silently missing."""
    published = {name: {stream_topic(d.stream, name, device, d.channel)
                        for d in config.drivers for device in d.devices}
                 | {output_topic(op.writes, name) for op in config.operators if op.writes}
                 for name, config in configs.items()}
    for reader, config in configs.items():
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
                    raise topology_error(topology, ("pipeline", op.name, "on"), reader, (
                        f"on emu, {op.name} on {reader} reads through a session of its "
                        f"own ({why}), on its broker {brokers[reader]} only, and {publisher} "
                        f"publishes {topic} to {brokers[publisher]}: link them to one "
                        "broker, or run it on sim"))
