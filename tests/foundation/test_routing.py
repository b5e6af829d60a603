"""The routing decisions both backends share: the model and the emulation place alike."""

from __future__ import annotations

import pytest

from emu.cluster.deployment import agent_configs
from emu.cluster.plan import plan_cluster
from sim.model import Model, Settings
from topologies import catalog
from topologies.model import Topology, expand
from topologies.routing import NoRoute, Routes, gateway_of, latency, nearest
from topologies.spec import TopologySpec
from workloads.spec import WorkloadSpec

AGENTS = ("gateway", "cloud_vm")


def topology(nodes: list[dict], links: list[dict]) -> Topology:
    return expand(TopologySpec.model_validate({"name": "t", "nodes": nodes, "links": links}))


def star(gateways: int = 4, brokers: int = 2) -> Topology:
    """Gateways and brokers on one switch, every link alike: each broker is as near as any."""
    return topology(
        [{"name": "d", "kind": "device", "replicas": gateways},
         {"name": "gw", "kind": "gateway", "replicas": gateways},
         {"name": "b", "kind": "broker", "replicas": brokers},
         {"name": "vm", "kind": "cloud_vm", "replicas": 3},
         {"name": "lan", "kind": "switch"}],
        [{"from": "d-*", "to": "gw-*", "mode": "spread", "latency": "1ms"},
         {"from": ["gw-*", "b-*", "vm-*"], "to": "lan", "latency": "150us"}])


def workload(devices: list[str]) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {"name": "w", "streams": [{"name": "s", "sources": devices, "rate": "1/s"}]})


def sim_model(topo: Topology, devices: list[str]) -> Model:
    return Model(topo, workload(devices), [], Settings(duration=1.0, seed=1))


# -- the tie rule -------------------------------------------------------------------------------

def test_equally_near_brokers_are_taken_in_turn_by_the_nodes_of_each_kind() -> None:
    topo = star()
    routes = Routes(topo)
    brokers = ["b-1", "b-2"]
    assert [nearest(routes, f"gw-{i}", brokers) for i in range(1, 5)] == [
        "b-1", "b-2", "b-1", "b-2"]
    # Each kind counts its own turns: cloud VMs do not shift the gateways' shares.
    assert [nearest(routes, f"vm-{i}", brokers) for i in range(1, 4)] == ["b-1", "b-2", "b-1"]
    # Candidates in another order: the k-th node takes the k-th of that order.
    assert nearest(routes, "gw-1", ["b-2", "b-1"]) == "b-2"


def test_a_fresh_routes_and_any_order_of_asking_give_the_same_choice() -> None:
    topo = star(gateways=5, brokers=3)
    brokers = ["b-1", "b-2", "b-3"]
    forward = {f"gw-{i}": nearest(Routes(topo), f"gw-{i}", brokers) for i in range(1, 6)}
    routes = Routes(topo)
    backward = {f"gw-{i}": nearest(routes, f"gw-{i}", brokers) for i in range(5, 0, -1)}
    assert forward == backward == {"gw-1": "b-1", "gw-2": "b-2", "gw-3": "b-3",
                                   "gw-4": "b-1", "gw-5": "b-2"}


def test_only_nodes_with_the_same_equally_near_candidates_share_turns() -> None:
    # gw-2 is nearer b-2: it takes b-2 and is no turn of the tied gw-1 and gw-3.
    topo = topology(
        [{"name": "gw", "kind": "gateway", "replicas": 3},
         {"name": "b", "kind": "broker", "replicas": 2}],
        [{"from": ["gw-1", "gw-3"], "to": ["b-1", "b-2"], "latency": "5ms"},
         {"from": "gw-2", "to": "b-2", "latency": "1ms"},
         {"from": "gw-2", "to": "b-1", "latency": "9ms"}])
    routes = Routes(topo)
    assert [nearest(routes, g, ["b-1", "b-2"]) for g in ("gw-1", "gw-2", "gw-3")] == [
        "b-1", "b-2", "b-2"]


def test_the_nearest_wins_over_turns_and_unreachable_candidates_are_skipped() -> None:
    topo = topology(
        [{"name": "gw", "kind": "gateway", "replicas": 2},
         {"name": "b", "kind": "broker", "replicas": 3}],
        [{"from": "gw-*", "to": "b-1", "latency": "5ms"},
         {"from": "gw-*", "to": "b-2", "latency": "4999us"}])
    routes = Routes(topo)
    assert [nearest(routes, g, ["b-1", "b-2", "b-3"]) for g in ("gw-1", "gw-2")] == [
        "b-2", "b-2"]
    assert nearest(routes, "gw-1", ["b-3"]) is None
    assert nearest(routes, "b-3", ["b-1", "b-2"]) is None  # a node with no link at all
    with pytest.raises(NoRoute):
        routes.path("gw-1", "b-3")


def test_path_sums_that_differ_by_rounding_only_are_a_tie() -> None:
    # 0.1 + 0.2 != 0.3 in floating point: the two brokers are still equally near.
    topo = topology(
        [{"name": "gw", "kind": "gateway", "replicas": 2},
         {"name": "b", "kind": "broker", "replicas": 2},
         {"name": "sw", "kind": "switch"}],
        [{"from": "gw-*", "to": "sw", "latency": "100ms"},
         {"from": "sw", "to": "b-1", "latency": "200ms"},
         {"from": "gw-*", "to": "b-2", "latency": "300ms"}])
    routes = Routes(topo)
    assert routes.latency("gw-1", "b-1") != routes.latency("gw-1", "b-2")
    assert [nearest(routes, g, ["b-1", "b-2"]) for g in ("gw-1", "gw-2")] == ["b-1", "b-2"]


def test_a_path_latency_sums_its_links_and_routes_use_it() -> None:
    topo = star()
    assert latency(topo, ["gw-1", "lan", "b-2"]) == pytest.approx(300e-6)
    assert latency(topo, ["gw-1"]) == 0
    assert Routes(topo).latency("d-1", "b-2") == pytest.approx(1e-3 + 300e-6)


def test_a_device_takes_its_least_latency_gateway_or_the_first_declared_of_equal_ones() -> None:
    topo = topology(
        [{"name": "d", "kind": "device", "replicas": 3},
         {"name": "gw", "kind": "gateway", "replicas": 3},
         {"name": "b", "kind": "broker"}],
        # gw-3 declared last but linked first: the order of links does not decide.
        [{"from": "d-1", "to": "gw-3", "latency": "2ms"},
         {"from": "d-1", "to": ["gw-2", "gw-1"], "latency": "2ms"},
         {"from": "d-2", "to": "gw-1", "latency": "3ms"},
         {"from": "d-2", "to": "gw-3", "latency": "1ms"},
         {"from": "d-3", "to": "b", "latency": "1ms"},
         {"from": "gw-*", "to": "b", "latency": "1ms"}])
    assert [gateway_of(topo, d) for d in ("d-1", "d-2", "d-3")] == ["gw-1", "gw-3", None]


# -- the two backends agree on the catalog ------------------------------------------------------

@pytest.mark.parametrize("name", catalog.names())
def test_sim_and_emu_choose_the_same_gateway_broker_and_path_latency(name: str) -> None:
    topo = catalog.load(name)
    devices = [n.name for n in topo.of_kind("device")]
    model = sim_model(topo, devices)
    plan = plan_cluster(topo, "agree", host_cpus=2)
    agents = [n.name for n in topo.nodes.values() if n.kind in AGENTS]
    assert agents and set(plan.brokers) == set(agents)

    names = list(topo.nodes)
    sim_gateway = {}
    for source in model.sources:
        target = source.path[-1].dst
        sim_gateway[names[source.device_index]] = (
            target if topo.nodes[target].kind == "gateway" else None)
    assert set(sim_gateway) == set(devices)
    linked = [d for d in devices if sim_gateway[d] is not None]
    unlinked = [d for d in devices if sim_gateway[d] is None]
    if linked:
        emu_gateway = {device: node for node, config in agent_configs(
            topo, workload(linked), [], seed=1, epoch=0.0).items()
            for driver in config.drivers for device in driver.devices}
        assert emu_gateway == {d: sim_gateway[d] for d in linked}
    if unlinked:  # devices that link to no gateway run in their group's container
        configs = agent_configs(topo, workload(unlinked), [], seed=1, epoch=0.0)
        group = {device: node for node, config in configs.items() if config.kind == "device"
                 for driver in config.drivers for device in driver.devices}
        assert set(group) == set(unlinked)
        groups = plan_cluster(topo, "agree", agents=configs, host_cpus=2)
        for device in unlinked:
            broker = model.broker_for(device)
            assert groups.brokers[group[device]] == broker, device
            sim_path = model.path(device, broker)
            link = groups.link(group[device], broker)
            # From the group's first device: its devices link alike.
            assert link.path[1:] == tuple(channel.dst for channel in sim_path), device
            assert link.shape.latency_s == sum(channel.latency for channel in sim_path), device

    for agent in agents:
        broker = model.broker_for(agent)
        assert plan.brokers[agent] == broker, agent
        sim_path = model.path(agent, broker)
        link = plan.link(agent, broker)
        assert link.path == (agent, *(channel.dst for channel in sim_path)), agent
        assert link.shape.latency_s == sum(channel.latency for channel in sim_path), agent
    shares = {}
    for agent, broker in plan.brokers.items():
        shares.setdefault(topo.nodes[agent].kind, {}).setdefault(broker, 0)
        shares[topo.nodes[agent].kind][broker] += 1
    for kind, counts in shares.items():  # equally near brokers share the load
        if len(counts) > 1:
            assert max(counts.values()) - min(counts.values()) <= 1, (kind, counts)
