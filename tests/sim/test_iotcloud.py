"""IoTCloud's scalability test on the model (seed 001, section 5.3: figures 10 and 11): the
paper's shapes as checks a wrong model fails. RabbitMQ's latency stays flat from 4 to 1000
drivers; Kafka's has large variations, which grow with the load, around the same typical
latency; a shared channel is a topic per gateway, an exclusive one a topic per driver, and
RabbitMQ's topics are light (section 3.3: "created without much burden to the broker").

Each point is the catalog's `iotcloud-scaling` shortened to 10 s (the kafka-like broker
flushes every second: ten stalls a run); the runs are made once for the module.
"""

from __future__ import annotations

import numpy as np
import pytest

from experiments.loader import load
from sim.model import Model
from tests.foundation.helpers import settings

DURATION = 10.0
RATE = 5.0  # messages per second per driver
GATEWAYS = 2


def _run(drivers: int, broker: str, channel: str = "shared") -> dict:
    """One point of the sweep, on the model, with its figures (latencies in ms) and the
    topics its brokers carried."""
    (point,) = load("iotcloud-scaling", overrides=[
        f"topology.nodes.driver.replicas={drivers}",
        f"topology.nodes.broker.broker.model={broker}",
        f"workload.streams.frames.channel={channel}", f"run.duration={DURATION:g}s"]).points
    model = Model(point.topology, point.spec.workload, point.spec.pipeline, settings(point))
    result = model.run()
    messages = result.tables["messages"]
    delivered = messages["state"] == "delivered"
    latency = messages["latency"][delivered] * 1e3
    median = float(np.median(latency))
    figures = {
        "emitted": result.facts["emitted"], "delivered": int(delivered.sum()),
        "unique": len(np.unique(messages["id"][delivered])),
        "median": median, "p99": float(np.percentile(latency, 99)),
        "p999": float(np.percentile(latency, 99.9)), "max": float(latency.max()),
        "over_2x_median": float(np.mean(latency > 2 * median)),
        "over_200ms": float(np.mean(latency > 200)),
        "topics": {name: sorted(broker.topics) for name, broker in model.brokers.items()},
    }
    shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in figures.items()
             if k != "topics"}
    print(f"{drivers} drivers, {broker}, {channel}: {shown} "
          f"topics={ {b: len(t) for b, t in figures['topics'].items()} }")
    return figures


@pytest.fixture(scope="module")
def runs() -> dict[tuple[int, str, str], dict]:
    points = [(4, "rabbitmq-like", "shared"), (1000, "rabbitmq-like", "shared"),
              (1000, "rabbitmq-like", "exclusive"), (100, "kafka-like", "shared"),
              (1000, "kafka-like", "shared")]
    return {point: _run(*point) for point in points}


def test_every_message_is_delivered_once_at_every_point(runs) -> None:
    for (drivers, _, _), figures in runs.items():
        expected = drivers * RATE * DURATION
        assert figures["emitted"] == expected
        assert figures["delivered"] == figures["unique"] == expected


def test_rabbitmq_like_latency_is_flat_up_to_1000_drivers(runs) -> None:
    """Figure 10: consistent up to 1000 drivers, marginally above the 4-driver test. 5000
    messages/s on two brokers and one spout: a model charging per topic, per connection or
    per driver, or one whose broker or spout saturates, leaves this band."""
    few, many = runs[(4, "rabbitmq-like", "shared")], runs[(1000, "rabbitmq-like", "shared")]
    assert 1.0 <= many["median"] / few["median"] < 1.2
    assert many["p99"] < 1.2 * few["p99"]
    assert many["max"] < 2 * many["median"]  # no spikes (section 5.2: minimal variation)


def test_kafka_like_varies_much_more_than_rabbitmq_like_around_the_same_median(runs) -> None:
    """Figure 11: large variations, and a low average once the spikes are removed."""
    rabbit, kafka = runs[(1000, "rabbitmq-like", "shared")], runs[(1000, "kafka-like", "shared")]
    assert kafka["median"] == pytest.approx(rabbit["median"], rel=0.05)
    assert kafka["p999"] / kafka["median"] > 5 * rabbit["p999"] / rabbit["median"]
    assert kafka["max"] > 5 * rabbit["max"]
    assert kafka["over_2x_median"] > 0.002 > rabbit["over_2x_median"] == 0.0


def test_kafka_like_spikes_grow_with_the_drivers(runs) -> None:
    """Each flush writes what arrived since the last: ten times the drivers, longer stalls."""
    assert runs[(1000, "kafka-like", "shared")]["max"] > 2 * runs[(100, "kafka-like", "shared")][
        "max"]


def test_shared_channels_are_a_topic_per_gateway_exclusive_ones_a_topic_per_driver(runs) -> None:
    """Section 3.3: shared, topics = gateways; exclusive, topics = driver instances. Each
    gateway publishes through its own broker (nearest, in turn), so each broker carries one
    gateway's topics."""
    shared = runs[(1000, "rabbitmq-like", "shared")]["topics"]
    exclusive = runs[(1000, "rabbitmq-like", "exclusive")]["topics"]
    assert sum(len(t) for t in shared.values()) == GATEWAYS
    assert shared == {"broker-1": ["frames/gw-1"], "broker-2": ["frames/gw-2"]}
    assert sum(len(t) for t in exclusive.values()) == 1000
    assert sorted(len(t) for t in exclusive.values()) == [500, 500]
    for broker, gateway in (("broker-1", "gw-1"), ("broker-2", "gw-2")):
        assert all(t.startswith(f"frames/{gateway}/driver-") for t in exclusive[broker])
    assert runs[(4, "rabbitmq-like", "shared")]["topics"] == shared


def test_rabbitmq_like_topics_are_light(runs) -> None:
    """A thousand topics instead of two cost the broker next to nothing (section 3.3)."""
    shared = runs[(1000, "rabbitmq-like", "shared")]
    exclusive = runs[(1000, "rabbitmq-like", "exclusive")]
    assert exclusive["median"] < 1.2 * shared["median"]
    assert exclusive["p99"] < 1.2 * shared["p99"]


def test_kafka_like_with_exclusive_channels_is_outside_the_sweep() -> None:
    """The file sweeps kafka-like on shared channels only, as the paper ran it."""
    points = load("iotcloud-scaling").points
    assert {p.spec.workload.streams[0].channel for p in points} == {"shared"}
    assert sorted({(p.topology.counts()["device"], p.topology.of_kind("broker")[0].broker.model)
                   for p in points}) == sorted(
        (d, m) for d in (4, 100, 250, 500, 1000) for m in ("kafka-like", "rabbitmq-like"))
