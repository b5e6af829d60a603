"""The host's MQTT network loop works where paho's select() cannot: a client whose socket is
numbered 1024 or above, as in the process that holds a large cluster's relays."""

from __future__ import annotations

import contextlib
import resource
import socket
import threading
from collections.abc import Iterator

import pytest

from emu.control.commands import Controller
from emu.control.mqtt_loop import SelectorLoop
from tests.emu_agent.conftest import address

SELECT_LIMIT = 1024  # FD_SETSIZE


@contextlib.contextmanager
def descriptors_taken() -> Iterator[None]:
    """Takes the descriptors below 1100, so that the next socket is numbered above select's
    limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip(f"the open-files limit ({soft}) is below 1200")
    padding = [socket.socket() for _ in range(1100)]
    try:
        yield
    finally:
        for sock in padding:
            sock.close()


@pytest.fixture
def high_descriptors() -> Iterator[None]:
    with descriptors_taken():
        yield


def test_a_client_above_selects_limit_subscribes_publishes_and_receives(
        broker, high_descriptors) -> None:
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    subscribed, done = threading.Event(), threading.Event()
    received: list[bytes] = []

    def message(client, userdata, message) -> None:
        received.append(message.payload)
        if len(received) == 200:
            done.set()

    client.on_subscribe = lambda *args: subscribed.set()
    client.on_message = message
    client.connect(broker.host, broker.port)
    assert client.socket().fileno() >= SELECT_LIMIT
    loop = SelectorLoop(client).start()
    try:
        client.subscribe("loop/#", qos=1)
        assert subscribed.wait(10)
        for i in range(200):  # from this thread: the loop is woken to write them
            client.publish("loop/n", str(i).encode(), qos=1)
        assert done.wait(10), f"{len(received)} of 200 received"
        assert received == [str(i).encode() for i in range(200)]
    finally:
        client.disconnect()
        loop.stop()
    assert not loop._running()


def test_a_controller_above_selects_limit_reaches_its_agents(broker, config, agents) -> None:
    for node in ("gw-a", "gw-b"):  # before the padding: their clients use paho's loop
        agents(config(node))
    with descriptors_taken(), Controller(address(broker)) as control:
        assert control._client.socket().fileno() >= SELECT_LIMIT
        pong = control.ping(["gw-a", "gw-b"], timeout=10)
    assert pong.ok, pong.summary()
