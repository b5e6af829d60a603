"""Routes between nodes by lowest total latency, one shortest-path tree per destination."""

from __future__ import annotations

from itertools import pairwise

import networkx as nx

from topologies.model import Topology


class NoRoute(LookupError):
    def __init__(self, source: str, target: str):
        super().__init__(f"no route from {source} to {target}: the topology does not connect them")
        self.source, self.target = source, target


class Routes:
    """Lowest-latency paths; a tree per destination serves every source at once."""

    def __init__(self, topology: Topology):
        self._graph = topology.graph
        # Leaves (devices) never carry others' traffic: trees span the rest, which is small.
        self._core = self._graph.subgraph(n for n, d in self._graph.degree if d > 1)
        self._trees: dict[str, dict[str, str]] = {}

    def path(self, source: str, target: str) -> list[str]:
        """The nodes from source to target, both included."""
        if source == target:
            return [source]
        neighbours = self._graph.adj[source]
        target_links = self._graph.adj[target]
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
        path = self.path(source, target)
        return sum(self._graph.edges[a, b]["latency"] for a, b in pairwise(path))

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
