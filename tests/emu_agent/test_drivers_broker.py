"""A spare broker joining (emu.agent.brokers), on two real Mosquittos on the host: a node's
drivers move there (`drivers.broker`): from the answer on, its drivers' messages go to the
spare, everything else stays on the first broker, and no QoS 1 message is lost in the switch;
a reader subscribes there too (`readers.broker`) and takes the moved messages from the spare
itself, each once, with no bridge between the brokers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from emu.agent.config import DriverConfig, OperatorConfig
from tests.emu_agent.conftest import Listener, read_csv, wait_for
from workloads.spark.local_broker import LocalMosquitto, find_mosquitto

RATE, DEVICES = 100.0, 2  # msg/s per device


@pytest.fixture
def spare() -> Iterator[LocalMosquitto]:
    if find_mosquitto() is None:
        pytest.skip("mosquitto is not installed")
    with LocalMosquitto() as running:
        yield running


def test_the_drivers_publish_through_the_spare_from_the_answer_on_losing_nothing(
        broker, spare, config, agents, controller) -> None:
    first = Listener(broker.host, broker.port, ["city/#", "counts/#"])
    moved = Listener(spare.host, spare.port, ["#"])
    try:
        source = agents(config("gw-1", spares={"broker-2": f"{spare.host}:{spare.port}"},
                               drivers=[DriverConfig(
                                   "city", [f"d-{i}" for i in range(DEVICES)], RATE,
                                   arrivals="periodic", qos=1)]))
        time.sleep(1.5)
        unknown = controller.send(["gw-1"], "drivers.broker", {"broker": "broker-9"})
        assert not unknown.ok and "broker-2" in unknown.replies["gw-1"].error
        answered = controller.send(["gw-1"], "drivers.broker", {"broker": "broker-2"})
        assert answered.ok, answered.summary()
        switched = answered.replies["gw-1"].result["t"]
        time.sleep(1.5)
        source.scheduler.call(source.drivers.set_rate, 0.0)
        # Management stays on the first broker: the node answers a ping there.
        assert controller.ping(["gw-1"]).ok
        time.sleep(1.0)  # the last QoS 1 messages arrive
        sent = {int(row["id"]) for row in read_csv(source.records.directory / "sent.csv")}
        wait_for(lambda: len(sent) > 0)
        before = {h.envelope.id for h in first.snapshot("city/")}
        after = {h.envelope.id for h in moved.snapshot("city/")}
        assert len(before) >= RATE * DEVICES * 1.0 and len(after) >= RATE * DEVICES * 1.0
        assert sent - (before | after) == set()  # nothing lost in the switch
        # Each message went one way: the first broker's end before the switch, the spare's
        # from it (emitted before the answer, published after it: at most a few).
        assert len(before & after) == 0
        late = [h for h in first.snapshot("city/") if h.envelope.t > switched]
        assert late == []
        assert all(not h.topic.startswith("foglab/") for h in moved.snapshot())
    finally:
        first.close()
        moved.close()


def test_a_reader_takes_the_moved_readings_from_the_spare_each_once(
        broker, spare, config, agents, controller) -> None:
    spares = {"broker-2": f"{spare.host}:{spare.port}"}
    cloud = agents(config("cloud-1", kind="cloud_vm", index=100, spares=spares,
                          operators=[OperatorConfig("store", reads=["city/#"])]))
    source = agents(config("gw-1", index=1, spares=spares, drivers=[DriverConfig(
        "city", [f"d-{i}" for i in range(DEVICES)], RATE, arrivals="periodic", qos=1)]))
    time.sleep(1.0)
    subscribed = controller.send(["cloud-1"], "readers.broker", {"broker": "broker-2"})
    assert subscribed.ok, subscribed.summary()
    assert subscribed.replies["cloud-1"].result["filters"] == ["city/#"]
    moved = controller.send(["gw-1"], "drivers.broker", {"broker": "broker-2"})
    assert moved.ok, moved.summary()
    switched = moved.replies["gw-1"].result["t"]
    time.sleep(1.5)
    source.scheduler.call(source.drivers.set_rate, 0.0)
    time.sleep(1.0)
    for agent in (source, cloud):
        agent.scheduler.call(agent.records.flush)
    time.sleep(0.2)
    sent = {int(r["id"]): float(r["t_sent"])
            for r in read_csv(source.records.directory / "sent.csv")}
    received = [int(r["id"]) for r in read_csv(cloud.records.directory / "received.csv")]
    after = [i for i, t in sent.items() if t > switched]
    assert len(after) >= RATE * DEVICES * 1.0  # through the spare only, since the switch
    assert sorted(received) == sorted(sent)  # every reading once: none lost, none twice
