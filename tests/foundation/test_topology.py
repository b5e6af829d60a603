"""Topology files expanded into nodes and links, and routes over them by lowest latency."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments import catalog
from topologies.documents import read
from topologies.errors import SpecError
from topologies.model import Topology, expand
from topologies.profiles import BUILTIN_PROFILES
from topologies.routing import NoRoute, Routes
from topologies.spec import TopologySpec


def topology(nodes: list[dict], links: list[dict] = (), **extra) -> Topology:
    return expand(TopologySpec.model_validate(
        {"name": "t", "nodes": nodes, "links": list(links), **extra}))


def catalog_topology(name: str) -> Topology:
    return expand(TopologySpec.model_validate(read(catalog.find("topology", name)).data))


def spec_error(nodes: list[dict], links: list[dict] = (), **extra) -> SpecError:
    with pytest.raises(SpecError) as caught:
        topology(nodes, links, **extra)
    return caught.value


# -- nodes -----------------------------------------------------------------------------------

def test_replicas_are_numbered_from_one_in_order() -> None:
    topo = topology([{"name": "gw", "kind": "gateway", "replicas": 3},
                     {"name": "broker", "kind": "broker"}])
    assert list(topo.nodes) == ["gw-1", "gw-2", "gw-3", "broker"]
    assert {topo.nodes[n].group for n in ("gw-1", "gw-2", "gw-3")} == {"gw"}


def test_a_node_without_replicas_keeps_its_name() -> None:
    topo = topology([{"name": "edge", "kind": "switch"}])
    assert list(topo.nodes) == ["edge"]


@pytest.mark.parametrize(("kind", "profile"), [
    ("device", "sensor"), ("gateway", "rpi4"), ("broker", "vm.medium"),
    ("cloud_vm", "vm.medium"), ("coordinator", "vm.small"), ("switch", "switch"),
])
def test_each_kind_has_a_default_profile(kind: str, profile: str) -> None:
    node = topology([{"name": "n", "kind": kind}]).nodes["n"]
    assert node.profile_name == profile
    assert node.profile == BUILTIN_PROFILES[profile]


def test_a_custom_profile_is_used_by_name() -> None:
    topo = topology(
        [{"name": "gw", "kind": "gateway", "profile": "jetson"}],
        profiles={"jetson": {"arch": "arm64", "cores": 6, "clock": "1.9GHz", "memory": "8GiB",
                             "speed": 0.7}})
    profile = topo.nodes["gw"].profile
    assert (profile.cores, profile.clock, profile.memory, profile.speed) == (
        6, 1.9e9, 8 * 1024**3, 0.7)


def test_only_broker_nodes_get_default_broker_settings() -> None:
    topo = topology([{"name": "b", "kind": "broker"}, {"name": "g", "kind": "gateway"}])
    assert topo.nodes["b"].broker.model == "rabbitmq-like"
    assert topo.nodes["b"].broker.service_time == pytest.approx(50e-6)
    assert topo.nodes["g"].broker is None


def test_unknown_profile_is_an_error_at_its_field() -> None:
    error = spec_error([{"name": "a", "kind": "gateway"},
                        {"name": "b", "kind": "gateway", "profile": "rpi5"}])
    assert error.path == ("nodes", 1, "profile")
    assert error.value == "rpi5"
    assert "nodes[1].profile" in str(error)
    assert "rpi4" in str(error)  # the known profiles are listed


def test_unknown_site_is_an_error_at_its_field() -> None:
    error = spec_error([{"name": "a", "kind": "gateway", "site": "mars"}],
                       sites=[{"name": "earth"}])
    assert error.path == ("nodes", 0, "site")
    assert "nodes[0].site" in str(error) and "earth" in str(error)


def test_broker_settings_on_another_kind_are_an_error() -> None:
    error = spec_error([{"name": "g", "kind": "gateway", "broker": {"model": "kafka-like"}}])
    assert error.path == ("nodes", 0, "broker")


def test_duplicate_node_names_are_an_error() -> None:
    error = spec_error([{"name": "gw", "kind": "gateway", "replicas": 2},
                        {"name": "gw-2", "kind": "gateway"}])
    assert error.path == ("nodes", 1, "name")
    assert "gw-2" in str(error)


def test_replicas_sit_on_a_grid_around_their_site() -> None:
    topo = topology([{"name": "s", "kind": "device", "replicas": 4, "site": "a", "spacing": 10}],
                    sites=[{"name": "a", "position": [100, 200]}])
    assert [topo.nodes[f"s-{i}"].position for i in range(1, 5)] == [
        (95, 195), (105, 195), (95, 205), (105, 205)]


# -- links -----------------------------------------------------------------------------------

def _pairs(topo: Topology) -> set[frozenset]:
    return {frozenset((link.a, link.b)) for link in topo.links}


def test_link_rules_match_patterns_and_carry_their_parameters() -> None:
    topo = topology(
        [{"name": "dev", "kind": "device", "replicas": 3}, {"name": "gw", "kind": "gateway"},
         {"name": "broker", "kind": "broker"}],
        [{"from": "dev-*", "to": "gw", "latency": "5ms", "jitter": "1ms",
          "bandwidth": "250kbit", "loss": "0.5%"},
         {"from": ["gw"], "to": ["broker"], "latency": "20ms"}])
    assert _pairs(topo) == {frozenset(p) for p in [("dev-1", "gw"), ("dev-2", "gw"),
                                                    ("dev-3", "gw"), ("gw", "broker")]}
    radio = next(link for link in topo.links if link.a == "dev-2")
    assert (radio.latency, radio.jitter, radio.bandwidth, radio.loss) == pytest.approx(
        (0.005, 0.001, 250e3, 0.005))
    wired = next(link for link in topo.links if link.a == "gw")
    assert (wired.bandwidth, wired.loss) == (None, 0.0)


def test_spread_splits_sources_into_contiguous_blocks() -> None:
    topo = topology([{"name": "s", "kind": "device", "replicas": 200},
                     {"name": "gw", "kind": "gateway", "replicas": 4}],
                    [{"from": "s-*", "to": "gw-*", "mode": "spread"}])
    assert len(topo.links) == 200
    gateway_of = {link.a: link.b for link in topo.links}
    for i in range(1, 201):
        assert gateway_of[f"s-{i}"] == f"gw-{(i - 1) // 50 + 1}"


def test_mode_all_links_every_source_to_every_target() -> None:
    topo = topology([{"name": "a", "kind": "switch", "replicas": 3},
                     {"name": "b", "kind": "switch", "replicas": 2}],
                    [{"from": "a-*", "to": "b-*"}])
    assert len(topo.links) == 6


def test_a_later_rule_overrides_an_earlier_one_for_the_same_pair_either_way_round() -> None:
    topo = topology([{"name": "gw", "kind": "gateway", "replicas": 3},
                     {"name": "broker", "kind": "broker"}],
                    [{"from": "gw-*", "to": "broker", "latency": "20ms"},
                     {"from": "broker", "to": "gw-2", "latency": "5ms", "loss": "1%"}])
    assert len(topo.links) == 3
    latency = {frozenset((link.a, link.b)): link for link in topo.links}
    assert latency[frozenset(("gw-1", "broker"))].latency == pytest.approx(0.020)
    assert latency[frozenset(("gw-2", "broker"))].latency == pytest.approx(0.005)
    assert latency[frozenset(("gw-2", "broker"))].loss == pytest.approx(0.01)
    assert topo.graph.edges["gw-2", "broker"]["latency"] == pytest.approx(0.005)


def test_a_pattern_that_matches_nothing_names_its_place() -> None:
    error = spec_error([{"name": "gw", "kind": "gateway"}, {"name": "b", "kind": "broker"}],
                       [{"from": "gw", "to": "b"},
                        {"from": ["gw", "sensor-*"], "to": "b"}])
    assert error.path == ("links", 1, "from", 1)
    assert error.value == "sensor-*"
    assert "links[1].from[1]" in str(error)


def test_a_link_from_a_node_to_itself_is_an_error() -> None:
    error = spec_error([{"name": "sw", "kind": "switch", "replicas": 2}],
                       [{"from": "sw-*", "to": "sw-1"}])
    assert error.path == ("links", 0)
    assert "sw-1" in str(error)


def test_too_many_pairs_from_one_rule_suggest_spread() -> None:
    error = spec_error([{"name": "a", "kind": "device", "replicas": 2000},
                        {"name": "b", "kind": "device", "replicas": 1001}],
                       [{"from": "a-*", "to": "b-*"}])
    assert "spread" in str(error)


# -- the catalog -----------------------------------------------------------------------------

def test_catalog_holds_the_shipped_topologies() -> None:
    assert {"smart-city", "metro-10k", "iotcloud-futuregrid"} <= set(catalog.names("topology"))


@pytest.mark.parametrize("name", catalog.names("topology"))
def test_every_catalog_topology_expands_and_is_connected(name: str) -> None:
    topo = catalog_topology(name)
    assert topo.nodes and topo.links
    assert nx.is_connected(topo.graph)


def test_smart_city_counts_and_radio_links() -> None:
    topo = catalog_topology("smart-city")
    assert topo.counts() == {"device": 200, "gateway": 4, "broker": 1, "cloud_vm": 1}
    radio = [link for link in topo.links if link.a.startswith("sensor-")]
    assert len(radio) == 200
    per_gateway = {}
    for link in radio:
        per_gateway.setdefault(link.b, []).append(int(link.a.split("-")[1]))
    assert {gw: (min(s), max(s), len(s)) for gw, s in per_gateway.items()} == {
        "gw-1": (1, 50, 50), "gw-2": (51, 100, 50), "gw-3": (101, 150, 50),
        "gw-4": (151, 200, 50)}
    assert radio[0].bandwidth == 250e3 and radio[0].loss == pytest.approx(0.005)


def test_metro_10k_counts() -> None:
    topo = catalog_topology("metro-10k")
    assert topo.counts() == {"device": 10_000, "gateway": 100, "switch": 5, "broker": 2,
                             "cloud_vm": 8}
    assert len(topo.links) == 10_000 + 100 + 4 + 10
    assert topo.nodes["broker-1"].broker.service_time == pytest.approx(10e-6)


def test_iotcloud_futuregrid_is_the_eight_vm_setup_of_seed_001() -> None:
    topo = catalog_topology("iotcloud-futuregrid")
    counts = topo.counts()
    assert (counts["gateway"], counts["broker"], counts["cloud_vm"], counts["coordinator"]) == (
        2, 2, 3, 1)
    vms = [n for n in topo.nodes.values() if n.kind in ("gateway", "broker", "cloud_vm",
                                                         "coordinator")]
    assert len(vms) == 8
    # FutureGrid OpenStack medium flavour: 2 vCPUs and 4 GB each
    assert {(n.profile.cores, n.profile.memory) for n in vms} == {(2, 4 * 1024**3)}


# -- routing ---------------------------------------------------------------------------------

def _triangle() -> Topology:
    return topology([{"name": n, "kind": "switch"} for n in "abc"],
                    [{"from": "a", "to": "b", "latency": "10ms"},
                     {"from": "b", "to": "c", "latency": "15ms"},
                     {"from": "a", "to": "c", "latency": "40ms"}])


def test_route_takes_the_lowest_total_latency_over_fewer_hops() -> None:
    routes = Routes(_triangle())
    assert routes.path("a", "c") == ["a", "b", "c"]
    assert routes.path("c", "a") == ["c", "b", "a"]
    assert routes.latency("a", "c") == pytest.approx(0.025)


def test_route_takes_the_direct_link_when_it_is_faster() -> None:
    topo = topology([{"name": n, "kind": "switch"} for n in "abc"],
                    [{"from": "a", "to": "b", "latency": "10ms"},
                     {"from": "b", "to": "c", "latency": "15ms"},
                     {"from": "a", "to": "c", "latency": "20ms"}])
    assert Routes(topo).path("a", "c") == ["a", "c"]


def test_route_to_itself_is_the_node_alone() -> None:
    assert Routes(_triangle()).path("b", "b") == ["b"]
    assert Routes(_triangle()).latency("b", "b") == 0


def test_no_route_between_disconnected_nodes() -> None:
    topo = topology([{"name": "dev", "kind": "device"}, {"name": "gw", "kind": "gateway"},
                     {"name": "sw", "kind": "switch"}, {"name": "island", "kind": "broker"},
                     {"name": "lone", "kind": "switch"}],
                    [{"from": "dev", "to": "gw"}, {"from": "gw", "to": "sw"}])
    routes = Routes(topo)
    for source, target in [("dev", "island"), ("gw", "island"), ("island", "dev"),
                           ("lone", "island"), ("island", "lone")]:
        with pytest.raises(NoRoute) as caught:
            routes.path(source, target)
        assert caught.value.target == target
        assert isinstance(caught.value, LookupError)


def test_no_route_out_of_a_pair_of_nodes_linked_only_to_each_other() -> None:
    topo = topology([{"name": "dev", "kind": "device"}, {"name": "gw", "kind": "gateway"},
                     {"name": "broker", "kind": "broker"}],
                    [{"from": "dev", "to": "gw"}])
    with pytest.raises(NoRoute):
        Routes(topo).path("gw", "broker")


def test_no_route_into_a_pair_of_nodes_linked_only_to_each_other() -> None:
    # The device's one link leads to a gateway that has no other: no route in (once a
    # recursion without end).
    topo = topology([{"name": "dev", "kind": "device"}, {"name": "gw", "kind": "gateway"},
                     {"name": "sw", "kind": "switch"}, {"name": "a", "kind": "broker"},
                     {"name": "b", "kind": "broker"}],
                    [{"from": "dev", "to": "gw"}, {"from": "sw", "to": "a"},
                     {"from": "sw", "to": "b"}])
    routes = Routes(topo)
    for source, target in [("sw", "dev"), ("sw", "gw"), ("a", "dev"), ("dev", "sw")]:
        with pytest.raises(NoRoute) as caught:
            routes.path(source, target)
        assert (caught.value.source, caught.value.target) == (source, target)


def test_device_shortcuts_give_the_same_routes_as_dijkstra() -> None:
    topo = catalog_topology("iotcloud-futuregrid")
    routes = Routes(topo)
    graph = topo.graph
    for source in topo.nodes:
        for target in topo.nodes:
            expected = nx.dijkstra_path_length(graph, source, target, weight="latency")
            path = routes.path(source, target)
            assert path[0] == source and path[-1] == target
            assert all(graph.has_edge(a, b) for a, b in zip(path, path[1:], strict=False))
            assert routes.latency(source, target) == pytest.approx(expected, abs=1e-15)


@st.composite
def _graphs(draw) -> tuple[Topology, list[str]]:
    """A random connected core of switches with devices hanging off it as leaves."""
    core = draw(st.integers(2, 7))
    leaves = draw(st.integers(0, 4))
    names = [f"s{i}" for i in range(core)]
    links = [{"from": f"s{i}", "to": f"s{draw(st.integers(0, i - 1))}",
              "latency": draw(st.integers(0, 50)) / 1000} for i in range(1, core)]
    for _ in range(draw(st.integers(0, core * 2))):
        a, b = draw(st.integers(0, core - 1)), draw(st.integers(0, core - 1))
        if a != b:
            links.append({"from": f"s{a}", "to": f"s{b}",
                          "latency": draw(st.integers(0, 50)) / 1000})
    for j in range(leaves):
        links.append({"from": f"d{j}", "to": f"s{draw(st.integers(0, core - 1))}",
                      "latency": draw(st.integers(0, 50)) / 1000})
    nodes = [{"name": n, "kind": "switch"} for n in names]
    nodes += [{"name": f"d{j}", "kind": "device"} for j in range(leaves)]
    topo = topology(nodes, links)
    return topo, list(topo.nodes)


@settings(max_examples=100, deadline=None)
@given(_graphs(), st.data())
def test_routes_have_the_dijkstra_latency_on_random_graphs(graph_and_names, data) -> None:
    topo, names = graph_and_names
    source = data.draw(st.sampled_from(names))
    target = data.draw(st.sampled_from(names))
    routes = Routes(topo)
    path = routes.path(source, target)
    assert path[0] == source and path[-1] == target
    assert all(topo.graph.has_edge(a, b) for a, b in zip(path, path[1:], strict=False))
    expected = nx.dijkstra_path_length(topo.graph, source, target, weight="latency")
    assert routes.latency(source, target) == pytest.approx(expected, abs=1e-12)
