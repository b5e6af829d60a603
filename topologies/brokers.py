"""The broker kinds a broker node may run (`broker.kind`), each a descriptor registered once
in BROKER_KINDS: the facts both backends read of it. The schema takes its allowed values from
here; the emulation's side of each kind is emu.cluster.broker_kinds', the model's calibration
of it workloads.calibration's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class BrokerKind:
    """A kind of broker server, as a topology names it."""

    name: str                  # as `broker.kind` writes it
    title: str                 # the server, as messages name it
    mqtt: str                  # what serves MQTT, as messages name it
    mqtt5: bool                # its MQTT has version 5 (persistent sessions); else 3.1.1
    shared_subscriptions: bool  # it has MQTT 5's shared subscriptions ($share/<group>/...)
    # The broker models (BrokerSpec.model) a broker of this kind may be on sim, and why no
    # other (the schema's refusal); None: any.
    models: tuple[str, ...] | None = None
    why_models: str = ""


MOSQUITTO = BrokerKind("mosquitto", "Mosquitto", "Mosquitto", mqtt5=True,
                       shared_subscriptions=True)
RABBITMQ = BrokerKind(
    "rabbitmq", "RabbitMQ", "RabbitMQ 3.10's MQTT plugin", mqtt5=False,
    shared_subscriptions=False, models=("rabbitmq-like",),
    why_models="kafka-like is a model only, no Kafka server is packaged; leave kind out, or "
               "mosquitto, to model a kafka-like broker")

BROKER_KINDS: dict[str, BrokerKind] = {kind.name: kind for kind in (MOSQUITTO, RABBITMQ)}
# What a broker without a written kind runs.
DEFAULT_BROKER_KIND = MOSQUITTO
# `broker.kind`'s allowed values, for the schema.
BrokerKindName = Literal[tuple(BROKER_KINDS)]


def models_refusal(kind: BrokerKind, model: str) -> str | None:
    """Why a broker of `kind` cannot be the broker model `model` on sim (None: it can)."""
    if kind.models is None or model in kind.models:
        return None
    return (f"{' or '.join(kind.models)} for a broker of kind: {kind.name} (got {model!r}: "
            f"{kind.why_models})")
