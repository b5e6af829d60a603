"""The MQTT streaming sink for Spark: rows published, and acknowledged before their task commits.

Registered through `mqtt_source.MqttDataSource` (format "mqtt": one data source reads and
writes). Options: host, port, topic (else each row's `topic` column), qos (default 1).
Delivery is at least once: MQTT has no transactions, so a task Spark retries publishes its
rows again and `abort` cannot take back what a failed batch published.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from workloads.spark.login import login

_CONNECT_WAIT = 10.0
_ACK_WAIT = 60.0  # seconds a task waits for the broker to acknowledge its last message
# paho's default of 20 unacknowledged messages caps a task at 20 round trips' worth.
_INFLIGHT = 1000


@dataclass
class Published(WriterCommitMessage):
    """What one task published (and the broker acknowledged)."""

    messages: int


def _connect(host: str, port: int) -> mqtt.Client:
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    login(client)
    client.max_inflight_messages_set(_INFLIGHT)
    connected = threading.Event()
    refused: list[str] = []

    def on_connect(
        client: mqtt.Client,
        userdata: object,
        flags: mqtt.ConnectFlags,
        reason_code: ReasonCode,
        properties: Properties | None,
    ) -> None:
        if reason_code.is_failure:
            refused.append(str(reason_code))
        connected.set()

    client.on_connect = on_connect
    client.connect(host, port, keepalive=30)
    client.loop_start()
    if not connected.wait(_CONNECT_WAIT) or refused:
        client.loop_stop()
        raise ConnectionError(f"mqtt sink: cannot connect to {host}:{port}: {refused or 'timeout'}")
    return client


class MqttStreamWriter(DataSourceStreamWriter):
    """Publishes each partition's rows with one client per task."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        columns = schema.fieldNames()
        self.topic = options.get("topic")
        if "payload" not in columns:
            raise ValueError(f"the mqtt sink needs a 'payload' column, got {columns}")
        if not self.topic and "topic" not in columns:
            raise ValueError("the mqtt sink needs a 'topic' option or a 'topic' column")
        self.host = options.get("host", "127.0.0.1")
        self.port = int(options.get("port", 1883))
        self.qos = int(options.get("qos", 1))

    def write(self, iterator: Iterator[Row]) -> Published:
        client = _connect(self.host, self.port)
        try:
            sent = [
                client.publish(self.topic or row["topic"], row["payload"], self.qos)
                for row in iterator
            ]
            deadline = time.monotonic() + _ACK_WAIT
            for info in sent:
                # Returning lets Spark commit the batch: every message must be the broker's by then.
                info.wait_for_publish(max(0.0, deadline - time.monotonic()))
                if not info.is_published():
                    raise TimeoutError(
                        f"mqtt sink: the broker acknowledged {sum(i.is_published() for i in sent)}"
                        f" of {len(sent)} messages within {_ACK_WAIT:.0f} s"
                    )
        finally:
            client.disconnect()
            client.loop_stop()
        return Published(len(sent))
