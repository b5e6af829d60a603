"""Operator migration between real agents (emu.features.moves.dispatch): a real Mosquitto on
loopback, a real ZooKeeper in a container; each move's outputs are those of an unmoved operator."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import pytest

from emu.agent.config import OperatorConfig
from emu.agent.instance_state import pack, unpack
from emu.agent.migration import CHUNK_MAX
from emu.agent.operators import Operator, operator_config
from emu.agent.protocol import Envelope, message_id
from emu.control.commands import Controller
from emu.features.moves.dispatch import MigrationError, migrate

from .conftest import wait_for
from .test_emulated import client, network, run, services, zookeeper  # noqa: F401

pytestmark = pytest.mark.emu

TOPIC = "city/gw-src"
EPOCH = time.time()


def body(sequence: int) -> str:
    return json.dumps([{"bn": "d-1/", "bt": sequence * 0.01, "n": "temperature",
                        "v": round(20 + (sequence * 7919 % 101) / 10, 1)}],
                      separators=(",", ":"))


def envelope(sequence: int) -> Envelope:
    return Envelope(message_id(1, sequence), "city", "d-1", time.time(), 0, body(sequence))


class Publisher:
    """Publishes numbered envelopes on TOPIC at QoS 1, each acknowledged by the broker."""

    def __init__(self, broker) -> None:
        import paho.mqtt.client as mqtt

        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        self.sent: list[Envelope] = []

    def publish(self, count: int, rate: float | None = None) -> None:
        infos = []
        for _ in range(count):
            message = envelope(len(self.sent))
            self.sent.append(message)
            infos.append(self.client.publish(TOPIC, message.encode(), qos=1))
            if rate:
                time.sleep(1 / rate)
        for info in infos:
            info.wait_for_publish(10)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def publisher(broker):
    made = Publisher(broker)
    yield made
    made.close()


def operator(name: str, window: Any = None, task: str = "passthrough") -> OperatorConfig:
    return OperatorConfig(name=name, task=task, reads=["city/+"], writes=name, window=window,
                          session=f"foglab-op-{name}-0")


def unmoved(config: OperatorConfig, inputs: list[Envelope]) -> list[dict]:
    """What the operator gives for inputs when nothing moves (count windows: no timer)."""
    instance = Operator(operator_config({**config.__dict__}), "gw-src", EPOCH)
    outputs = []
    for message in inputs:
        outputs += instance.take(message, time.time())
    return [_essence(o.body, o) for o in outputs]


def _essence(text: str, message: Envelope) -> dict:
    """An output without where it was made."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and "window" in data:
        return {k: v for k, v in data.items() if k != "node"}
    return {"id": message.id, "body": text}


def outputs(listener, prefix: str) -> list[dict]:
    return [_essence(h.envelope.body, h.envelope) for h in listener.snapshot(prefix)]


def test_migration_steps_refuse_what_emu_cannot_move(broker, config, agents,
                                                     controller: Controller) -> None:
    agents(config("gw-src", operators=[OperatorConfig(name="plain", reads=["city/+"])]))
    agents(config("gw-dst"))
    with pytest.raises(MigrationError, match="unknown strategy 'teleport'"):
        migrate(controller, "plain", "gw-src", "gw-dst", "teleport")
    record = migrate(controller, "plain", "gw-src", "gw-dst", "pause_drain", timeout=5)
    assert record.status == "failed"
    assert "node's session" in record.error and "OperatorConfig.session" in record.error
    assert "plain" in controller.ping(["gw-src"]).replies["gw-src"].result["operators"]


def test_pause_drain_moves_a_stateless_operator_exactly_once_in_order(
        broker, config, agents, controller: Controller, publisher: Publisher, listen) -> None:
    relay = operator("relay")
    source = agents(config("gw-src", operators=[relay]))
    agents(config("gw-dst"))
    listener = listen("relay/#")
    done: dict[str, Any] = {}
    feeding = threading.Thread(target=publisher.publish, args=(600, 400.0))
    feeding.start()
    time.sleep(0.5)  # the move happens while messages flow
    done["record"] = migrate(controller, "relay", "gw-src", "gw-dst", "pause_drain")
    feeding.join()
    record = done["record"]
    assert record.status == "done", record.error
    assert "relay" not in source.operators
    wait_for(lambda: len(listener.snapshot("relay/")) >= 600, timeout=10)
    time.sleep(0.3)
    heard = listener.snapshot("relay/")
    ids = [h.envelope.id for h in heard]
    assert ids == [m.id for m in publisher.sent]  # none lost, none twice, in order
    assert {h.topic for h in heard} == {"relay/gw-src", "relay/gw-dst"}
    assert record.held > 0 and 0 < record.downtime < 5
    assert (record.duplicates, record.lost, record.reordered) == (0, 0, 0)
    assert record.state_bytes == 0 and record.chunks == 0
    print(f"pause_drain: downtime {record.downtime * 1000:.0f} ms, held {record.held}")


WINDOW = {"size": 40, "basis": "count", "aggregate": "sum", "field": "temperature"}


def test_pause_transfer_carries_a_window_through_zookeeper(
        broker, config, agents, controller: Controller, publisher: Publisher, listen,
        zookeeper: str) -> None:  # noqa: F811
    counter = operator("counter", WINDOW)
    agents(config("gw-src", operators=[counter], zookeeper=zookeeper))
    agents(config("gw-dst", zookeeper=zookeeper))
    listener = listen("counter/#")
    feeding = threading.Thread(target=publisher.publish, args=(1000, 500.0))
    feeding.start()
    time.sleep(0.7)
    record = migrate(controller, "counter", "gw-src", "gw-dst", "pause_transfer")
    feeding.join()
    assert record.status == "done", record.error
    expected = unmoved(counter, publisher.sent)
    wait_for(lambda: len(listener.snapshot("counter/")) >= len(expected), timeout=10)
    time.sleep(0.3)
    assert outputs(listener, "counter/") == expected
    assert record.chunks == 1 and record.state_bytes > 0
    assert record.held > 0 and 0 < record.downtime < 5
    print(f"pause_transfer: downtime {record.downtime * 1000:.0f} ms, "
          f"{record.state_bytes} B in {record.chunks} chunk(s), held {record.held}")


BIG_WINDOW = {"size": 30000, "basis": "count", "aggregate": "sum", "field": "temperature"}


@pytest.mark.slow
def test_state_over_a_megabyte_crosses_in_several_chunks(
        broker, config, agents, controller: Controller, publisher: Publisher, listen,
        zookeeper: str) -> None:  # noqa: F811
    big = operator("big", BIG_WINDOW)
    source = agents(config("gw-src", operators=[big], zookeeper=zookeeper))
    agents(config("gw-dst", zookeeper=zookeeper))
    listener = listen("big/#")
    publisher.publish(22000)
    wait_for(lambda: source.operators["big"].processed >= 22000, timeout=60)
    record = migrate(controller, "big", "gw-src", "gw-dst", "pause_transfer")
    assert record.status == "done", record.error
    assert record.state_bytes > CHUNK_MAX
    assert record.chunks == -(-record.state_bytes // (CHUNK_MAX - 1)) >= 2  # a tag byte each
    publisher.publish(8000 + 30000)
    expected = unmoved(big, publisher.sent)
    wait_for(lambda: len(listener.snapshot("big/")) >= len(expected), timeout=60)
    assert outputs(listener, "big/") == expected
    assert {h.topic for h in listener.snapshot("big/")} == {"big/gw-dst"}
    print(f"big state: downtime {record.downtime:.2f} s, {record.state_bytes / 1e6:.2f} MB "
          f"in {record.chunks} chunks")


@pytest.mark.slow
def test_a_target_killed_during_the_transfer_rolls_back_losing_nothing(
        broker, config, agents, processes, controller: Controller, publisher: Publisher,
        listen, zookeeper: str) -> None:  # noqa: F811
    big = operator("big", BIG_WINDOW)
    source = agents(config("gw-src", operators=[big], zookeeper=zookeeper))
    target = processes(config("gw-dst", zookeeper=zookeeper))
    wait_for(lambda: "gw-dst" in controller.ping(["gw-dst"], timeout=1).replies, timeout=30)
    listener = listen("big/#")
    publisher.publish(22000)
    wait_for(lambda: source.operators["big"].processed >= 22000, timeout=60)

    def phase(name: str) -> None:
        if name == "pause":  # the target has started retrieving: kill it now
            os.kill(target.pid, signal.SIGKILL)
            target.wait()

    feeding = threading.Thread(target=publisher.publish, args=(3000, 1000.0))
    feeding.start()
    record = migrate(controller, "big", "gw-src", "gw-dst", "pause_transfer", timeout=3,
                     progress=phase)
    feeding.join()
    assert record.status == "failed"
    assert "did not take chunk 1" in record.error or "did not answer" in record.error
    assert source.operators["big"].running
    publisher.publish(5000)
    expected = unmoved(big, publisher.sent)
    wait_for(lambda: len(listener.snapshot("big/")) >= len(expected), timeout=60)
    assert outputs(listener, "big/") == expected
    assert source.operators["big"].processed == len(publisher.sent)


def test_the_moved_state_is_the_snapshot_and_the_last_keys() -> None:
    seen = [["city/gw-src", 5, None], ["city/gw-src", 6, 3]]
    assert unpack(pack(seen, b"\x00state")) == (seen, b"\x00state")
    with pytest.raises(ValueError, match="cut"):
        unpack(pack(seen, b"\x00state")[:-1])


def test_a_run_moves_the_scenario_s_migrations_at_their_time(
        broker, config, agents, controller: Controller, publisher: Publisher) -> None:
    from emu.features.migrations import MigrationSchedule, migration_columns
    from experiments.schema import TABLES
    from workloads.scenario import ScheduledMigration

    relay = operator("relay")
    source_config = config("gw-src", operators=[relay])
    agents(source_config)
    agents(config("gw-dst"))
    scenario = type("Scenario", (), {"migration": None, "migrations": [
        ScheduledMigration(at=0.4, operator="relay", to="gw-dst", strategy="pause_drain")]})()
    epoch = time.time()
    mover = MigrationSchedule(controller, scenario.migrations, scenario.migration,
                              {"gw-src": source_config}, epoch)
    mover.start()
    publisher.publish(300, 300.0)
    table = migration_columns(mover.finish(), epoch)
    assert set(table) == set(TABLES["migrations"].names)
    assert table["source"] == ["gw-src"] and table["target"] == ["gw-dst"]
    assert 0.4 <= table["start"][0] < 1.5 and table["downtime"][0] > 0
