"""IO tasks: MQTT publish through a callable, so this module needs no MQTT client library."""

from __future__ import annotations

from collections.abc import Callable

from workloads.riot.senml import Reading, encode_senml
from workloads.riot.tasks.base import Message, Task, register


@register
class MqttPublish(Task):
    """Hand each message to `publish(topic, payload)` and pass it on (RIoTBench MQP, 1:1).

    A reading is published as SenML; text and bytes go as they are. The caller supplies
    `publish` (e.g. a bound paho-mqtt `Client.publish`), so the broker, QoS and client library
    are the caller's choice.
    """

    name = "mqtt_publish"

    def __init__(self, publish: Callable[[str, bytes], object], topic: str = "foglab/riot") -> None:
        self.publish = publish
        self.topic = topic

    def process(self, message: Message) -> list[Message]:
        if isinstance(message, Reading):
            payload = encode_senml(message).encode()
        elif isinstance(message, str):
            payload = message.encode()
        else:
            payload = message
        self.publish(self.topic, payload)
        return [message]
