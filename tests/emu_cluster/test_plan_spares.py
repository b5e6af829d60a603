"""A spare broker in a cluster's plan (scenario.broker_scaling), without Docker: nobody takes
it at the start, its Mosquitto bridges the movers' streams to the broker it backs through a
link of its own, and the agents that may move know its address through theirs."""

from __future__ import annotations

from emu.cluster.plan import (
    MOSQUITTO_DEFAULTS,
    MQTT_PORT,
    SPARE_COMMAND,
    SPARE_CONFIG,
    SPARE_READY,
    plan_cluster,
    point_bridge,
)
from emu.deployment import agent_configs
from topologies.model import Topology, expand
from topologies.spec import TopologySpec
from workloads.pipeline import OperatorSpec
from workloads.spec import WorkloadSpec


def two_brokers() -> Topology:
    """gw-1 and gw-2 nearer broker-2 than broker-1: without spares both would take it."""
    return expand(TopologySpec.model_validate({
        "name": "two", "nodes": [
            {"name": "a", "kind": "device", "replicas": 2},
            {"name": "gw", "kind": "gateway", "replicas": 2, "profile": "vm.small"},
            {"name": "broker", "kind": "broker", "replicas": 2, "profile": "vm.small"},
            {"name": "cloud", "kind": "cloud_vm", "profile": "vm.small"}],
        "links": [
            {"from": "a-1", "to": "gw-1", "latency": "1ms"},
            {"from": "a-2", "to": "gw-2", "latency": "1ms"},
            {"from": "gw-*", "to": "broker-1", "latency": "6ms"},
            {"from": "gw-*", "to": "broker-2", "latency": "2ms"},
            {"from": "broker-1", "to": "broker-2", "latency": "3ms"},
            {"from": "cloud", "to": "broker-1", "latency": "4ms"}]}))


def configs(topology: Topology) -> dict:
    workload = WorkloadSpec.model_validate({"name": "w", "streams": [
        {"name": "s", "sources": "a-*", "rate": "5/s", "qos": 1}]})
    pipeline = [OperatorSpec.model_validate({"name": "count", "on": "cloud", "reads": "s"})]
    return agent_configs(topology, workload, pipeline, 1, 0.0, hold=True)


def test_without_spares_the_gateways_take_the_nearer_broker() -> None:
    topology = two_brokers()
    plan = plan_cluster(topology, "c1", agents=configs(topology), host_cpus=2)
    assert plan.brokers == {"gw-1": "broker-2", "gw-2": "broker-2", "cloud": "broker-1"}
    assert plan.spares == {} and all(c.bridge is None for c in plan.services())


def test_no_agent_takes_a_spare_and_the_spare_bridges_the_streams_to_its_broker() -> None:
    topology = two_brokers()
    plan = plan_cluster(topology, "c1", agents=configs(topology), host_cpus=2,
                        spares={"broker-2": "broker-1"})
    assert plan.brokers == {"gw-1": "broker-1", "gw-2": "broker-1", "cloud": "broker-1"}
    spare = plan.containers["broker-2"]
    assert (spare.role, spare.bridge, spare.command) == ("broker", "broker-1", SPARE_COMMAND)
    assert spare.port == MQTT_PORT and plan.containers["broker-1"].bridge is None
    (conf_path, conf), (ready, _) = spare.files
    assert (conf_path, ready) == (SPARE_CONFIG, SPARE_READY)
    assert conf.startswith(MOSQUITTO_DEFAULTS.read_text())  # the image's settings kept
    bridge = conf[len(MOSQUITTO_DEFAULTS.read_text()):].splitlines()
    assert "connection foglab-bridge-broker-2" in bridge
    assert "address foglab-c1-broker-1:1883" in bridge  # direct, until the engine points it
    assert "cleansession false" in bridge and "clientid foglab-bridge-c1-broker-2" in bridge
    # Only the movers' streams, out: management topics never cross.
    assert [line for line in bridge if line.startswith("topic")] == ["topic s/# out 1"]
    # The bridge's link: the spare is its client, shaped as its path to broker-1 (3 ms).
    link = plan.link("broker-2", "broker-1")
    assert (link.role, link.path) == ("mqtt", ("broker-2", "broker-1"))
    assert link.shape.latency_s == 0.003
    # The gateways publish through broker-1: each has a link to the spare and its address.
    for gateway in ("gw-1", "gw-2"):
        assert plan.link(gateway, "broker-2").shape.latency_s == 0.002
        assert plan.containers[gateway].agent.spares == {"broker-2": "foglab-c1-broker-2:1883"}
        assert plan.containers[gateway].agent.mqtt == "foglab-c1-broker-1:1883"
    # The cloud VM runs no drivers: it never moves, and has no link to the spare.
    assert plan.containers["cloud"].agent.spares == {}
    assert [link.service for link in plan.links_of("cloud")] == ["broker-1", "zookeeper"]


def test_the_engine_points_the_bridge_at_the_spares_link() -> None:
    topology = two_brokers()
    plan = plan_cluster(topology, "c1", agents=configs(topology), host_cpus=2,
                        spares={"broker-2": "broker-1"})
    (_, conf), marker = point_bridge(plan.containers["broker-2"].files, "172.20.0.1:40123")
    assert "address 172.20.0.1:40123" in conf.splitlines()
    assert "foglab-c1-broker-1:1883" not in conf
    assert marker == (SPARE_READY, "")  # after the conf: Mosquitto starts on a whole file
