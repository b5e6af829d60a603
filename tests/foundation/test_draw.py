"""Topology pictures: a legend of what is drawn, nodes in number order, crowds drawn as groups
with a count, and no label over another, up to metro-10k."""

from __future__ import annotations

import pytest

from topologies.catalog import load, names
from topologies.draw import figure, number_order, summary_graph
from topologies.model import expand
from topologies.spec import TopologySpec

KINDS = {"device": "device", "gateway": "gateway", "switch": "switch", "broker": "broker",
         "coordinator": "coordinator", "cloud_vm": "cloud VM"}


def twelve_gateways():
    """Gateways gw-1 to gw-12 (gw-10 sorts before gw-2 as text), ten sensors on each."""
    return expand(TopologySpec.model_validate({
        "name": "twelve",
        "nodes": [{"name": "s", "kind": "device", "replicas": 120},
                  {"name": "gw", "kind": "gateway", "replicas": 12},
                  {"name": "broker", "kind": "broker"}],
        "links": [{"from": "s-*", "to": "gw-*", "mode": "spread", "latency": "5ms"},
                  {"from": "gw-*", "to": "broker", "latency": "20ms"}]}))


def labels(fig) -> list[tuple[str, object]]:
    """Every piece of text in the figure and its box on the canvas: the node labels and
    latencies, the title, and the legend's entries and notes."""
    fig.canvas.draw()  # lays the legend out
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    texts = [*ax.texts, ax.title, *ax.get_legend().get_texts()]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts
            if t.get_visible() and t.get_text()]


@pytest.mark.parametrize("name", names())
def test_no_label_overlaps_another_and_all_are_in_the_picture(name) -> None:
    fig = figure(load(name))
    shown = labels(fig)
    overlapping = [(a, b) for i, (a, box) in enumerate(shown) for b, other in shown[i + 1:]
                   if box.overlaps(other)]
    assert not overlapping, f"{name}: {overlapping[:3]}"
    # Saved with a tight box: every label lies inside what is saved.
    tight = fig.get_tightbbox(fig.canvas.get_renderer())
    dpi = fig.dpi
    assert all(tight.x0 * dpi - 1 <= box.x0 and box.x1 <= tight.x1 * dpi + 1
               for _, box in shown)


def test_metro_10k_draws_its_crowds_as_groups_with_their_count() -> None:
    topology = load("metro-10k")
    graph = summary_graph(topology)
    gateways = {n: d for n, d in graph.nodes(data=True) if d["kind"] == "gateway"}
    assert len(gateways) == 4  # 100 gateways, 25 under each district switch
    assert sum(d["count"] for d in gateways.values()) == 100
    assert "25 x gw\n@district-1" in gateways
    devices = [d["count"] for _, d in graph.nodes(data=True) if d["kind"] == "device"]
    assert sum(devices) == 10_000 and len(devices) == 4
    text = [t for t, _ in labels(figure(topology))]
    assert any("N x group @node" in t for t in text), text


@pytest.mark.parametrize("name", names())
def test_the_legend_names_every_kind_drawn_and_what_a_link_label_is(name) -> None:
    topology = load(name)
    legend = [t.get_text() for t in figure(topology).axes[0].get_legend().get_texts()]
    assert {KINDS[k] for k in topology.counts()} <= set(legend), legend
    assert "link, its latency" in legend[-1]


def test_gateways_and_their_devices_are_drawn_in_number_order() -> None:
    assert sorted(["gw-10", "gw-2", "gw-1"], key=number_order) == ["gw-1", "gw-2", "gw-10"]
    fig = figure(twelve_gateways())
    x = {t.get_text(): t.get_position()[0] for t in fig.axes[0].texts}
    gateways = [f"gw-{i}" for i in range(1, 13)]
    assert sorted(gateways, key=x.get) == gateways
    under = [f"10 x s\n@{gw}" for gw in gateways]  # each gateway's sensors under it
    assert [x[u] for u in under] == [x[gw] for gw in gateways]


def test_a_crowded_layer_without_shared_neighbours_is_one_node_per_group() -> None:
    topology = expand(TopologySpec.model_validate({
        "name": "ring", "nodes": [{"name": "gw", "kind": "gateway", "replicas": 40}],
        "links": [{"from": f"gw-{i}", "to": f"gw-{i % 40 + 1}", "latency": "1ms"}
                  for i in range(1, 41)]}))
    graph = summary_graph(topology)
    assert dict(graph.nodes(data="count")) == {"40 x gw": 40}
    assert labels(figure(topology))


def test_a_latency_with_no_free_place_is_left_out_and_the_legend_says_so() -> None:
    mesh = expand(TopologySpec.model_validate({
        "name": "mesh", "nodes": [{"name": "gw", "kind": "gateway", "replicas": 6},
                                  {"name": "vm", "kind": "cloud_vm", "replicas": 6}],
        "links": [{"from": f"gw-{i}", "to": f"vm-{j}", "latency": f"{i * 10 + j}ms"}
                  for i in range(1, 7) for j in range(1, 7)]}))
    text = [t for t, _ in labels(figure(mesh))]
    shown = [t for t in text if t.endswith(" ms")]
    notes = [t for t in text if "left out" in t]
    assert len(notes) == 1 and len(shown) < 36
    assert f"latency of {36 - len(shown)} crowded link" in notes[0]
