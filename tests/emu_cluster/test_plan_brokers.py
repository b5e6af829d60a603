"""Several brokers in a cluster's plan: brokers are not bridged, so an agent whose operators
read through its node session reads on every other broker too, over a link shaped as its
path there; and the messages table counts those paths' links."""

from __future__ import annotations

import pytest

from emu.cluster.deployment import agent_configs
from emu.cluster.plan import plan_cluster
from emu.run.tables import Paths
from topologies.errors import SpecError
from topologies.model import Topology, expand
from topologies.spec import TopologySpec
from workloads.pipeline import OperatorSpec
from workloads.spec import WorkloadSpec


def two_brokers() -> Topology:
    """gw-1 and the cloud VM near b-1, gw-2 near b-2; b-1 and b-2 meet at a switch."""
    return expand(TopologySpec.model_validate({"name": "t", "nodes": [
        {"name": "s", "kind": "device", "replicas": 2},
        {"name": "gw", "kind": "gateway", "profile": "vm.small", "replicas": 2},
        {"name": "b", "kind": "broker", "replicas": 2},
        {"name": "lan", "kind": "switch"},
        {"name": "vm", "kind": "cloud_vm", "profile": "vm.small"}], "links": [
        {"from": "s-1", "to": "gw-1", "latency": "1ms"},
        {"from": "s-2", "to": "gw-2", "latency": "1ms"},
        {"from": "gw-1", "to": "b-1", "latency": "5ms"},
        {"from": "gw-2", "to": "b-2", "latency": "5ms"},
        {"from": "vm", "to": "b-1", "latency": "2ms"},
        {"from": ["b-1", "b-2"], "to": "lan", "latency": "3ms"}]}))


def plan(pipeline: list[OperatorSpec]):
    topology = two_brokers()
    workload = WorkloadSpec.model_validate(
        {"name": "w", "streams": [{"name": "city", "sources": "s-*", "rate": "2/s"}]})
    return plan_cluster(topology, "c", agents=agent_configs(topology, workload, pipeline),
                        host_cpus=2)


def test_a_reader_reads_on_every_other_broker_over_its_path_there() -> None:
    cluster = plan([OperatorSpec.model_validate({"name": "sink", "on": "vm",
                                                 "reads": "city"})])
    assert cluster.brokers == {"gw-1": "b-1", "gw-2": "b-2", "vm": "b-1"}
    vm = cluster.containers["vm"].agent
    assert vm.other_brokers == {"b-2": cluster.containers["b-2"].address}
    link = cluster.link("vm", "b-2")
    assert link.role == "mqtt" and link.path == ("vm", "b-1", "lan", "b-2")
    assert link.shape.latency_s == 0.002 + 0.003 + 0.003
    # Gateways with no operator read nothing, anywhere.
    assert cluster.containers["gw-2"].agent.other_brokers == {}
    assert [link.service for link in cluster.links_of("gw-2") if link.role == "mqtt"] == ["b-2"]


def test_the_messages_table_counts_the_links_through_the_publisher_s_broker() -> None:
    paths = Paths.of_plan(plan([OperatorSpec.model_validate({"name": "sink", "on": "vm",
                                                             "reads": "city"})]))
    assert paths.hops("city", "s-1", "vm", 0) == 1 + 1 + 1  # device, gw-1 to b-1, b-1 to vm
    # gw-2 publishes to b-2, which hands the reading to vm over vm's link there.
    assert paths.hops("city", "s-2", "vm", 0) == 1 + 1 + 3


def test_an_instance_with_a_session_of_its_own_reading_another_broker_is_refused() -> None:
    """It reads on its node's broker only: gw-2's readings would be silently missing."""
    topology = two_brokers()
    workload = WorkloadSpec.model_validate(
        {"name": "w", "streams": [{"name": "city", "sources": "s-*", "rate": "2/s"}]})
    configs = agent_configs(topology, workload, [OperatorSpec.model_validate(
        {"name": "sink", "on": "vm", "reads": "city"})], moving={"sink"})
    with pytest.raises(SpecError, match=r"sink on vm reads through a session of its own "
                       r"\(it may move\), on its broker b-1 only, and gw-2 publishes "
                       r"city/gw-2 to b-2"):
        plan_cluster(topology, "c", agents=configs, host_cpus=2)


def test_an_instance_with_a_session_of_its_own_reading_its_broker_only_is_planned() -> None:
    topology = two_brokers()
    workload = WorkloadSpec.model_validate(
        {"name": "w", "streams": [{"name": "city", "sources": "s-1", "rate": "2/s"}]})
    configs = agent_configs(topology, workload, [OperatorSpec.model_validate(
        {"name": "sink", "on": "vm", "reads": "city"})], moving={"sink"})
    cluster = plan_cluster(topology, "c", agents=configs, host_cpus=2)
    assert cluster.containers["vm"].agent.other_brokers == {}
    assert Paths.of_plan(cluster).hops("city", "s-1", "vm", 0) == 3


def moving_plan(targets=None):
    """An instance of `count` on gw-1 that may move, reading s-1's readings on b-1."""
    topology = two_brokers()
    workload = WorkloadSpec.model_validate(
        {"name": "w", "streams": [{"name": "city", "sources": "s-1", "rate": "2/s"}]})
    configs = agent_configs(topology, workload, [OperatorSpec.model_validate(
        {"name": "count", "on": "gw-1", "reads": "city"})], moving={"count"})
    return plan_cluster(topology, "c", agents=configs, host_cpus=2, targets=targets)


def test_a_node_behind_another_broker_reaches_the_broker_of_a_session_it_may_take() -> None:
    """The session a target takes over holds the input on b-1: gw-2, behind b-2, gets a link
    there, shaped as its path; vm, behind b-1 already, needs none."""
    cluster = moving_plan()
    (count,) = cluster.containers["gw-1"].agent.operators
    assert (count.session, count.broker) == ("foglab-op-count-gw-1", "b-1")
    assert cluster.containers["gw-1"].agent.broker == "b-1"
    gw2 = cluster.containers["gw-2"].agent
    assert (gw2.broker, gw2.other_brokers) == ("b-2", {"b-1": cluster.containers["b-1"].address})
    link = cluster.link("gw-2", "b-1")
    assert link.role == "mqtt" and link.path == ("gw-2", "b-2", "lan", "b-1")
    assert link.shape.latency_s == pytest.approx(0.005 + 0.003 + 0.003)
    assert cluster.containers["vm"].agent.other_brokers == {}
    assert cluster.containers["gw-1"].agent.other_brokers == {}


def test_only_the_given_targets_get_links_to_the_session_s_broker() -> None:
    assert moving_plan({"count": ["vm"]}).containers["gw-2"].agent.other_brokers == {}
    assert set(moving_plan({"count": ["gw-2"]}).containers["gw-2"].agent.other_brokers) == {
        "b-1"}
    with pytest.raises(SpecError, match=r"to move count to \(gw-1, gw-2, vm\) \(got 'b-1'\)"):
        moving_plan({"count": ["b-1"]})


def test_a_target_finds_the_session_s_broker_through_its_link_or_is_refused() -> None:
    from emu.agent.input_session import session_address

    cluster = moving_plan()
    (count,) = cluster.containers["gw-1"].agent.operators
    assert session_address(cluster.containers["gw-2"].agent, count) == (
        cluster.containers["b-1"].address)
    assert session_address(cluster.containers["vm"].agent, count) == (
        cluster.containers["vm"].agent.mqtt)
    unlinked = moving_plan({"count": ["vm"]}).containers["gw-2"].agent
    with pytest.raises(ValueError, match=r"operator 'count' reads through its input session "
                       r"foglab-op-count-gw-1 on broker b-1, and node gw-2 has no link to b-1"):
        session_address(unlinked, count)


def test_a_migration_across_brokers_that_cannot_reach_the_session_is_refused() -> None:
    """pause_transfer takes the session over on b-1; a parallel migration's mirror goes
    through each node's own broker, so it is refused before the run, naming the field."""
    from emu.features.migrations import check_targets
    from workloads.scenario import MigrationSettings, ScheduledMigration

    cluster = moving_plan()
    configs = cluster.agent_configs()
    move = ScheduledMigration.model_validate({"at": 5, "operator": "count", "to": "gw-2"})
    check_targets([move], MigrationSettings(), cluster, configs)
    check_targets([move.model_copy(update={"target": "vm"})],
                  MigrationSettings(strategy="parallel"), cluster, configs)
    with pytest.raises(SpecError, match=r"scenario\.migrations\[0\]\.to: .*input session is "
                       r"on broker b-1, gw-2 is behind b-2, and a parallel migration"):
        check_targets([move], MigrationSettings(strategy="parallel"), cluster, configs)
    unlinked = moving_plan({"count": ["vm"]})
    with pytest.raises(SpecError, match=r"the cluster's plan gives it no link there"):
        check_targets([move], MigrationSettings(), unlinked, unlinked.agent_configs())


def test_the_messages_table_counts_a_moved_instance_s_links_to_its_session_s_broker() -> None:
    """count moved to gw-2 reads on b-1 still, over gw-2's link there."""
    paths = Paths.of_plan(moving_plan(), moves={"count": ["gw-2"]})
    assert paths.hops("city", "s-1", "gw-1", 0) == 1 + 1 + 1  # device, up to b-1, back
    assert paths.hops("city", "s-1", "gw-2", 0) == 1 + 1 + 3  # ... b-1, lan, b-2, gw-2


def test_a_follow_instance_reads_on_the_broker_of_whichever_node_runs_it() -> None:
    """A hybrid run's follow instance (broker ""): its device's readings enter at the gateway
    the device is attached to, so it is pinned to no broker and needs no links."""
    from dataclasses import replace

    from emu.agent.input_session import session_address
    from emu.cluster.deployment import follow_instance

    topology = two_brokers()
    workload = WorkloadSpec.model_validate(
        {"name": "w", "streams": [{"name": "city", "sources": "s-1", "rate": "2/s"}]})
    configs = agent_configs(topology, workload, [OperatorSpec.model_validate(
        {"name": "count", "on": "gw-1", "reads": "city"})], moving={"count"})
    (count,) = configs["gw-1"].operators
    follow = follow_instance(count, ["city"], "s-1")
    assert follow.broker == ""
    configs["gw-1"] = replace(configs["gw-1"], operators=[follow])
    cluster = plan_cluster(topology, "c", agents=configs, host_cpus=2)
    assert cluster.containers["gw-1"].agent.operators[0].broker == ""
    gw2 = cluster.containers["gw-2"].agent
    assert gw2.other_brokers == {} and session_address(gw2, follow) == gw2.mqtt
