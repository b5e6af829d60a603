"""A drawing of a topology: infrastructure in layers by kind, devices gathered per gateway."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import networkx as nx
from matplotlib.figure import Figure

from topologies.model import Topology

LAYERS = {"device": 0, "gateway": 1, "switch": 2, "coordinator": 3, "broker": 3, "cloud_vm": 4}
COLOURS = {"device": "#9ecae1", "gateway": "#31a354", "switch": "#bdbdbd",
           "coordinator": "#fdae6b", "broker": "#e6550d", "cloud_vm": "#756bb1"}


def summary_graph(topology: Topology, max_devices: int = 24) -> nx.Graph:
    """The topology's graph; beyond `max_devices` devices, one node per gateway stands for its
    devices (`200 devices` become `50 x sensor` under each of four gateways)."""
    graph = topology.graph
    devices = [n for n in topology.nodes.values() if n.kind == "device"]
    if len(devices) <= max_devices:
        return graph.copy()
    drawn = graph.subgraph(n for n in graph if topology.nodes[n].kind != "device").copy()
    gathered: dict[str, Counter] = {}
    for device in devices:
        anchors = list(graph.adj[device.name]) or ["(unlinked)"]
        gathered.setdefault(anchors[0], Counter())[device.group] += 1
    for anchor, groups in gathered.items():
        for group, count in groups.items():
            name = f"{count} x {group}\n@{anchor}"
            drawn.add_node(name, kind="device", count=count)
            if anchor in drawn:
                drawn.add_edge(name, anchor, latency=None)
    return drawn


def draw(topology: Topology, out: Path | str) -> Path:
    graph = summary_graph(topology)
    layers: dict[int, list[str]] = {}
    for name, data in graph.nodes(data=True):
        layers.setdefault(LAYERS.get(data["kind"], 2), []).append(name)
    positions = {}
    for level, names in layers.items():
        for i, name in enumerate(sorted(names)):
            positions[name] = ((i + 1) / (len(names) + 1), level)
    width = max(8.0, 1.2 * max(len(v) for v in layers.values()))
    # A Figure of its own, not pyplot's: drawing to a file leaves a notebook's backend alone.
    fig = Figure(figsize=(min(width, 30), 6))
    ax = fig.subplots()
    kinds = [graph.nodes[n]["kind"] for n in graph]
    nx.draw_networkx_edges(graph, positions, ax=ax, edge_color="#999999")
    nx.draw_networkx_nodes(graph, positions, ax=ax, node_color=[COLOURS[k] for k in kinds],
                           node_size=[900 if k != "device" else 600 for k in kinds])
    nx.draw_networkx_labels(graph, positions, ax=ax, font_size=7)
    labels = {(a, b): f"{d['latency'] * 1000:g} ms" for a, b, d in graph.edges(data=True)
              if d.get("latency") is not None and graph.number_of_edges() <= 60}
    nx.draw_networkx_edge_labels(graph, positions, edge_labels=labels, ax=ax, font_size=6)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(topology.counts().items()))
    ax.set_title(f"{topology.name}: {counts}")
    ax.axis("off")
    fig.tight_layout()
    path = Path(out)
    fig.savefig(path, dpi=110)
    return path
