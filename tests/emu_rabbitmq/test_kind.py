"""A broker's `kind`: rabbitmq runs the rabbitmq image on emu and is the rabbitmq-like model on
sim; what it cannot be with is refused naming the field, before anything is made."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from emu.cluster.broker_kinds import (
    BROKERS,
    RABBITMQ_CONFIG,
    RABBITMQ_MIN_MEMORY,
    check_broker_kinds,
    kind_of_container,
)
from emu.cluster.plan import MQTT_PORT, plan_cluster
from emu.images import IMAGES, RABBITMQ, SERVICES
from topologies import catalog
from topologies.brokers import BROKER_KINDS
from topologies.errors import SpecError
from topologies.model import Topology, expand
from topologies.spec import BrokerSpec, TopologySpec

MiB = 1024**2


def topology(broker: dict | None = None, profile: str = "vm.small") -> Topology:
    """A gateway and a cloud VM on broker b (its `broker` settings given), and a second broker
    m that stays Mosquitto."""
    return expand(TopologySpec.model_validate({"name": "t", "nodes": [
        {"name": "gw", "kind": "gateway", "profile": "vm.small"},
        {"name": "b", "kind": "broker", "profile": profile,
         **({"broker": broker} if broker is not None else {})},
        {"name": "m", "kind": "broker", "profile": "vm.small"}], "links": [
        {"from": "gw", "to": "b", "latency": "2ms"},
        {"from": "b", "to": "m", "latency": "1ms"}]}))


def test_the_kind_is_mosquitto_unless_written() -> None:
    assert BrokerSpec().kind == "mosquitto"
    # A rabbitmq broker is the rabbitmq-like model on sim.
    assert BrokerSpec(kind="rabbitmq").model == "rabbitmq-like"


def test_every_broker_kind_is_registered_once_on_each_side() -> None:
    # The schema takes its kinds from the registry; each has its class on the containers, and
    # a planned broker's kind is found again from its container.
    assert get_args(BrokerSpec.model_fields["kind"].annotation) == tuple(BROKER_KINDS)
    assert set(BROKERS) == set(BROKER_KINDS)
    plan = plan_cluster(topology({"kind": "rabbitmq"}), "c", host_cpus=2)
    assert kind_of_container(plan.containers["b"]).kind is BROKER_KINDS["rabbitmq"]
    assert kind_of_container(plan.containers["m"]).kind is BROKER_KINDS["mosquitto"]
    assert not plan.mqtt5 and plan_cluster(topology(), "c", host_cpus=2).mqtt5


def test_kind_rabbitmq_with_the_kafka_like_model_is_refused_with_file_and_field(
        tmp_path: Path) -> None:
    path = tmp_path / "rabbit.yaml"
    path.write_text("name: rabbit\nnodes:\n  - {name: gw, kind: gateway}\n"
                    "  - name: b\n    kind: broker\n"
                    "    broker: {kind: rabbitmq, model: kafka-like}\n"
                    "links:\n  - {from: gw, to: b}\n")
    with pytest.raises(SpecError) as caught:
        catalog.load(str(path))
    error = caught.value
    assert error.path == ("nodes", 1, "broker", "model")
    assert error.file == str(path) and error.line == 6
    assert "kafka-like" in str(error) and "kind: rabbitmq" in str(error)


def test_an_unknown_kind_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "kafka.yaml"
    path.write_text("name: kafka\nnodes:\n  - {name: b, kind: broker, broker: {kind: kafka}}\n")
    with pytest.raises(SpecError) as caught:
        catalog.load(str(path))
    assert caught.value.path == ("nodes", 0, "broker", "kind")
    assert caught.value.value == "kafka" and caught.value.line == 3


def test_a_rabbitmq_broker_runs_the_rabbitmq_image_with_its_memory() -> None:
    plan = plan_cluster(topology({"kind": "rabbitmq"}), "c", host_cpus=2)
    broker, other = plan.containers["b"], plan.containers["m"]
    assert broker.image is RABBITMQ and IMAGES["rabbitmq"] is RABBITMQ
    assert broker.command == RABBITMQ.cmd and broker.port == MQTT_PORT
    assert broker.address == "foglab-c-b:1883"
    files = dict(broker.files)
    # vm.small's 2 GiB, which the Erlang VM would otherwise read as the host's memory.
    assert files[RABBITMQ_CONFIG].endswith(
        f"total_memory_available_override_value = {2 * 1024**3}\n")
    assert "mqtt.allow_anonymous = true" in files[RABBITMQ_CONFIG]
    assert broker.mem_limit == 2 * 1024**3
    # The other broker, and the clients' addresses, are as with Mosquitto.
    assert other.image is SERVICES and other.command[0] == "mosquitto"
    assert plan.agent_configs()["gw"].mqtt == "foglab-c-b:1883"


@pytest.mark.parametrize(("settings", "says"), [
    ({"dilation": 2.0}, "run.dilation is 2"),
    ({"dilation": "auto"}, "run.dilation is auto"),
    ({"engine": "swarm"}, "run.engine is swarm"),
    ({"spares": {"b": "m"}}, "scenario.broker_scaling"),
])
def test_what_a_rabbitmq_broker_cannot_run_with_is_refused_naming_its_kind(
        settings: dict, says: str) -> None:
    with pytest.raises(SpecError) as caught:
        check_broker_kinds(topology({"kind": "rabbitmq"}), **settings)
    error = caught.value
    assert error.path == ("nodes", "b", "broker", "kind") and error.value == "rabbitmq"
    assert says in str(error) and error.file == "topology t"
    # A Mosquitto broker takes all of these.
    check_broker_kinds(topology(), **settings)


def test_plan_cluster_refuses_before_planning_anything() -> None:
    with pytest.raises(SpecError, match="broker.kind"):
        plan_cluster(topology({"kind": "rabbitmq"}), "c", host_cpus=2, dilation=3.0)


def test_a_profile_too_small_for_the_erlang_node_is_refused() -> None:
    small = expand(TopologySpec.model_validate({
        "name": "t", "profiles": {"tiny": {"arch": "amd64", "cores": 1, "clock": "1GHz",
                                           "memory": "128MiB", "speed": 1.0}},
        "nodes": [{"name": "gw", "kind": "gateway", "profile": "vm.small"},
                  {"name": "b", "kind": "broker", "profile": "tiny",
                   "broker": {"kind": "rabbitmq"}}],
        "links": [{"from": "gw", "to": "b"}]}))
    with pytest.raises(SpecError) as caught:
        plan_cluster(small, "c", host_cpus=2)
    assert "tiny has 128 MiB" in str(caught.value)
    assert f"{RABBITMQ_MIN_MEMORY // MiB} MiB" in str(caught.value)


def test_the_experiment_is_refused_before_it_runs() -> None:
    """`foglab validate` and `foglab run` refuse it (experiments.checks), naming the broker's
    kind, with the run's own settings: the engine and a spare too, which no plan sees."""
    from experiments.loader import parse_text

    text = """
name: rabbit
topology:
  name: rabbit
  nodes:
    - {name: s, kind: device}
    - {name: gw, kind: gateway, profile: vm.small}
    - {name: b, kind: broker, profile: vm.small, broker: {kind: rabbitmq}}
  links: [{from: s, to: gw}, {from: gw, to: b}]
workload: {name: w, streams: [{name: city, sources: s, rate: 1/s}]}
pipeline: [{name: sink, task: passthrough, on: gw, reads: city}]
run: {backend: emu, duration: 5s}
"""
    parse_text(text)  # at dilation 1, open, on docker: accepted
    parse_text(text.replace("duration: 5s", "duration: 5s, access: closed"))  # and closed
    for setting, says in (("dilation: 2", "run.dilation is 2"),
                          ("engine: swarm", "run.engine is swarm")):
        with pytest.raises(SpecError) as caught:
            parse_text(text.replace("duration: 5s", f"duration: 5s, {setting}"))
        assert caught.value.path[-4:] == ("nodes", "b", "broker", "kind")
        assert says in str(caught.value)


def test_an_operator_shared_by_cloud_vms_through_rabbitmq_is_refused_naming_it() -> None:
    """Instances on several nodes read through one `$share` subscription, which RabbitMQ
    3.10's MQTT plugin lacks: they would receive nothing (every reading lost, no error). On
    one node, or on gateways reading their own devices, the same is accepted; with Mosquitto
    too."""
    from experiments.loader import parse_text

    text = """
name: rabbit
topology:
  name: rabbit
  nodes:
    - {name: s, kind: device}
    - {name: gw, kind: gateway, profile: vm.small}
    - {name: b, kind: broker, profile: vm.small, broker: {kind: rabbitmq}}
    - {name: vm, kind: cloud_vm, profile: vm.small, replicas: 2}
  links: [{from: s, to: gw}, {from: gw, to: b}, {from: vm-*, to: b}]
workload: {name: w, streams: [{name: city, sources: s, rate: 1/s}]}
pipeline: [{name: sink, task: passthrough, on: ON, reads: city}]
run: {backend: emu, duration: 5s}
"""
    for accepted in ("vm-1", "gw"):
        parse_text(text.replace("ON", accepted))
    parse_text(text.replace("ON", "vm-*").replace("kind: rabbitmq", "kind: mosquitto"))
    with pytest.raises(SpecError) as caught:
        parse_text(text.replace("ON", "vm-*"))
    assert caught.value.path == ("pipeline", 0, "on")
    assert "no $share" in str(caught.value) and "one node for operator sink" in str(caught.value)
