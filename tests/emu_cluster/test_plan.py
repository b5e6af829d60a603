"""Planning a cluster from a topology, without Docker: networks, images, limits, labels, brokers,
ZooKeeper, link shapes, and clear errors before anything is made."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from emu.agent.config import AgentConfig
from emu.cluster.links import RelayLinks
from emu.cluster.plan import AGENT_COMMAND, MQTT_PORT, ClusterPlan, plan_cluster
from emu.cluster.plan_links import path_shape
from emu.cluster.zookeeper_servers import ZOOKEEPER_PORT
from emu.images import CLOUD, GATEWAY, MOSQUITTO_COMMAND, SERVICES, ZOOKEEPER_COMMAND
from emu.links.spec import LinkShape
from topologies.errors import SpecError
from topologies.model import Topology, expand
from topologies.profiles import GiB
from topologies.spec import TopologySpec
from workloads.pipeline import OperatorSpec
from workloads.spec import WorkloadSpec

GW_BROKER_MS = 20


def topology(nodes: list[dict], links: list[dict] = (), **extra) -> Topology:
    return expand(TopologySpec.model_validate(
        {"name": "t", "nodes": nodes, "links": list(links), **extra}))


def city(**extra) -> Topology:
    """Two edge sites with a gateway each, a metro switch, a broker and a cloud VM."""
    return topology(
        [{"name": "sensor", "kind": "device", "replicas": 4, "site": "north"},
         {"name": "gw-n", "kind": "gateway", "profile": "rpi3b", "site": "north"},
         {"name": "gw-s", "kind": "gateway", "profile": "rpi4", "site": "south"},
         {"name": "metro", "kind": "switch"},
         {"name": "broker", "kind": "broker", "profile": "vm.medium", "site": "cloud"},
         {"name": "vm", "kind": "cloud_vm", "profile": "vm.large", "site": "cloud"}],
        [{"from": "sensor-*", "to": "gw-n", "latency": "5ms"},
         {"from": ["gw-n", "gw-s"], "to": "metro", "latency": f"{GW_BROKER_MS - 2}ms",
          "jitter": "3ms", "bandwidth": "20Mbit", "loss": "1%"},
         {"from": "metro", "to": "broker", "latency": "2ms", "jitter": "4ms",
          "bandwidth": "1Gbit", "loss": "2%"},
         {"from": "vm", "to": "broker", "latency": "1ms"}],
        sites=[{"name": s} for s in ("north", "south", "cloud")], **extra)


def plan(topo: Topology | None = None, **options) -> ClusterPlan:
    options.setdefault("host_cpus", 2)
    return plan_cluster(topo or city(), "c1", **options)


def error(topo: Topology, **options) -> SpecError:
    with pytest.raises(SpecError) as caught:
        plan(topo, **options)
    return caught.value


# -- containers and networks -----------------------------------------------------------------

def test_devices_and_switches_are_not_containers_and_zookeeper_is_added() -> None:
    cluster = plan()
    assert list(cluster.containers) == ["gw-n", "gw-s", "broker", "vm", "zookeeper"]
    assert cluster.containers["gw-n"].name == "foglab-c1-gw-n"
    assert cluster.zookeeper == ["zookeeper"]


def test_one_network_per_site_and_nodes_without_a_site_on_the_default_segment() -> None:
    cluster = plan(topology([{"name": "gw", "kind": "gateway", "site": "edge"},
                             {"name": "broker", "kind": "broker"}],
                            [{"from": "gw", "to": "broker", "latency": "1ms"}],
                            sites=[{"name": "edge"}]))
    assert {s: n.name for s, n in cluster.networks.items()} == {
        "edge": "foglab-c1-edge", "default": "foglab-c1-default"}
    assert cluster.containers["gw"].network == "foglab-c1-edge"
    assert cluster.containers["broker"].network == "foglab-c1-default"
    # The added ZooKeeper stands beside the broker nearest the agents.
    assert cluster.containers["zookeeper"].network == "foglab-c1-default"


def test_city_networks_follow_the_sites() -> None:
    cluster = plan()
    assert list(cluster.networks) == ["north", "south", "cloud"]
    assert cluster.containers["vm"].network == cluster.containers["broker"].network


def test_images_and_commands_by_kind_and_arch() -> None:
    cluster = plan(topology(
        [{"name": "pi", "kind": "gateway", "profile": "rpi4"},
         {"name": "x86", "kind": "gateway", "profile": "vm.small"},
         {"name": "broker", "kind": "broker"},
         {"name": "vm", "kind": "cloud_vm"}],
        [{"from": ["pi", "x86", "vm"], "to": "broker", "latency": "1ms"}]))
    containers = cluster.containers
    assert containers["pi"].image == GATEWAY and containers["pi"].command == AGENT_COMMAND
    assert containers["x86"].image == CLOUD  # same agent, natively
    assert containers["vm"].image == CLOUD and containers["vm"].command == AGENT_COMMAND
    assert containers["broker"].image == SERVICES
    assert containers["broker"].command == MOSQUITTO_COMMAND
    assert containers["broker"].port == MQTT_PORT
    assert containers["zookeeper"].command == ZOOKEEPER_COMMAND
    assert containers["zookeeper"].port == ZOOKEEPER_PORT


def test_limits_come_from_the_profiles_capped_at_the_host() -> None:
    custom = {"half": {"arch": "amd64", "cores": 2, "clock": "2GHz", "memory": "512MiB",
                       "speed": 0.5}}
    topo = topology(
        [{"name": "pi", "kind": "gateway", "profile": "rpi3b"},
         {"name": "small", "kind": "cloud_vm", "profile": "vm.small"},
         {"name": "slow", "kind": "cloud_vm", "profile": "half"},
         {"name": "broker", "kind": "broker", "profile": "vm.xlarge"}],
        [{"from": ["pi", "small", "slow"], "to": "broker", "latency": "1ms"}],
        profiles=custom)
    few, many = plan(topo, host_cpus=2).containers, plan(topo, host_cpus=16).containers
    assert few["pi"].nano_cpus == 2_000_000_000  # 4 cores, 2 on this host
    assert many["pi"].nano_cpus == 4_000_000_000  # QEMU slows it already: speed not applied
    assert many["small"].nano_cpus == 1_000_000_000
    assert many["slow"].nano_cpus == 1_000_000_000  # 2 cores at half speed, natively
    assert few["broker"].nano_cpus == 2_000_000_000 and many["broker"].nano_cpus == 8 * 10**9
    assert few["pi"].mem_limit == 1 * GiB
    assert few["slow"].mem_limit == 512 * 1024**2
    assert few["broker"].mem_limit == 16 * GiB


def test_every_container_and_network_is_labelled() -> None:
    cluster = plan(labels={"foglab.test": "emu_cluster", "foglab.cluster": "not-this"})
    for container in cluster.containers.values():
        assert container.labels["foglab"] == "1"
        assert container.labels["foglab.cluster"] == "c1"
        assert container.labels["foglab.node"] == container.node
        assert container.labels["foglab.kind"] == container.kind
        assert container.labels["foglab.test"] == "emu_cluster"
    assert cluster.containers["zookeeper"].labels["foglab.kind"] == "zookeeper"
    for network in cluster.networks.values():
        assert network.labels["foglab"] == "1"
        assert network.labels["foglab.cluster"] == "c1"
        assert network.labels["foglab.node"] == network.segment
        assert network.labels["foglab.kind"] == "network"
        assert network.labels["foglab.test"] == "emu_cluster"


def test_the_cluster_is_named_after_the_topology_by_default() -> None:
    cluster = plan_cluster(city())
    assert cluster.cluster == "t"
    assert cluster.containers["broker"].name == "foglab-t-broker"


# -- brokers and links -----------------------------------------------------------------------

def test_each_client_talks_to_the_nearest_broker() -> None:
    topo = topology(
        [{"name": "gw", "kind": "gateway", "replicas": 3},
         {"name": "b", "kind": "broker", "replicas": 2}],
        [{"from": "gw-1", "to": "b-1", "latency": "5ms"},
         {"from": "gw-1", "to": "b-2", "latency": "9ms"},
         {"from": "gw-2", "to": "b-2", "latency": "5ms"},
         {"from": "gw-2", "to": "b-1", "latency": "9ms"},
         {"from": "gw-3", "to": ["b-1", "b-2"], "latency": "7ms"}])
    cluster = plan(topo)
    # gw-3 is the first (and only) gateway with a tie: it takes the first of its brokers.
    assert cluster.brokers == {"gw-1": "b-1", "gw-2": "b-2", "gw-3": "b-1"}
    assert cluster.link("gw-2", "b-2").shape.latency_s == pytest.approx(0.005)


def test_clients_of_one_kind_take_equally_near_brokers_in_turn_as_the_model_does() -> None:
    topo = topology(
        [{"name": "gw", "kind": "gateway", "replicas": 3},
         {"name": "vm", "kind": "cloud_vm", "replicas": 2},
         {"name": "b", "kind": "broker", "replicas": 2},
         {"name": "lan", "kind": "switch"}],
        [{"from": ["gw-*", "vm-*", "b-*"], "to": "lan", "latency": "150us"}])
    cluster = plan(topo)
    assert cluster.brokers == {"gw-1": "b-1", "gw-2": "b-2", "gw-3": "b-1",
                               "vm-1": "b-1", "vm-2": "b-2"}
    assert cluster.link("gw-2", "b-2").path == ("gw-2", "lan", "b-2")
    assert cluster.link("gw-2", "b-2").shape.latency_s == pytest.approx(300e-6)


def test_a_path_shape_adds_latency_and_jitter_variance_takes_the_narrowest_bandwidth() -> None:
    topo = city()
    shape = path_shape(topo, ["gw-n", "metro", "broker"])
    assert shape.latency_s == pytest.approx(GW_BROKER_MS / 1000)
    assert shape.jitter_s == pytest.approx(math.sqrt(0.003**2 + 0.004**2))  # 5 ms
    assert shape.bandwidth_bps == pytest.approx(20e6)
    assert shape.loss == pytest.approx(1 - 0.99 * 0.98)
    assert path_shape(topo, ["vm", "broker"]) == LinkShape(0.001)
    assert path_shape(topo, ["vm"]) == LinkShape(0.0)


def test_gateways_and_cloud_vms_get_shaped_links_to_their_broker_and_zookeeper() -> None:
    cluster = plan()
    keys = [(link.client, link.service, link.role, link.port) for link in cluster.links]
    assert keys == [("gw-n", "broker", "mqtt", 1883), ("gw-n", "zookeeper", "zookeeper", 2181),
                    ("gw-s", "broker", "mqtt", 1883), ("gw-s", "zookeeper", "zookeeper", 2181),
                    ("vm", "broker", "mqtt", 1883), ("vm", "zookeeper", "zookeeper", 2181)]
    link = cluster.link("gw-n", "broker")
    assert link.path == ("gw-n", "metro", "broker")
    assert link.shape.latency_s == pytest.approx(GW_BROKER_MS / 1000)
    # The added ZooKeeper is reached through the path to the broker it stands beside.
    assert cluster.link("gw-n", "zookeeper").shape == link.shape


def test_relays_crossing_one_hop_with_a_bandwidth_share_a_bucket_per_direction() -> None:
    cluster = plan()
    assert cluster.link("gw-n", "broker").bandwidths == (20e6, 1e9)
    assert cluster.link("vm", "broker").bandwidths == (None,)
    shared = RelayLinks(cluster)._shared_hops()
    # gw-n's broker and ZooKeeper links cross its uplink; all four gateway links cross
    # metro-broker; gw-s's uplink too; vm-broker has no bandwidth to share.
    assert set(shared) == {(a, b) for hop in [("gw-n", "metro"), ("gw-s", "metro"),
                                              ("metro", "broker")]
                           for a, b in (hop, hop[::-1])}
    assert shared["metro", "broker"] is not shared["broker", "metro"]


def test_agent_configs_name_the_services_directly_until_the_engine_points_them_at_links(
) -> None:
    cluster = plan()
    config = cluster.containers["gw-s"].agent
    assert config == AgentConfig(node="gw-s", kind="gateway", index=2,
                                 mqtt="foglab-c1-broker:1883", broker="broker",
                                 zookeeper="foglab-c1-zookeeper:2181")
    assert cluster.containers["broker"].agent is None


CITY_WORKLOAD = {"name": "w", "streams": [{"name": "temp", "sources": "sensor-*",
                                          "rate": "2/s", "qos": 1}]}
CITY_PIPELINE = [{"name": "count", "on": "gw-n", "reads": "temp", "window": {"size": "2s"},
                  "writes": "counts"},
                 {"name": "sink", "on": "vm", "reads": "counts"}]


def test_a_planned_agent_is_deployments_config_with_the_addresses_filled_in() -> None:
    from emu.cluster.deployment import agent_configs, session_name

    topo = city()
    configs = agent_configs(topo, WorkloadSpec.model_validate(CITY_WORKLOAD),
                            [OperatorSpec.model_validate(op) for op in CITY_PIPELINE], 9, 0.0,
                            moving={"count"}, hold=True)
    cluster = plan(topo, agents=configs)
    for node, config in configs.items():
        planned = cluster.containers[node].agent
        assert (planned.index, planned.seed, planned.hold) == (config.index, 9, True)
        # An instance with a session of its own is told the broker holding it.
        assert planned.drivers == config.drivers and planned.operators == [
            replace(op, broker="broker") if op.session else op for op in config.operators]
        assert (planned.mqtt, planned.broker) == ("foglab-c1-broker:1883", "broker")
    assert [c.agent.index for c in cluster.agents()] == [1, 2, 3]
    assert cluster.containers["gw-n"].agent.drivers[0].devices == [f"sensor-{i}"
                                                                   for i in range(1, 5)]
    (count,) = cluster.containers["gw-n"].agent.operators
    assert count.session == session_name("count", "gw-n") == "foglab-op-count-gw-n"
    assert cluster.containers["vm"].agent.operators[0].session is None  # not moving
    # Without configs, the agents idle, numbered as deployment numbers them.
    idle = plan(topo)
    assert [(c.agent.index, c.agent.drivers, c.agent.operators) for c in idle.agents()] == [
        (1, [], []), (2, [], []), (3, [], [])]


def test_configs_of_another_topology_are_refused() -> None:
    from emu.cluster.deployment import agent_configs

    configs = agent_configs(city())
    del configs["vm"]
    with pytest.raises(ValueError, match="agents are"):
        plan(agents=configs)


# -- ZooKeeper -------------------------------------------------------------------------------

def test_a_coordinator_hosts_zookeeper() -> None:
    topo = topology(
        [{"name": "gw", "kind": "gateway"}, {"name": "broker", "kind": "broker"},
         {"name": "far", "kind": "coordinator"}, {"name": "near", "kind": "coordinator"}],
        [{"from": "gw", "to": "broker", "latency": "1ms"},
         {"from": "near", "to": "broker", "latency": "1ms"},
         {"from": "far", "to": "broker", "latency": "30ms"}])
    cluster = plan(topo)
    assert cluster.zookeeper == ["near"]  # the coordinator nearest its clients
    assert cluster.containers["near"].command == ZOOKEEPER_COMMAND
    assert cluster.containers["far"].role == "idle"
    assert "zookeeper" not in cluster.containers
    assert cluster.link("gw", "near").shape.latency_s == pytest.approx(0.002)


def test_an_ensemble_of_three_writes_each_server_its_config_and_myid() -> None:
    topo = topology(
        [{"name": "gw", "kind": "gateway"}, {"name": "broker", "kind": "broker"},
         {"name": "coord", "kind": "coordinator", "site": "dc"}],
        [{"from": ["gw", "coord"], "to": "broker", "latency": "1ms"}],
        sites=[{"name": "dc"}])
    cluster = plan(topo, zookeeper=3)
    assert cluster.zookeeper == ["coord", "zookeeper-2", "zookeeper-3"]
    for myid, server in enumerate(cluster.zookeeper, start=1):
        container = cluster.containers[server]
        files = dict(container.files)
        config = files["/etc/foglab/zoo.cfg"]
        assert "server.1=foglab-c1-coord:2888:3888" in config
        assert "server.2=foglab-c1-zookeeper-2:2888:3888" in config
        assert "server.3=foglab-c1-zookeeper-3:2888:3888" in config
        assert "clientPort=2181" in config
        assert files["/var/lib/zookeeper/myid"] == f"{myid}\n"
        assert container.network == "foglab-c1-dc"  # beside the coordinator
    assert cluster.containers["gw"].agent.zookeeper == ",".join(
        f"foglab-c1-{s}:2181" for s in cluster.zookeeper)
    assert [link.service for link in cluster.links_of("gw")] == ["broker", *cluster.zookeeper]


def test_a_single_server_gets_the_tick_the_failure_detector_assumes() -> None:
    from workloads.recovery import ZK_TICK_S

    ((path, config),) = plan().containers["zookeeper"].files
    assert path == "/etc/foglab/zoo.cfg" and "server." not in config
    settings = dict(line.split("=", 1) for line in config.splitlines() if "=" in line)
    assert int(settings["tickTime"]) == round(ZK_TICK_S * 1000) == 200
    # 2 s sessions (the recovery benchmark's) and the agents' default 10 s both accepted
    assert int(settings["minSessionTimeout"]) <= 2000
    assert int(settings["maxSessionTimeout"]) >= 10000
    assert int(settings["initLimit"]) * 200 == 20000


# -- errors before anything is made ----------------------------------------------------------

def test_a_gateway_without_any_broker_is_an_error_naming_it() -> None:
    found = error(topology([{"name": "gw", "kind": "gateway"}]))
    assert found.path == ("nodes", "gw", "kind")
    assert "a broker node" in str(found) and "gw" in str(found)


def test_a_gateway_that_reaches_no_broker_is_an_error_naming_it() -> None:
    found = error(topology(
        [{"name": "gw", "kind": "gateway", "replicas": 2}, {"name": "broker", "kind": "broker"}],
        [{"from": "gw-1", "to": "broker", "latency": "1ms"}]))
    assert found.path == ("nodes", "gw-2", "links")
    assert "nodes.gw-2.links" in str(found) and "broker" in str(found)


def test_a_profile_that_cannot_be_a_container_is_an_error() -> None:
    found = error(topology(
        [{"name": "gw", "kind": "gateway", "profile": "sensor"},
         {"name": "broker", "kind": "broker"}],
        [{"from": "gw", "to": "broker"}]))
    assert found.path == ("nodes", "gw", "profile")
    assert "arm64 or amd64" in str(found)


def test_an_unknown_profile_is_caught_when_the_topology_loads() -> None:
    with pytest.raises(SpecError) as caught:
        topology([{"name": "gw", "kind": "gateway", "profile": "rpi9"}])
    assert caught.value.path == ("nodes", 0, "profile")


@pytest.mark.parametrize("name", ["Bad name", "-x", "a/b", "x" * 41, ""])
def test_a_cluster_name_docker_rejects_is_an_error(name: str) -> None:
    with pytest.raises(SpecError) as caught:
        plan_cluster(city(), name or " ", host_cpus=2)
    assert caught.value.path == ("cluster",)


def test_a_hostname_too_long_is_an_error() -> None:
    long = "g" * 61  # replicas 1 to 9 make 63-character hostnames, the 10th 64
    found = error(topology([{"name": long, "kind": "gateway", "replicas": 10},
                            {"name": "broker", "kind": "broker"}],
                           [{"from": f"{long}-*", "to": "broker"}]))
    assert found.path == ("nodes", f"{long}-10", "name")


def test_zookeeper_is_one_or_three_servers() -> None:
    assert error(city(), zookeeper=2).path == ("zookeeper",)


def test_a_node_named_like_the_added_zookeeper_is_an_error() -> None:
    found = error(topology([{"name": "zookeeper", "kind": "cloud_vm"},
                            {"name": "broker", "kind": "broker"}],
                           [{"from": "zookeeper", "to": "broker"}]))
    assert found.path == ("nodes", "zookeeper", "name")
