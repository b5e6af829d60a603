"""The MQTT sink: a task returns once the broker has its rows; a query publishes its output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from workloads.spark.local_broker import LocalMosquitto
from workloads.spark.mqtt_sink import MqttStreamWriter, Published
from workloads.spark.mqtt_source import open_session

PAYLOAD_ONLY = StructType([StructField("payload", BinaryType())])


def test_a_task_returns_once_the_broker_acknowledged_its_rows(
    broker: LocalMosquitto,
    subscribe: Callable,
    wait_until: Callable[..., float],
) -> None:
    subscriber = subscribe(broker, "out/#")
    writer = MqttStreamWriter(
        {"host": broker.host, "port": str(broker.port), "topic": "out/fixed"}, PAYLOAD_ONLY
    )
    result = writer.write(iter(Row(payload=str(n).encode()) for n in range(1000)))
    assert result == Published(1000)
    wait_until(lambda: len(subscriber.received) >= 1000, 10, "1000 messages")
    assert {topic for topic, _ in subscriber.received} == {"out/fixed"}
    assert sorted(int(payload) for _, payload in subscriber.received) == list(range(1000))


def test_the_sink_needs_a_payload_and_a_topic() -> None:
    with pytest.raises(ValueError, match="payload"):
        MqttStreamWriter({"topic": "out"}, StructType([StructField("value", StringType())]))
    with pytest.raises(ValueError, match="topic"):
        MqttStreamWriter({}, PAYLOAD_ONLY)


@pytest.mark.slow
def test_a_query_publishes_what_it_produces(
    spark: SparkSession,
    broker: LocalMosquitto,
    journal: Path,
    tmp_path: Path,
    publish: Callable[..., float],
    subscribe: Callable,
    wait_until: Callable[..., float],
) -> None:
    n = 2000
    open_session(broker.host, broker.port, "city/#", "foglab-test-relay")
    subscriber = subscribe(broker, "out/#")
    query = (
        spark.readStream.format("mqtt")
        .option("host", broker.host)
        .option("port", broker.port)
        .option("topic", "city/#")
        .option("client_id", "foglab-test-relay")
        .option("journal", str(journal))
        .load()
        # A topic column instead of a topic option: one output topic per input topic.
        .selectExpr("concat('out/', topic) AS topic", "payload")
        .writeStream.format("mqtt")
        .option("host", broker.host)
        .option("port", broker.port)
        .option("qos", 1)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )

    def relayed() -> int:
        assert query.exception() is None, f"the query failed: {query.exception()}"
        return len(subscriber.received)

    try:
        publish(broker, "city/sensor", range(n))
        wait_until(lambda: relayed() >= n, 120, f"{n} relayed messages")
    finally:
        query.stop()
    assert {topic for topic, _ in subscriber.received} == {"out/city/sensor"}
    assert sorted(int(payload) for _, payload in subscriber.received) == list(range(n))
