"""LocalMosquitto: a real broker that starts, holds persistent sessions, and cleans up."""

from __future__ import annotations

import socket
import threading

import paho.mqtt.client as mqtt
import pytest

from workloads.spark import local_broker
from workloads.spark.local_broker import LocalMosquitto
from workloads.spark.mqtt_source import open_session


def test_broker_stops_its_process_and_removes_its_directory() -> None:
    with LocalMosquitto() as broker:
        process, workdir = broker.process, broker.workdir
        with socket.create_connection((broker.host, broker.port), timeout=2):
            pass
    assert process is not None and process.poll() is not None
    assert workdir is not None and not workdir.exists()
    with pytest.raises(OSError):
        socket.create_connection((broker.host, broker.port), timeout=2).close()


def test_a_persistent_session_holds_messages_while_its_client_is_away(
    broker: LocalMosquitto,
) -> None:
    open_session(broker.host, broker.port, "city/#", client_id="away")
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    publisher.connect(broker.host, broker.port)
    publisher.loop_start()
    for info in [publisher.publish("city/a", str(n), qos=1) for n in range(2000)]:
        info.wait_for_publish(10)
    publisher.disconnect()
    publisher.loop_stop()

    received: list[bytes] = []
    done = threading.Event()

    def on_message(client: mqtt.Client, userdata: object, message: mqtt.MQTTMessage) -> None:
        received.append(message.payload)
        if len(received) == 2000:
            done.set()

    # More than mosquitto's default queue of 1000: LocalMosquitto raises it.
    returning = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, "away", clean_session=False)
    returning.on_message = on_message
    returning.connect(broker.host, broker.port)
    returning.loop_start()
    try:
        assert done.wait(20), f"received {len(received)} of 2000 queued messages"
    finally:
        returning.disconnect()
        returning.loop_stop()
    assert sorted(map(int, received)) == list(range(2000))


def test_a_missing_binary_names_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_broker, "find_mosquitto", lambda: None)
    with pytest.raises(FileNotFoundError, match="Debian package 'mosquitto'"), LocalMosquitto():
        pass
