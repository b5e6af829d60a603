"""Agents and the host's controller go through a broker restart: persistent sessions, resent
QoS 1 messages, replies queued while away (a real Mosquitto, stopped and started again on its
port with its database)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from emu.agent.config import DriverConfig, OperatorConfig
from emu.control.commands import Controller
from emu.control.mqtt_loop import Backoff
from tests.emu_agent.conftest import address, read_csv, wait_for
from workloads.spark.local_broker import LocalMosquitto, find_mosquitto

RATE, DEVICES = 20.0, 2  # msg/s per device


@pytest.fixture
def broker() -> Iterator[LocalMosquitto]:
    """A broker of this test's own: it is restarted."""
    if find_mosquitto() is None:
        pytest.skip("mosquitto is not installed")
    with LocalMosquitto() as running:
        yield running


def restart(broker: LocalMosquitto, away: float = 1.0) -> None:
    """SIGTERM (Mosquitto writes its database), `away` seconds down, start on the same port."""
    binary = find_mosquitto()
    assert binary is not None
    broker._terminate()
    time.sleep(away)
    assert broker._start(binary), "mosquitto did not start again on its port"


def test_the_backoff_waits_longer_after_each_attempt_and_not_after_a_connection() -> None:
    backoff = Backoff(low=0.5, high=2.0)
    assert backoff.due(0.0)
    waits = []
    for now in (0.0, 1.0, 3.0, 6.0, 9.0):
        assert backoff.due(now)
        backoff.attempt(now)
        waits.append(backoff.next_try - now)
        assert not backoff.due(now + backoff.delay - 0.01)
    assert waits == [0.5, 1.0, 2.0, 2.0, 2.0]
    backoff.connected()
    assert backoff.due(9.1) and backoff.attempts == 0
    backoff.attempt(9.1)
    assert backoff.delay == 0.5


def test_a_command_stops_waiting_for_a_node_known_gone(broker) -> None:
    with Controller(address(broker)) as control:
        started = time.monotonic()
        result = control.send(["gw-1", "gw-2"], "ping", timeout=20.0,
                              gone=lambda: {"gw-2", "elsewhere"})
        waited = time.monotonic() - started
    # gw-1 never answers (no agent): the command waits its timeout for it, not for gw-2.
    assert result.missing == ["gw-1", "gw-2"] and result.gone == ["gw-2"]
    assert result.silent == ["gw-1"]
    assert "gw-2: gone" in result.summary() and waited >= 19.0
    with Controller(address(broker)) as control:
        started = time.monotonic()
        result = control.send(["gw-2"], "ping", timeout=20.0, gone=lambda: ["gw-2"])
        # At once, not its timeout of 20 s: a tenth of it holds at CI's worst (load 6).
        assert time.monotonic() - started < 2.0
    assert result.gone == ["gw-2"] and not result.ok


def test_the_controller_and_an_agent_answer_after_the_broker_restarts(
        broker, config, agents) -> None:
    agent = agents(config("gw-1"))
    with Controller(address(broker), client_id="foglab-controller-test") as control:
        assert control.ping(["gw-1"]).ok
        restart(broker)
        answered = control.ping(["gw-1"], timeout=20.0)
        assert answered.ok, answered.summary()
        assert control.reconnects >= 1
    assert agent.connections >= 2


def flow(broker, config, agents, qos: int) -> tuple[set[int], set[int]]:
    """gw-1's devices publish at `qos` through a broker restart to gw-2's sink; the ids sent
    and the ids the sink received."""
    sink = agents(config("gw-2", operators=[OperatorConfig("sink", reads=["city/#"])]))
    source = agents(config("gw-1", drivers=[DriverConfig(
        "city", [f"d-{i}" for i in range(DEVICES)], RATE, arrivals="periodic", qos=qos)]))
    time.sleep(1.5)
    restart(broker)
    time.sleep(2.0)
    source.scheduler.call(source.drivers.set_rate, 0.0)
    wait_for(lambda: source.client.is_connected() and sink.client.is_connected(), 20.0)
    time.sleep(2.0)  # resent and queued messages arrive
    source.stop()
    sink.stop()
    sent = {int(row["id"]) for row in read_csv(source.records.directory / "sent.csv")}
    received = {int(row["id"]) for row in read_csv(sink.records.directory / "received.csv")}
    return sent, received


def test_qos_1_messages_published_through_a_broker_restart_all_arrive(
        broker, config, agents) -> None:
    sent, received = flow(broker, config, agents, qos=1)
    assert len(sent) >= RATE * DEVICES * 4
    assert sent - received == set()


def test_qos_0_messages_of_the_outage_are_lost(broker, config, agents) -> None:
    sent, received = flow(broker, config, agents, qos=0)
    assert len(sent - received) >= RATE * DEVICES * 0.5  # the second it was away, at least
    assert received <= sent and len(received) > 0
