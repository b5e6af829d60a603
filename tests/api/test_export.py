"""A topology for other tools (`foglab topo export`, topologies.export) and a schema editors
pick up (`foglab schema`'s `$schema` and `$id`)."""

from __future__ import annotations

import json
import subprocess
import sys

import networkx as nx

from experiments.loader import load


def foglab(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "foglab", *argv], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_graphml_and_json_carry_every_node_and_link_in_si_units(tmp_path) -> None:
    topology = load("quickstart").points[0].topology
    for kind, name in (("graphml", "smart-city.graphml"), ("json", "city.json")):
        argv = ["topo", "export", "quickstart", "--format", kind]
        shown = foglab(*argv, *(["--out", name] if kind == "json" else []), cwd=tmp_path)
        assert shown.returncode == 0, shown.stdout + shown.stderr
    read = [nx.read_graphml(tmp_path / "smart-city.graphml"),
            nx.node_link_graph(json.loads((tmp_path / "city.json").read_text()),
                               directed=False, multigraph=False, **_links())]
    for graph in read:
        assert graph.number_of_nodes() == len(topology.nodes) == 206
        assert graph.number_of_edges() == len(topology.links)
        assert graph.nodes["gw-1"]["kind"] == "gateway" and graph.nodes["gw-1"]["speed"] == 0.45
        uplink = graph.edges["gw-1", "broker-1"]
        assert (uplink["latency"], uplink["jitter"], uplink["bandwidth"]) == (0.02, 0.002, 20e6)
        assert "bandwidth in bit/s" in graph.graph["units"]


def _links() -> dict:
    """node_link_graph's keyword for the links list: `edges` from networkx 3.4, `link` before."""
    import inspect

    return ({"edges": "links"} if "edges" in inspect.signature(nx.node_link_graph).parameters
            else {"link": "links"})


def test_an_unknown_format_is_refused_before_anything_is_written(tmp_path) -> None:
    shown = foglab("topo", "export", "smart-city", "--format", "dot", cwd=tmp_path)
    assert shown.returncode == 3 and "--format dot: one of graphml, json" in shown.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_schema_names_its_draft_and_an_id() -> None:
    shown = foglab("schema", "--kind", "workload")
    schema = json.loads(shown.stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].startswith("urn:foglab:workload:")
