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
        self._trees: dict[str, dict[str, str]] = {}

    def path(self, source: str, target: str) -> list[str]:
        """The nodes from source to target, both included."""
        if source == target:
            return [source]
        neighbours = self._graph.adj[source]
        if len(neighbours) == 1:
            # A leaf (a device) can only go through its one neighbour: no tree needed for the
            # thousands of gateways devices send to.
            (only,) = neighbours
            return [source, *self.path(only, target)]
        if target in neighbours and len(self._graph.adj[target]) == 1:
            return [source, target]  # toward a leaf, its one link is the only way
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
        if target not in self._trees:
            # Dijkstra from the destination: on an undirected graph each node's predecessor is
            # its next hop toward the destination.
            preds, _ = nx.dijkstra_predecessor_and_distance(self._graph, target, weight="latency")
            self._trees[target] = {node: (parents[0] if parents else target)
                                   for node, parents in preds.items()}
        return self._trees[target]
