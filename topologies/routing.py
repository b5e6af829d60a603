"""Routing decisions both backends share: paths, their latency, the nearest node, a gateway."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise

import networkx as nx

from topologies.model import Topology

# Path latencies closer than this (seconds) are equal: sums over different hops differ by
# rounding alone.
TIE = 1e-9


class NoRoute(LookupError):
    def __init__(self, source: str, target: str):
        super().__init__(f"no route from {source} to {target}: the topology does not connect them")
        self.source, self.target = source, target


class Routes:
    """Lowest-latency paths; a tree per destination serves every source at once."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self._graph = topology.graph
        # Leaves (devices) never carry others' traffic: trees span the rest, which is small.
        self._core = self._graph.subgraph(n for n, d in self._graph.degree if d > 1)
        self._trees: dict[str, dict[str, str]] = {}
        # (kind, candidates) -> node -> its choice, for nodes with equally near candidates
        self._shares: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}

    def path(self, source: str, target: str) -> list[str]:
        """The nodes from source to target, both included."""
        if source == target:
            return [source]
        neighbours = self._graph.adj[source]
        target_links = self._graph.adj[target]
        if not neighbours or not target_links:
            raise NoRoute(source, target)
        if len(neighbours) == 1 and len(target_links) == 1 and (
                target in neighbours or next(iter(neighbours)) in target_links):
            return [source, target] if target in neighbours else [
                source, next(iter(neighbours)), target]
        try:
            if len(neighbours) == 1:
                # A leaf (a device) can only go through its one neighbour: no tree needed for
                # the thousands of gateways devices send to.
                (only,) = neighbours
                if len(self._graph.adj[only]) == 1:
                    raise NoRoute(source, target)  # a pair linked only to each other
                return [source, *self.path(only, target)]
            if len(target_links) == 1:
                # Toward a leaf: its one link is the last hop.
                (last,) = target_links
                if len(self._graph.adj[last]) == 1:
                    raise NoRoute(source, target)  # a pair linked only to each other
                return [*self.path(source, last), target]
        except NoRoute:
            raise NoRoute(source, target) from None
        toward = self._tree(target)
        if source not in toward:
            raise NoRoute(source, target)
        path = [source]
        while path[-1] != target:
            path.append(toward[path[-1]])
        return path

    def latency(self, source: str, target: str) -> float:
        """The latency of the lowest-latency path (see `latency`)."""
        return latency(self.topology, self.path(source, target))

    def _tree(self, target: str) -> dict[str, str]:
        """For every node that reaches target, the next node on its lowest-latency path."""
        if target not in self._trees and target not in self._core:
            self._trees[target] = {target: target}  # isolated: nothing reaches it
        if target not in self._trees:
            # Dijkstra from the destination: on an undirected graph each node's predecessor is
            # its next hop toward the destination.
            preds, _ = nx.dijkstra_predecessor_and_distance(self._core, target, weight="latency")
            self._trees[target] = {node: (parents[0] if parents else target)
                                   for node, parents in preds.items()}
        return self._trees[target]


def latency(topology: Topology, path: Iterable[str]) -> float:
    """A path's latency: its links' latencies summed from its first hop to its last."""
    edges = topology.graph.edges
    return sum(edges[a, b]["latency"] for a, b in pairwise(path))


def _equally_near(routes: Routes, node: str, candidates: Sequence[str]) -> tuple[str, ...]:
    """The reachable candidates at the least path latency from node, in the order given."""
    reachable = []
    for candidate in candidates:
        try:
            reachable.append((routes.latency(node, candidate), candidate))
        except NoRoute:
            continue
    if not reachable:
        return ()
    best = min(distance for distance, _ in reachable)
    return tuple(c for distance, c in reachable if distance <= best + TIE)


def nearest(routes: Routes, node: str, candidates: Sequence[str]) -> str | None:
    """The candidate at the least path latency from node; None when none is reachable.

    Tie rule: nodes of one kind that have the same equally near candidates take them in turn,
    in declaration order: the k-th such node (from 0) takes the (k mod n)-th of its n
    candidates, in the order given. So the gateways (or cloud VMs, or devices publishing
    themselves) sharing equally near brokers spread over them evenly, as IoTCloud's gateways
    balance their load over its brokers, and the choice depends on the topology alone: every
    backend computes it alike.
    """
    tied = _equally_near(routes, node, candidates)
    if len(tied) < 2:
        return tied[0] if tied else None
    kind = routes.topology.nodes[node].kind
    key = (kind, tuple(candidates))
    shares = routes._shares.get(key)
    if shares is None:
        shares = routes._shares[key] = {}
        turns: dict[tuple[str, ...], int] = {}
        for peer in routes.topology.of_kind(kind):
            own = _equally_near(routes, peer.name, candidates)
            if len(own) > 1:
                turn = turns[own] = turns.get(own, -1) + 1
                shares[peer.name] = own[turn % len(own)]
    return shares[node]


def gateway_of(topology: Topology, device: str) -> str | None:
    """The gateway a device is linked to directly, the one of least link latency (the first
    declared of equally near ones); None when no gateway is linked to it."""
    graph, nodes = topology.graph, topology.nodes
    linked = [n for n in graph.adj[device] if nodes[n].kind == "gateway"]
    if not linked:
        return None
    best = min(graph.edges[device, n]["latency"] for n in linked)
    tied = {n for n in linked if graph.edges[device, n]["latency"] <= best + TIE}
    if len(tied) == 1:
        return tied.pop()
    return next(n for n in nodes if n in tied)  # rare: a scan in declaration order
