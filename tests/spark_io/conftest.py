"""Fixtures for the Spark MQTT tests: a real Mosquitto per test, the MQTT source on one Spark."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.spark_requirements import missing
from workloads.spark.local_broker import LocalMosquitto

if (_reason := missing()) is not None:
    pytest.skip(_reason, allow_module_level=True)

# After the skip: these need the packages it checks for.
import paho.mqtt.client as mqtt  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from workloads.spark.mqtt_source import MqttDataSource  # noqa: E402


@pytest.fixture
def broker() -> Iterator[LocalMosquitto]:
    with LocalMosquitto() as running:
        yield running


@pytest.fixture(scope="session")
def spark(spark: SparkSession) -> SparkSession:
    """The tests' one Spark (tests/conftest.py), with the MQTT source registered."""
    spark.dataSource.register(MqttDataSource)
    return spark


def _wait_until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `condition` until it holds; return the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)
    return time.monotonic() - start


def _publish(
    broker: LocalMosquitto,
    topic: str,
    ids: Sequence[int],
    threads: int = 2,
    per_second: float | None = None,
) -> float:
    """Publish each id as a payload at QoS 1 from `threads` clients; return the seconds taken.

    Returns once the broker acknowledged every message. `per_second` paces the whole lot.
    """
    failures: list[BaseException] = []

    def run(share: Sequence[int]) -> None:
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        client.max_inflight_messages_set(1000)
        client.connect(broker.host, broker.port)
        client.loop_start()
        try:
            start = time.monotonic()
            sent = []
            for n, message_id in enumerate(share):
                if per_second:
                    delay = start + n * threads / per_second - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                sent.append(client.publish(topic, str(message_id).encode(), qos=1))
            for info in sent:
                info.wait_for_publish(60)
                assert info.is_published(), "the broker did not acknowledge a message"
        except BaseException as exc:
            failures.append(exc)
        finally:
            client.disconnect()
            client.loop_stop()

    started = time.monotonic()
    workers = [threading.Thread(target=run, args=(ids[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return time.monotonic() - started


@pytest.fixture
def wait_until() -> Callable[[Callable[[], bool], float, str], float]:
    return _wait_until


@pytest.fixture
def publish() -> Callable[..., float]:
    return _publish


class Subscriber:
    """A paho client that keeps every payload it receives."""

    def __init__(self, broker: LocalMosquitto, topic: str) -> None:
        self.received: list[tuple[str, bytes]] = []
        self._client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        subscribed = threading.Event()
        self._client.on_message = lambda c, u, m: self.received.append((m.topic, m.payload))
        self._client.on_subscribe = lambda *args: subscribed.set()
        self._client.on_connect = lambda c, *args: c.subscribe(topic, qos=1)
        self._client.connect(broker.host, broker.port)
        self._client.loop_start()
        assert subscribed.wait(10), f"could not subscribe to {topic}"

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


@pytest.fixture
def subscribe() -> Iterator[Callable[[LocalMosquitto, str], Subscriber]]:
    opened: list[Subscriber] = []

    def open_subscriber(broker: LocalMosquitto, topic: str) -> Subscriber:
        opened.append(Subscriber(broker, topic))
        return opened[-1]

    yield open_subscriber
    for subscriber in opened:
        subscriber.close()


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "journal"
