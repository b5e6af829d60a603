"""An experiment's agents: devices as drivers on their gateway, operators where placed."""

from __future__ import annotations

import re

import pytest

from emu.agent.config import AgentConfig
from emu.cluster.deployment import NOT_ON_EMU, ON_EMU, DeploymentError, agent_configs
from experiments.loader import load
from tests.foundation.helpers import point
from topologies.errors import SpecError
from workloads.pipeline import OperatorSpec

SMALL = """
name: small
topology:
  name: t
  nodes:
    - {name: s, kind: device, replicas: 6}
    - {name: gw, kind: gateway, replicas: 2}
    - {name: broker-1, kind: broker}
    - {name: cloud-1, kind: cloud_vm}
  links:
    - {from: s-*, to: gw-*, mode: spread, latency: 5ms, jitter: 1ms, loss: 1%}
    - {from: gw-*, to: broker-1, latency: 20ms}
    - {from: broker-1, to: cloud-1, latency: 1ms}
workload:
  name: w
  streams: [{name: city, sources: s-*, rate: 2/s, channel: exclusive, qos: 1}]
pipeline:
  - {name: filter, task: range_filter, on: gateways, reads: city, writes: clean}
  - {name: count, on: cloud-1, reads: clean, selectivity: 0.5}
run: {duration: 10s}
"""


def configs(text: str = SMALL) -> dict[str, AgentConfig]:
    run_point = point(text)
    return agent_configs(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                         seed=3, epoch=100.0)


def test_each_gateway_drives_its_own_devices_with_their_link() -> None:
    agents = configs()
    assert set(agents) == {"gw-1", "gw-2", "cloud-1"}
    devices = [d for gw in ("gw-1", "gw-2") for driver in agents[gw].drivers
               for d in driver.devices]
    assert sorted(devices) == [f"s-{i}" for i in range(1, 7)]
    (driver,) = agents["gw-1"].drivers
    assert len(driver.devices) == 3
    assert (driver.stream, driver.rate, driver.qos, driver.channel) == ("city", 2.0, 1, "exclusive")
    assert (driver.access_latency, driver.access_jitter, driver.access_loss) == (
        pytest.approx(0.005), pytest.approx(0.001), pytest.approx(0.01))
    assert driver.access_bandwidth is None  # the link has none: nothing to serialise
    assert agents["cloud-1"].drivers == []


def test_the_device_links_bandwidth_goes_to_its_gateways_drivers() -> None:
    """The radio's bandwidth splits drivers as latency does: each driver has one."""
    text = SMALL.replace("{from: s-*, to: gw-*, mode: spread,",
                         "{from: 's-[1-4]', to: gw-*, mode: spread, bandwidth: 250kbit,"
                         ).replace("- {from: gw-*, to: broker-1, latency: 20ms}",
                                   "- {from: gw-*, to: broker-1, latency: 20ms}\n"
                                   "    - {from: 's-[56]', to: gw-1, latency: 5ms, "
                                   "jitter: 1ms, loss: 1%, bandwidth: 1Mbit}")
    drivers = {tuple(d.devices): d.access_bandwidth for d in configs(text)["gw-1"].drivers}
    assert drivers == {("s-1", "s-2"): 250e3, ("s-5", "s-6"): 1e6}


def test_drivers_carry_their_streams_rate_shape_as_its_fields() -> None:
    assert configs()["gw-1"].drivers[0].shape is None  # constant
    shaped = SMALL.replace("channel: exclusive,",
                           "channel: exclusive, shape: {kind: bursty, on: 2s},")
    (driver,) = configs(shaped)["gw-1"].drivers
    assert driver.shape == {"kind": "bursty", "on": 2.0, "off": 50.0, "high": 5.0, "low": 0.2}
    assert AgentConfig.from_json(configs(shaped)["gw-1"].to_json()).drivers[0].shape == driver.shape


def test_operators_go_where_placed_with_their_topic_filters() -> None:
    agents = configs()
    for gateway in ("gw-1", "gw-2"):
        (op,) = agents[gateway].operators
        # two instances: through the broker they are one shared subscription, as on sim
        assert (op.name, op.task, op.reads, op.writes) == ("filter", "range_filter",
                                                            ["$share/filter/city/#"], "clean")
    (count,) = agents["cloud-1"].operators
    assert (count.reads, count.writes, count.window) == (["clean/#"], None, None)
    # Selectivity acts in the agent, which notes what it filters in the node's records.
    assert (count.selectivity, count.records) == (0.5, "/records")
    assert agents["gw-1"].operators[0].selectivity == 1.0


def test_nodes_get_distinct_indexes_and_the_run_seed_and_epoch() -> None:
    agents = configs()
    assert len({a.index for a in agents.values()}) == 3 and min(a.index for a in agents.values())
    assert {(a.seed, a.epoch) for a in agents.values()} == {(3, 100.0)}
    assert AgentConfig.from_json(agents["gw-1"].to_json()) == agents["gw-1"]


@pytest.mark.parametrize(("change", "message"), [
    ("{name: filter, task: range_filter, on: broker-1, reads: city, writes: clean}",
     "pipeline[0].on: gateways or cloud VMs: in the emulation operators run there, and "
     "broker-1 is a broker"),
    ("{name: filter, task: stats, engine: spark, on: gateways, reads: city, writes: clean}",
     "pipeline[0].engine: python on gw-1: Spark runs on cloud VMs, and gw-1 is a gateway"),
    ("{name: filter, task: range_filter, on: gateways, reads: city, writes: clean, "
     "params: {colour: red}}",
     "pipeline[0].task: a task the emulation can run: task 'range_filter' has no parameter "
     "'colour'"),
])
def test_what_the_emulation_cannot_run_is_named(change: str, message: str) -> None:
    text = SMALL.replace(
        "{name: filter, task: range_filter, on: gateways, reads: city, writes: clean}", change)
    with pytest.raises(DeploymentError, match=re.escape(message)):
        configs(text)


@pytest.mark.parametrize(("change", "message"), [
    ("{name: filter, task: nope, on: gateways, reads: city, writes: clean}",
     "pipeline[0].task: unknown task 'nope' for engine python; known tasks: "),
    ("{name: filter, task: wordcount, engine: spark, on: cloud-1, reads: city, writes: clean}",
     "pipeline[0].task: unknown task 'wordcount' for engine spark; known tasks: etl, stats, "
     "pred"),
])
def test_an_unknown_task_is_refused_before_the_emulation_sees_it(change: str,
                                                                  message: str) -> None:
    # Validation refuses it on every backend (tests/foundation/test_tasks_refused.py).
    text = SMALL.replace(
        "{name: filter, task: range_filter, on: gateways, reads: city, writes: clean}", change)
    with pytest.raises(SpecError, match=re.escape(message)):
        configs(text)


def test_devices_without_a_gateway_run_as_a_group_in_a_container_of_their_own() -> None:
    text = SMALL.replace("- {from: gw-*, to: broker-1, latency: 20ms}",
                         "- {from: gw-*, to: broker-1, latency: 20ms}\n"
                         "    - {from: 's-[56]', to: broker-1, latency: 5ms}").replace(
        "{from: s-*, to: gw-*", "{from: 's-[1-4]', to: gw-*")
    agents = configs(text)
    assert list(agents) == ["gw-1", "gw-2", "cloud-1", "s"]  # named after the group
    group = agents["s"]
    assert (group.kind, group.operators, group.index) == ("device", [], 4)
    (driver,) = group.drivers
    assert driver.devices == ["s-5", "s-6"] and driver.stream == "city"
    # The link layer shapes their path, device link included: the agent adds nothing.
    assert (driver.access_latency, driver.access_jitter, driver.access_loss) == (0, 0, 0)
    assert all(d not in ("s-5", "s-6") for gw in ("gw-1", "gw-2")
               for driver in agents[gw].drivers for d in driver.devices)


def test_a_group_linked_two_ways_makes_two_containers() -> None:
    text = SMALL.replace("- {from: gw-*, to: broker-1, latency: 20ms}",
                         "- {from: gw-*, to: broker-1, latency: 20ms}\n"
                         "    - {from: 's-[56]', to: broker-1, latency: 5ms}\n"
                         "    - {from: s-6, to: broker-1, latency: 7ms}").replace(
        "{from: s-*, to: gw-*", "{from: 's-[1-4]', to: gw-*")
    agents = configs(text)
    assert [(a.node, a.drivers[0].devices) for a in agents.values() if a.kind == "device"] == [
        ("s-5", ["s-5"]), ("s-6", ["s-6"])]


def test_the_catalog_quickstart_deploys() -> None:
    run_point = load("quickstart").points[0]
    agents = agent_configs(run_point.topology, run_point.spec.workload,
                           run_point.spec.pipeline, seed=7, epoch=0.0)
    assert sum(len(d.devices) for a in agents.values() for d in a.drivers) == 200
    # smart-city's 802.15.4-class radio: 250 kbit/s, serialised by each gateway's agent.
    assert {d.access_bandwidth for a in agents.values() for d in a.drivers} == {250e3}
    assert [op.engine for op in agents["cloud-1"].operators] == ["spark"]


# A value other than the default for each field of OperatorSpec, and what it does on emu:
# where the field acts, the agent configs show it; where it does not, it is refused.
FILTER = {"name": "filter", "on": ["gateways"], "reads": ["city"], "writes": "clean"}
ACTS = {
    "name": ({"name": "clean-up"}, lambda a: a["gw-1"].operators[0].name == "clean-up"),
    "task": ({"task": "range_filter"}, lambda a: a["gw-1"].operators[0].task == "range_filter"),
    "engine": ({"engine": "spark", "task": "stats", "on": ["cloud-1"]},
               lambda a: a["cloud-1"].operators[0].engine == "spark"),
    "on": ({"on": ["gw-2"]}, lambda a: a["gw-1"].operators == [] and a["gw-2"].operators),
    # Resolved into `on` by the placement before any backend: on emu the instances are `on`'s.
    "among": ({"among": ["gw-2"]}, lambda a: a["gw-1"].operators and a["gw-2"].operators),
    # on gateways: two instances, one shared subscription through the broker
    "reads": ({"reads": ["city/gw-1/+"]},
              lambda a: a["gw-1"].operators[0].reads == ["$share/filter/city/gw-1/+"]),
    "writes": ({"writes": "valid"}, lambda a: a["gw-1"].operators[0].writes == "valid"),
    "params": ({"task": "range_filter", "params": {"ranges": {"temperature": [-40, 60]}}},
               lambda a: a["gw-1"].operators[0].params == {
                   "ranges": {"temperature": [-40, 60]}}),
    "selectivity": ({"selectivity": 0.25},
                    lambda a: a["gw-1"].operators[0].selectivity == 0.25),
    # Measured, not imposed: the agent runs the task, whose CPU time is the cost.
    "cost": ({"cost": 0.0015}, lambda a: a["gw-1"].operators[0].name == "filter"),
    # A tumbling count of 2 s in the agent; sim's timer jitter is not imposed.
    "window": ({"window": {"size": 2.0, "jitter": 0.01}},
               lambda a: a["gw-1"].operators[0].window == 2.0),
    # An instance per moving device where the hybrid backend's policy starts it, reading the
    # device's own topics through a session of its own (it moves).
    "follow": ({"follow": "users"}, lambda a: [
        (op.name, op.reads, op.session is not None) for op in a["gw-2"].operators] == [
        ("filter@s-1", ["city/+/s-1"], True)] and a["gw-1"].operators == []),
    "checkpoint": ({"window": {"size": 2.0}, "checkpoint": 2.0},
                   lambda a: a["gw-1"].operators[0].checkpoint == 2.0),
    "slo": ({"slo": 0.05}, lambda a: a["gw-1"].operators[0].slo == 0.05),
}
REFUSED = {
    "out_size": ({"out_size": 64}, "pipeline[0].out_size: not yet on emu: an output's size "
                                   "on emu is what its task writes (got 64)"),
}


def deploy(fields: dict) -> dict[str, AgentConfig]:
    run_point = point(SMALL)
    spec = OperatorSpec.model_validate({**FILTER, **fields})
    return agent_configs(run_point.topology, run_point.spec.workload,
                         [spec, *run_point.spec.pipeline[1:]], seed=3, epoch=100.0,
                         follow={"filter": {"s-1": "gw-2"}} if spec.follow else None)


def test_a_follow_operator_without_moving_users_is_refused() -> None:
    with pytest.raises(DeploymentError, match=re.escape(
            "pipeline[0].follow: no follow operator without moving users")):
        agent_configs(point(SMALL).topology, point(SMALL).spec.workload,
                      [OperatorSpec.model_validate({**FILTER, "follow": "users"})])


def test_every_operator_field_acts_on_emu_or_is_refused() -> None:
    fields = set(OperatorSpec.model_fields)
    assert set(ACTS) | set(REFUSED) == fields, "a field of OperatorSpec is not walked here"
    assert set(ON_EMU) == set(ACTS) and set(NOT_ON_EMU) == set(REFUSED)
    for name, (change, acts) in ACTS.items():
        assert change[name] != OperatorSpec.model_fields[name].default, name
        assert acts(deploy(change)), name
    for change, message in REFUSED.values():
        with pytest.raises(DeploymentError, match=re.escape(message)):
            deploy(change)


@pytest.mark.parametrize(("change", "message"), [
    ({"selectivity": 2.0}, "pipeline[0].selectivity: not yet on emu above 1: the copies of an "
                           "input would share its id"),
    ({"selectivity": 0.5, "engine": "spark", "task": "stats", "on": ["cloud-1"]},
     "pipeline[0].selectivity: not yet on emu for engine spark"),
])
def test_selectivity_emu_cannot_run_is_refused(change: dict, message: str) -> None:
    with pytest.raises(DeploymentError, match=re.escape(message)):
        deploy(change)


@pytest.mark.parametrize(("change", "message"), [
    ({"window": {"size": 2.0}, "selectivity": 0.5},
     "pipeline[0].selectivity: 1 with a window on emu: a window counts every input (got 0.5)"),
    ({"window": {"size": 2.0}, "engine": "spark", "task": "stats", "on": ["cloud-1"]},
     "pipeline[0].window: not yet on emu for engine spark"),
])
def test_a_window_emu_cannot_run_is_refused(change: dict, message: str) -> None:
    with pytest.raises(DeploymentError, match=re.escape(message)):
        deploy(change)


def test_instances_through_a_broker_share_one_subscription_but_spark_jobs_do_not() -> None:
    two_vms = SMALL.replace("    - {name: cloud-1, kind: cloud_vm}",
                            "    - {name: cloud, kind: cloud_vm, replicas: 2}").replace(
        "    - {from: broker-1, to: cloud-1, latency: 1ms}",
        "    - {from: broker-1, to: cloud-*, latency: 1ms}").replace(
        "on: cloud-1, reads: clean, selectivity: 0.5", "on: cloud-*, reads: clean")
    agents = configs(two_vms)
    assert [agents[vm].operators[0].reads for vm in ("cloud-1", "cloud-2")] == [
        ["$share/count/clean/#"]] * 2
    spark = configs(two_vms.replace("- {name: count, on: cloud-*, reads: clean}",
                                    "- {name: count, task: stats, engine: spark, on: cloud-*, "
                                    "reads: clean}"))
    assert spark["cloud-1"].operators[0].reads == ["clean/#"]


def test_drivers_publish_to_the_broker_when_a_reader_elsewhere_needs_their_messages() -> None:
    # The filter on every gateway takes the readings in-process: nothing to publish.
    assert not any(d.forward for a in configs().values() for d in a.drivers)
    # An archive on the cloud reads the raw readings too: each gateway also publishes them,
    # as sim sends a copy through the broker to a group with no instance on the node.
    archive = SMALL.replace("  - {name: count, on: cloud-1, reads: clean, selectivity: 0.5}",
                            "  - {name: count, on: cloud-1, reads: clean, selectivity: 0.5}\n"
                            "  - {name: archive, on: cloud-1, reads: city}")
    agents = configs(archive)
    assert [d.forward for gw in ("gw-1", "gw-2") for d in agents[gw].drivers] == [True, True]
    # An instance that moves reads through its own session, even on the devices' gateway.
    run_point = point(SMALL)
    moving = agent_configs(run_point.topology, run_point.spec.workload,
                           run_point.spec.pipeline, moving=["filter"])
    assert all(d.forward for gw in ("gw-1", "gw-2") for d in moving[gw].drivers)
