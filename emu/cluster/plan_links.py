"""A cluster plan's links (emu.cluster.plan): which broker each client talks to, which other
brokers it reaches, and each link's shape from its topology path. Plain data, without Docker.

A client (gateway or cloud VM) talks TCP to its broker, the one nearest by routing
(topologies.routing.nearest, as the model picks it: clients of one kind take equally near
brokers in turn) among those that are no spare, and to every ZooKeeper server. Each such
pair gets the shape of its topology path, hop by hop: latencies add up; jitters, independent
per hop, add as variances (root sum of squares); the bandwidth is the narrowest hop's (none
when no hop has one); losses combine as 1 - prod(1 - loss). The shape applies to each
direction: a round trip costs twice the latency. Pairs whose paths cross one hop with a
bandwidth share it (with the relay shaper: `LinkPlan.bandwidths` gives each hop's); netem
shapes each client's interface on its own, so there each pair has the path's narrowest
bandwidth to itself.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from emu.agent.config import AGENT_KINDS, AgentConfig
from emu.cluster.plan_checks import topology_error
from emu.links.spec import LinkShape
from topologies.errors import SpecError
from topologies.model import Node, Topology
from topologies.routing import NoRoute, Routes, latency, nearest
from workloads.broker_scaling import first_brokers
from workloads.operator_engines import Move, operator_engine


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


def reads_through_broker(config: AgentConfig) -> bool:
    """Whether an agent's operators read through its node session, which then reads on the
    other brokers too (AgentConfig.other_brokers)."""
    return any(not (op.session or operator_engine(op.engine).own_session)
               for op in config.operators)


class LinkPlanner:
    """The routes of one topology's plan: each client's broker and links."""

    def __init__(self, topology: Topology, routes: Routes):
        self.topology = topology
        self.routes = routes

    def error(self, path: tuple, value: object, expected: str) -> SpecError:
        return topology_error(self.topology, path, value, expected)

    def broker(self, agent: Node, spares: Collection[str]) -> str:
        """The broker a container standing at node `agent` talks to: the nearest of those
        that are no spare."""
        brokers = first_brokers(self.topology, set(spares))
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

    def link(self, client: str, service: str, anchor: str | None, role, port: int,
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

    def session_brokers(self, configs: Mapping[str, AgentConfig],
                        targets: Mapping[str, Collection[str]] | None,
                        standing: Mapping[str, Node],
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
        for start, config in configs.items():
            for op in config.operators:
                if (not op.session or operator_engine(op.engine).moves_by is not Move.AGENTS
                        or op.broker == ""):
                    continue  # a follow instance reads on its node's broker, wherever it is
                home = op.broker or brokers[start]
                if targets is None:
                    may_take = movers
                else:
                    may_take = targets.get(op.name, ())
                    unknown = sorted(set(may_take) - set(movers))
                    if unknown:
                        raise self.error(("pipeline", op.name), unknown[0], (
                            f"a gateway or cloud VM of topology {self.topology.name} to move "
                            f"{op.name} to ({', '.join(movers)})"))
                for target in may_take:
                    if brokers[target] != home:
                        reach.setdefault(target, set()).add(home)
        return reach
