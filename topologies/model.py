"""The expanded topology: named nodes and links as plain data, built from a topology file."""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx

from topologies.brokers import BROKER_KINDS, DEFAULT_BROKER_KIND, BrokerKind
from topologies.errors import SpecError
from topologies.profiles import BUILTIN_PROFILES, DEFAULT_PROFILE, Profile
from topologies.spec import BrokerSpec, LinkSpec, NodeSpec, SparkClusterSpec, TopologySpec

MAX_PAIRS = 2_000_000


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    kind: str
    profile_name: str
    profile: Profile
    site: str | None
    position: tuple[float, float]
    group: str
    broker: BrokerSpec | None = None

    @property
    def broker_kind(self) -> BrokerKind:
        """The server a broker node runs: its `broker.kind` (topologies.brokers), the default
        kind's where it has no broker settings."""
        return BROKER_KINDS[self.broker.kind] if self.broker is not None else DEFAULT_BROKER_KIND


@dataclass(frozen=True, slots=True)
class Link:
    """A full-duplex link; each direction has its own queue."""

    a: str
    b: str
    latency: float
    jitter: float = 0.0
    bandwidth: float | None = None  # bits per second; None: not a bottleneck
    loss: float = 0.0


@dataclass
class Topology:
    name: str
    nodes: dict[str, Node]
    links: list[Link]
    description: str = ""
    spark: SparkClusterSpec | None = None  # a Spark standalone cluster among its cloud VMs
    _by_pattern: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def match(self, pattern: str) -> list[str]:
        """Node names matching a glob (`gw-*`), in declaration order."""
        if pattern not in self._by_pattern:
            if pattern in self.nodes:
                found = [pattern]
            else:
                regex = re.compile(fnmatch.translate(pattern))
                found = [name for name in self.nodes if regex.match(name)]
            self._by_pattern[pattern] = found
        return self._by_pattern[pattern]

    def select(self, patterns: list[str]) -> list[str]:
        """Node names matching any of the patterns, each once, in declaration order."""
        found: dict[str, None] = {}
        for pattern in patterns:
            found.update(dict.fromkeys(self.match(pattern)))
        return list(found)

    def of_kind(self, kind: str) -> list[Node]:
        return [node for node in self.nodes.values() if node.kind == kind]

    @cached_property
    def graph(self) -> nx.Graph:
        graph = nx.Graph(name=self.name)
        for node in self.nodes.values():
            graph.add_node(node.name, kind=node.kind, site=node.site, pos=node.position)
        for link in self.links:
            graph.add_edge(link.a, link.b, latency=link.latency, link=link)
        return graph

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes.values():
            counts[node.kind] = counts.get(node.kind, 0) + 1
        return counts


def expand(spec: TopologySpec) -> Topology:
    """Expand replicas, resolve profiles and sites, and apply link rules in order."""
    profiles = {**BUILTIN_PROFILES, **spec.profiles}
    sites = {site.name: site for site in spec.sites}
    nodes: dict[str, Node] = {}
    for index, group in enumerate(spec.nodes):
        for node in _expand_group(group, ("nodes", index), profiles, sites):
            if node.name in nodes:
                raise SpecError(("nodes", index, "name"), node.name,
                                f"a unique node name, but {node.name} is already defined")
            nodes[node.name] = node
    topology = Topology(spec.name, nodes, [], spec.description)
    links: dict[tuple[str, str], Link] = {}
    for index, rule in enumerate(spec.links):
        for a, b in _pairs(topology, rule, ("links", index)):
            # Later rules override earlier ones for the same pair, whichever way round.
            links[(a, b) if a < b else (b, a)] = Link(a, b, rule.latency, rule.jitter,
                                                      rule.bandwidth, rule.loss)
    topology.links = list(links.values())
    if spec.spark is not None:
        topology.spark = _spark_cluster(spec.spark, nodes)
    return topology


def _spark_cluster(spark: SparkClusterSpec, nodes: dict[str, Node]) -> SparkClusterSpec:
    """The cluster's VMs are cloud VMs of the topology, each worker named once."""
    named = [(("spark", "master"), spark.master)] + [
        (("spark", "workers", i), worker) for i, worker in enumerate(spark.workers)]
    for path, name in named:
        node = nodes.get(name)
        if node is None or node.kind != "cloud_vm":
            vms = [n for n, node in nodes.items() if node.kind == "cloud_vm"]
            raise SpecError(path, name, f"a cloud VM of the topology ({', '.join(vms) or 'none'})")
    if len(set(spark.workers)) != len(spark.workers):
        raise SpecError(("spark", "workers"), spark.workers, "each worker named once")
    return spark


def _expand_group(group: NodeSpec, path: tuple, profiles: dict[str, Profile],
                  sites: dict) -> list[Node]:
    profile_name = group.profile or DEFAULT_PROFILE[group.kind]
    if profile_name not in profiles:
        raise SpecError(path + ("profile",), profile_name,
                        f"a known profile ({', '.join(sorted(profiles))})")
    if group.site is not None and group.site not in sites:
        raise SpecError(path + ("site",), group.site,
                        f"a site declared under sites ({', '.join(sorted(sites)) or 'none'})")
    if group.broker is not None and group.kind != "broker":
        raise SpecError(path + ("broker",), group.kind, "broker settings only on kind: broker")
    broker = group.broker or (BrokerSpec() if group.kind == "broker" else None)
    centre = group.position or (sites[group.site].position if group.site else (0.0, 0.0))
    if group.replicas is None:
        names, positions = [group.name], [centre]
    else:
        names = [f"{group.name}-{i}" for i in range(1, group.replicas + 1)]
        positions = _grid(centre, group.replicas, group.spacing)
    return [Node(name, group.kind, profile_name, profiles[profile_name], group.site,
                 position, group.name, broker)
            for name, position in zip(names, positions, strict=True)]


def _grid(centre: tuple[float, float], count: int, spacing: float) -> list[tuple[float, float]]:
    """Replicas on a square grid centred on their group's position."""
    side = math.ceil(math.sqrt(count))
    offset = (side - 1) * spacing / 2
    return [(centre[0] - offset + (i % side) * spacing, centre[1] - offset + (i // side) * spacing)
            for i in range(count)]


def _matched(topology: Topology, patterns: list[str], path: tuple) -> list[str]:
    found: dict[str, None] = {}  # an ordered set
    for i, pattern in enumerate(patterns):
        names = topology.match(pattern)
        if not names:
            raise SpecError(path + (i,), pattern, "a node name or pattern that matches a node")
        found.update(dict.fromkeys(names))
    return list(found)


def _pairs(topology: Topology, rule: LinkSpec, path: tuple) -> list[tuple[str, str]]:
    sources = _matched(topology, rule.source, path + ("from",))
    targets = _matched(topology, rule.target, path + ("to",))
    if rule.mode == "spread":
        block = math.ceil(len(sources) / len(targets))
        pairs = [(s, targets[i // block]) for i, s in enumerate(sources)]
    else:
        if len(sources) * len(targets) > MAX_PAIRS:
            raise SpecError(path, f"{len(sources)} x {len(targets)} nodes",
                            f"at most {MAX_PAIRS:,} links from one rule (mode: spread?)")
        pairs = [(s, t) for s in sources for t in targets]
    for a, b in pairs:
        if a == b:
            raise SpecError(path, a, "a link between two different nodes")
    return pairs
