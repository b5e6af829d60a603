"""Several brokers, which the emulation does not bridge: the host's controller reaches each
agent through the broker the agent talks to, and an agent's operators read on the run's other
brokers too (AgentConfig.other_brokers), so every publisher's readings reach them once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from emu.agent.config import AgentConfig, DriverConfig, OperatorConfig
from emu.agent.protocol import Envelope
from emu.control.commands import Controller
from workloads.spark.local_broker import LocalMosquitto, find_mosquitto

from .conftest import address, read_csv, wait_for


@pytest.fixture(scope="module")
def brokers() -> Iterator[list[LocalMosquitto]]:
    if find_mosquitto() is None:
        pytest.skip("mosquitto is not installed")
    with LocalMosquitto() as first, LocalMosquitto() as second, LocalMosquitto() as third:
        yield [first, second, third]


def _start(agents, brokers: list[LocalMosquitto], tmp_path: Path) -> dict[str, str]:
    """Two agents on each broker; node -> its broker's address."""
    routes = {}
    for number in range(len(brokers) * 2):
        node, broker = f"gw-{number + 1}", address(brokers[number % len(brokers)])
        agents(AgentConfig(node=node, mqtt=broker, records=str(tmp_path / node)))
        routes[node] = broker
    return routes


def test_every_agent_answers_through_its_own_broker(brokers, agents, tmp_path) -> None:
    routes = _start(agents, brokers, tmp_path)
    with Controller(routes, client_id="foglab-controller-multi") as control:
        assert len(control.brokers) == 3
        pinged = control.ping(routes, timeout=5)
        assert pinged.ok, pinged.summary()
        everyone = control.send(routes, "ping", timeout=5, broadcast=True)
        assert everyone.ok, everyone.summary()
        assert sorted(everyone.replies) == sorted(routes)
        assert control.reconnects == 0


def test_one_broker_alone_reaches_only_its_own_agents(brokers, agents, tmp_path) -> None:
    """What a run's single-broker controller did: the other brokers' agents never answer."""
    routes = _start(agents, brokers, tmp_path)
    with Controller(address(brokers[0])) as control:
        pinged = control.send(routes, "ping", timeout=1.5, broadcast=True)
    assert sorted(pinged.missing) == sorted(n for n, b in routes.items()
                                            if b != address(brokers[0]))


def test_of_plan_takes_each_agent_s_broker_from_the_plan() -> None:
    plan = SimpleNamespace(cluster="c", brokers={"gw-1": "broker-1", "gw-2": "broker-2"},
                           mqtt5=True)
    status = {"broker-1": SimpleNamespace(ip="10.0.0.2"),
              "broker-2": SimpleNamespace(ip="10.0.1.2")}
    control = Controller.of_plan(plan, status)
    assert control.broker_of("gw-2") == "10.0.1.2:1883"
    assert control.brokers == ["10.0.0.2:1883", "10.0.1.2:1883"]
    with pytest.raises(ValueError, match="broker-2"):
        Controller.of_plan(plan, {"broker-1": status["broker-1"]})


def test_a_reader_takes_every_broker_s_readings_once(brokers, agents, tmp_path) -> None:
    first, second, third = (address(b) for b in brokers)
    cloud = agents(AgentConfig(
        node="cloud-1", kind="cloud_vm", mqtt=first, index=100, records=str(tmp_path / "c"),
        other_brokers={"b-2": second, "b-3": third},
        operators=[OperatorConfig("store", reads=["city/#"])]))
    # `agents` waits for the node's own session; the other brokers confirm on their own
    # threads (the node registers and starts drivers only once they have: Agent.session_ready).
    deadline = time.monotonic() + 10
    while not all(o.ready for o in cloud.other_brokers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(cloud.other_brokers) == 2 and all(o.ready for o in cloud.other_brokers)
    sources = [agents(AgentConfig(
        node=f"gw-{n}", mqtt=broker, index=n, records=str(tmp_path / f"gw-{n}"),
        drivers=[DriverConfig("city", [f"d-{n}-{i}" for i in range(3)], 10.0,
                              arrivals="periodic", qos=1)]))
        for n, broker in enumerate((first, second, third), start=1)]
    time.sleep(1.5)
    for agent in [*sources, cloud]:
        agent.scheduler.call(agent.drivers.set_rate, 0.0)
    time.sleep(0.5)
    for agent in [*sources, cloud]:
        agent.scheduler.call(agent.records.flush)
    time.sleep(0.2)
    sent = {int(r["id"]): r["source"] for agent in sources
            for r in read_csv(agent.records.directory / "sent.csv")}
    received = [int(r["id"]) for r in read_csv(cloud.records.directory / "received.csv")]
    assert len(set(sent.values())) == 9  # every device of every broker
    assert sorted(received) == sorted(sent)  # each reading once, whichever broker it took
    # An operator installed later reads on the other brokers too.
    with Controller(first) as control:
        assert control.install(["cloud-1"], OperatorConfig("late", reads=["late/#"])).ok
    time.sleep(0.5)  # the SUBSCRIBE's way to the other brokers
    import paho.mqtt.client as mqtt

    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    publisher.connect(brokers[2].host, brokers[2].port)
    publisher.loop_start()
    try:
        publisher.publish("late/x", Envelope(1, "late", "x", time.time(), 0, "{}").encode(),
                          qos=1).wait_for_publish()
        wait_for(lambda: cloud.operators["late"].processed == 1)
    finally:
        publisher.loop_stop()
        publisher.disconnect()
