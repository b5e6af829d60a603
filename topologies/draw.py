"""A drawing of a topology: nodes in layers by kind, crowds drawn as groups with a count, and a
legend of the kinds and of what the labels mean."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import networkx as nx
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from topologies.model import Topology

LAYERS = {"device": 0, "gateway": 1, "switch": 2, "coordinator": 3, "broker": 3, "cloud_vm": 4}
COLOURS = {"device": "#9ecae1", "gateway": "#31a354", "switch": "#bdbdbd",
           "coordinator": "#fdae6b", "broker": "#e6550d", "cloud_vm": "#756bb1"}
KIND_NAMES = {"cloud_vm": "cloud VM"}
MAX_DEVICES = 24  # more devices than this are drawn as one node per group and gateway
MAX_PER_LAYER = 16  # more nodes in a layer than this are drawn as groups with a count
FONT = 7  # points, node labels; a link's latency is a point smaller
EDGE_COLOUR = "#999999"
# Where along a link its latency may go, tried in turn until it overlaps no other label.
ALONG = (0.5, 0.35, 0.65, 0.22, 0.78)
GAP = 2  # pixels kept free around each label


def number_order(name: str) -> tuple:
    """Sort key putting gw-2 before gw-10: the digits of a name compared as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def summary_graph(topology: Topology, max_devices: int = MAX_DEVICES,
                  max_per_layer: int = MAX_PER_LAYER) -> nx.Graph:
    """The graph drawn: each node has `kind`, `count` (the topology's nodes it stands for) and
    `members` (their names, in number order); each edge `latencies`, the latencies of the links
    it stands for. A layer of more than `max_per_layer` nodes becomes one node per group and
    upper neighbour (`25 x gw @district-1`); beyond `max_devices` devices, one node per device
    group and gateway stands for them (`50 x sensor @gw-1`)."""
    graph = topology.graph
    drawn_of: dict[str, str] = {}
    infrastructure: dict[int, list] = {}
    for node in topology.nodes.values():
        if node.kind != "device":
            infrastructure.setdefault(LAYERS.get(node.kind, 2), []).append(node)
    # Top down, so that a crowded layer is grouped by its upper neighbours as they are drawn.
    for level in sorted(infrastructure, reverse=True):
        nodes = infrastructure[level]
        if len(nodes) <= max_per_layer:
            drawn_of.update((node.name, node.name) for node in nodes)
            continue
        anchored = _grouped(nodes, lambda node, level=level: tuple(sorted(
            {drawn_of.get(n, n) for n in graph.adj[node.name]
             if topology.nodes[n].kind != "device"
             and LAYERS.get(topology.nodes[n].kind, 2) != level}, key=number_order)))
        if len(set(anchored.values())) > max_per_layer:  # too many: one node per group
            anchored = _grouped(nodes, lambda node: ())
        drawn_of.update(anchored)
    devices = [node for node in topology.nodes.values() if node.kind == "device"]
    if len(devices) <= max_devices:
        drawn_of.update((node.name, node.name) for node in devices)
    else:
        def anchor(node) -> tuple:
            linked = [drawn_of[n] for n in graph.adj[node.name] if n in drawn_of]
            linked = min(linked, key=number_order).replace("\n", " ") if linked else "(unlinked)"
            return (linked,)

        gathered = _grouped(devices, anchor)
        if len(set(gathered.values())) > max_per_layer * 2:
            gathered = _grouped(devices, lambda node: ())
        drawn_of.update(gathered)
    drawn = nx.Graph(name=topology.name)
    members: dict[str, list[str]] = {}
    for name, group in drawn_of.items():
        members.setdefault(group, []).append(name)
    for group, names in members.items():
        names.sort(key=number_order)
        drawn.add_node(group, kind=topology.nodes[names[0]].kind, count=len(names),
                       members=names)
    for link in topology.links:
        a, b = drawn_of[link.a], drawn_of[link.b]
        if a == b:
            continue  # a link inside a group drawn as one node
        if drawn.has_edge(a, b):
            drawn.edges[a, b]["latencies"].append(link.latency)
        else:
            drawn.add_edge(a, b, latencies=[link.latency])
    return drawn


def _grouped(nodes: list, anchors) -> dict[str, str]:
    """Each node's drawn name when nodes of one group and the same `anchors(node)` are drawn
    as one: `count x group`, and `@anchor` under it when there is one."""
    key_of = {node.name: (node.group, anchors(node)) for node in nodes}
    counts = Counter(key_of.values())
    names = {}
    for node in nodes:
        group, anchored = key_of[node.name]
        where = ""
        if anchored:
            where = f"\n@{anchored[0]}" + (f" +{len(anchored) - 1}" if len(anchored) > 1 else "")
        names[node.name] = f"{counts[group, anchored]:,} x {group}{where}"
    return names


def figure(topology: Topology) -> Figure:
    """The drawing, on a Figure of its own (not pyplot's: a notebook's backend stays as it
    is), laid out so that no two labels overlap."""
    graph = summary_graph(topology)
    layers: dict[tuple[int, int], list[str]] = {}
    for name in graph:
        layers.setdefault(_row(graph, name), []).append(name)
    rows = {level: row for row, level in enumerate(sorted(layers))}
    positions: dict[str, tuple[float, float]] = {}
    # Upper layers first in number order; a device group then sits under its gateway.
    for level in sorted(layers, reverse=True):
        names = layers[level]
        if level[0] == LAYERS["device"]:
            def under(name: str) -> tuple:
                linked = [positions[n][0] for n in graph.adj[name] if n in positions]
                return (min(linked) if linked else float("inf"),
                        number_order(graph.nodes[name]["members"][0]))
            names.sort(key=under)
        else:
            names.sort(key=lambda name: number_order(graph.nodes[name]["members"][0]))
        for i, name in enumerate(names):
            positions[name] = (i - (len(names) - 1) / 2, rows[level])
    # A slot per node wide enough for its label (a character is about 0.6 em wide).
    longest = max(len(line) for name in graph for line in name.split("\n"))
    slot = max(1.0, longest * FONT * 0.62 / 72 + 0.3)
    widest = max(len(names) for names in layers.values())
    fig = Figure(figsize=(max(8.0, slot * (widest + 1)), 1.3 * len(layers) + 1.2))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    kinds = [graph.nodes[n]["kind"] for n in graph]
    nx.draw_networkx_edges(graph, positions, ax=ax, edge_color=EDGE_COLOUR)
    nx.draw_networkx_nodes(graph, positions, ax=ax, node_color=[COLOURS[k] for k in kinds],
                           node_size=[600 if k == "device" else 900 for k in kinds])
    nx.draw_networkx_labels(graph, positions, ax=ax, font_size=FONT)
    ax.set_xlim(-(widest + 1) / 2, (widest + 1) / 2)
    ax.set_ylim(-0.5, len(layers) - 0.5)
    ax.axis("off")
    counts = ", ".join(f"{KIND_NAMES.get(kind, kind)} {n:,}"
                       for kind, n in sorted(topology.counts().items()))
    ax.set_title(f"{topology.name}: {counts}")
    legend = _legend(ax, graph, kinds)
    fig.tight_layout()
    hidden = _latencies(ax, graph, positions, legend)
    if hidden:
        for artist in legend:
            artist.remove()
        _legend(ax, graph, kinds, hidden)
    return fig


def _row(graph: nx.Graph, name: str) -> tuple[int, int]:
    """A node's layer by its kind, and within it the upper row when its layer has links
    among its own nodes and it has none below (a core switch above the district ones): a
    link drawn along its row would pass through the nodes between."""
    level = LAYERS.get(graph.nodes[name]["kind"], 2)
    around = [LAYERS.get(graph.nodes[n]["kind"], 2) for n in graph.adj[name]]
    return level, int(level in around and not any(a < level for a in around))


def _latencies(ax, graph: nx.Graph, positions: dict, legend: list) -> int:
    """Each link's latency beside it, where it overlaps no other label; returns how many
    found no such place (they are left out, and the legend says how many)."""
    renderer = ax.figure.canvas.get_renderer()
    taken = [text.get_window_extent(renderer).padded(GAP) for text in ax.texts
             if text not in legend]
    hidden = 0
    for a, b, data in sorted(graph.edges(data=True), key=lambda e: (positions[e[0]][1]
                                                                    + positions[e[1]][1])):
        low, high = min(data["latencies"]) * 1000, max(data["latencies"]) * 1000
        label = f"{low:g} ms" if low == high else f"{low:g}-{high:g} ms"
        (xa, ya), (xb, yb) = positions[a], positions[b]
        for along in ALONG:
            text = ax.text(xa + along * (xb - xa), ya + along * (yb - ya), label,
                           fontsize=FONT - 1, ha="center", va="center", zorder=3,
                           bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none"})
            box = text.get_window_extent(renderer).padded(GAP)
            if not any(box.overlaps(other) for other in taken):
                taken.append(box)
                break
            text.remove()
        else:
            hidden += 1
    return hidden


def _legend(ax, graph: nx.Graph, kinds: list[str], hidden: int = 0) -> list:
    """The kinds drawn and the links in a row under the drawing, and under it what a group's
    label means and how many latencies were left out; returns the artists, to redo them."""
    handles = [Line2D([], [], ls="", marker="o", markersize=9, markeredgewidth=0,
                      markerfacecolor=COLOURS[kind], label=KIND_NAMES.get(kind, kind))
               for kind in sorted(set(kinds), key=lambda k: -LAYERS.get(k, 2))]
    if graph.number_of_edges():
        ranges = all(len(set(d["latencies"])) == 1 for *_, d in graph.edges(data=True))
        handles.append(Line2D([], [], color=EDGE_COLOUR, label="link, its latency" + (
            "" if ranges else " (a range for links drawn as one)")))
    legend = ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                       ncol=len(handles), fontsize=FONT + 1, frameon=False)
    notes = []
    if any(data["count"] > 1 for _, data in graph.nodes(data=True)):
        notes.append("N x group @node: N nodes of the group (linked to node), drawn as one")
    if hidden:
        links = "1 crowded link is" if hidden == 1 else f"{hidden} crowded links are"
        notes.append(f"the latency of {links} left out (foglab topo show lists every link)")
    if not notes:
        return [legend]
    return [legend, ax.annotate("\n".join(notes), (0.5, 0.0), xycoords="axes fraction",
                                xytext=(0, -2.2 * (FONT + 1) - 6), textcoords="offset points",
                                ha="center", va="top", fontsize=FONT + 1)]


def draw(topology: Topology, out: Path | str) -> Path:
    path = Path(out)
    figure(topology).savefig(path, dpi=110, bbox_inches="tight")
    return path
