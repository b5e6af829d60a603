"""A topology for other tools: GraphML (Gephi, yEd, igraph, networkx) or JSON (networkx's
node-link form, which d3 and most graph libraries read).

Every node carries its kind, group, profile, cores, speed, memory (bytes), site and position
(metres); every link its latency and jitter (seconds), bandwidth (bits per second; absent:
not a bottleneck) and loss (a fraction). Units are SI and said in the file itself: the graph's
`units` attribute (GraphML: the graph's data; JSON: `graph.units`). The graph is undirected,
as the topology's links are.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import networkx as nx

from topologies.model import Topology

UNITS = ("latency and jitter in s, bandwidth in bit/s, loss a fraction, memory in bytes, "
         "position in m")


def graph(topology: Topology) -> nx.Graph:
    """The topology as a plain networkx graph of scalar attributes (GraphML takes no None)."""
    found = nx.Graph(name=topology.name, units=UNITS)
    for node in topology.nodes.values():
        found.add_node(node.name, kind=node.kind, group=node.group, profile=node.profile_name,
                       cores=node.profile.cores, speed=float(node.profile.speed),
                       memory=int(node.profile.memory), site=node.site or "",
                       x=float(node.position[0]), y=float(node.position[1]))
    for link in topology.links:
        fields = {"latency": float(link.latency), "jitter": float(link.jitter),
                  "loss": float(link.loss)}
        if link.bandwidth is not None:
            fields["bandwidth"] = float(link.bandwidth)
        found.add_edge(link.a, link.b, **fields)
    return found


def graphml(topology: Topology, path: Path) -> None:
    nx.write_graphml(graph(topology), path)


def node_link(topology: Topology, path: Path) -> None:
    """networkx's node-link form (nx.node_link_graph reads it back), written here rather
    than by nx.node_link_data, whose keyword for the links changed within networkx 3."""
    found = graph(topology)
    data = {"directed": False, "multigraph": False, "graph": dict(found.graph),
            "nodes": [{"id": name, **fields} for name, fields in found.nodes(data=True)],
            "links": [{"source": a, "target": b, **fields}
                      for a, b, fields in found.edges(data=True)]}
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


# The formats by name, each with its file suffix.
FORMATS: dict[str, tuple[str, Callable[[Topology, Path], None]]] = {
    "graphml": (".graphml", graphml),
    "json": (".json", node_link),
}


def export(topology: Topology, path: Path, kind: str) -> Path:
    """Write the topology to `path` as `kind` (FORMATS); ValueError naming the known ones."""
    if kind not in FORMATS:
        raise ValueError(f"--format: one of {', '.join(FORMATS)}, got {kind!r}")
    FORMATS[kind][1](topology, path)
    return path
