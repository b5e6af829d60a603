"""A calibrated model costs a RabbitMQ broker with the profile's RabbitMQ figure."""

from __future__ import annotations

import pytest

from sim.costs import Costs
from topologies.model import expand
from topologies.spec import TopologySpec
from workloads.calibration import load


def test_a_rabbitmq_broker_takes_the_profiles_rabbitmq_figure() -> None:
    topology = expand(TopologySpec.model_validate({"name": "t", "nodes": [
        {"name": "gw", "kind": "gateway", "profile": "vm.small"},
        {"name": "r", "kind": "broker", "profile": "vm.small", "broker": {"kind": "rabbitmq"}},
        {"name": "m", "kind": "broker", "profile": "vm.small"}],
        "links": [{"from": "gw", "to": ["r", "m"]}]}))
    profile = load("reference").calibration
    costs = Costs(topology, 1e-4, profile)
    assert profile.rabbitmq is not None
    assert costs.broker(topology.nodes["r"]).service_time == pytest.approx(
        profile.rabbitmq.service_time)
    assert costs.broker(topology.nodes["m"]).service_time == pytest.approx(
        profile.broker.service_time)
    # RabbitMQ costs several times Mosquitto's CPU per message (benchmarks/brokers.py).
    assert profile.rabbitmq.service_time > 2 * profile.broker.service_time
