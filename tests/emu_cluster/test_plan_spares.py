"""A spare broker in a cluster's plan (scenario.broker_scaling), without Docker: nobody takes
it at the start, it runs a plain Mosquitto (no bridge), and every agent of the broker it backs,
the readers as the movers, knows its address through a link of its own."""

from __future__ import annotations

from emu.cluster.broker_kinds import MOSQUITTO_DEFAULTS, SPARE_COMMAND, SPARE_CONFIG
from emu.cluster.deployment import agent_configs
from emu.cluster.plan import MQTT_PORT, plan_cluster
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
    assert plan.spares == {} and all(not c.agent.spares for c in plan.agents())


def test_no_agent_takes_a_spare_and_every_agent_of_its_broker_can_reach_it() -> None:
    topology = two_brokers()
    plan = plan_cluster(topology, "c1", agents=configs(topology), host_cpus=2,
                        spares={"broker-2": "broker-1"})
    assert plan.brokers == {"gw-1": "broker-1", "gw-2": "broker-1", "cloud": "broker-1"}
    spare = plan.containers["broker-2"]
    assert (spare.role, spare.command, spare.port) == ("broker", SPARE_COMMAND, MQTT_PORT)
    ((conf_path, conf),) = spare.files
    assert conf_path == SPARE_CONFIG
    assert conf.startswith(MOSQUITTO_DEFAULTS.read_text())  # the image's settings kept
    added = conf[len(MOSQUITTO_DEFAULTS.read_text()):].splitlines()
    assert "sys_interval 1" in added and not any(
        line.startswith(("connection", "address", "topic")) for line in added)  # no bridge
    assert plan.containers["broker-1"].files == ()
    # The spare is no client of broker-1: nothing routes the moved readings through it.
    assert "broker-2" not in {link.client for link in plan.links}
    # Every agent of broker-1 has a link to the spare, shaped as its path, and its address:
    # the gateways may move their drivers there, the cloud VM reads there too after a join.
    for agent, latency in (("gw-1", 0.002), ("gw-2", 0.002), ("cloud", 0.007)):
        assert plan.link(agent, "broker-2").shape.latency_s == latency
        assert plan.containers[agent].agent.spares == {"broker-2": "foglab-c1-broker-2:1883"}
        assert plan.containers[agent].agent.mqtt == "foglab-c1-broker-1:1883"


def test_a_reader_with_a_session_of_its_own_is_refused_before_anything_starts() -> None:
    import pytest

    from emu.features.broker_scaling import check_readers
    from topologies.errors import SpecError
    from workloads.broker_scaling import BrokerScalingSpec

    topology = two_brokers()
    workload = WorkloadSpec.model_validate({"name": "w", "streams": [
        {"name": "s", "sources": "a-*", "rate": "5/s", "qos": 1}]})
    pipeline = [OperatorSpec.model_validate({"name": "count", "on": "cloud", "reads": "s"})]
    entries = [BrokerScalingSpec(broker="broker-1", spare="broker-2", bound=0.02)]
    plain = agent_configs(topology, workload, pipeline, 1, 0.0, hold=True)
    plan = plan_cluster(topology, "c1", agents=plain, host_cpus=2,
                        spares={"broker-2": "broker-1"})
    check_readers(entries, plan.brokers, plain)  # the node's own session: it can follow
    moving = agent_configs(topology, workload, pipeline, 1, 0.0, hold=True, moving=["count"])
    with pytest.raises(SpecError) as error:
        check_readers(entries, plan.brokers, moving)
    message = str(error.value)
    assert "scenario.broker_scaling[0].broker" in message and "'count' on cloud" in message
