"""The simulator's times: exact sums on an idle path, queueing theory under load, loss, QoS,
determinism, shared subscriptions, channels, broker profiles, selectivity and rate shapes."""

from __future__ import annotations

import gc
import math
import random

import numpy as np
import pytest
import simpy
from simpy.core import URGENT
from simpy.events import NORMAL, Event

from experiments.loader import load
from sim.clock import Environment
from sim.model import ModelError
from topologies.errors import SpecError
from workloads.pipeline import OperatorSpec

from .helpers import (
    assert_tables_equal,
    messages,
    model,
    point,
    run,
    simulate_point,
    tables_differ,
)

# -- one message, exact ------------------------------------------------------------------------

CHAIN = """
name: one-message
topology:
  name: chain
  nodes:
    - {name: dev, kind: device}
    - {name: gw, kind: gateway, profile: rpi4}
    - {name: broker, kind: broker, profile: vm.small, broker: {service_time: 300us}}
    - {name: cloud, kind: cloud_vm, profile: vm.large}
  links:
    - {from: dev, to: gw, latency: 5ms, bandwidth: 1Mbit}
    - {from: gw, to: broker, latency: 20ms, bandwidth: 10Mbit}
    - {from: broker, to: cloud, latency: 1ms, bandwidth: 100Mbit}
workload:
  name: one
  streams:
    - {name: s, sources: dev, rate: 1/s, arrivals: periodic, size: 1250B}
pipeline:
  - {name: sink, on: cloud, reads: s, cost: 2ms}
run: {duration: 1s, seed: 5, driver_cost: 90us}
"""


@pytest.mark.parametrize("direct", [True, False])
def test_one_message_arrives_at_the_sum_of_serialisation_propagation_and_service(
        direct: bool) -> None:
    result = run(CHAIN, direct_handover=direct)
    table = result.tables["messages"]
    assert result.facts["emitted"] == 1 and len(table["id"]) == 1
    bits = 1250 * 8
    expected = (bits / 1e6 + 0.005                # radio link
                + 90e-6 / 0.45                   # gateway driver on a Pi 4 core (speed 0.45)
                + bits / 10e6 + 0.020            # metro link
                + 300e-6 / 1.0                   # broker service on vm.small (speed 1.0)
                + bits / 100e6 + 0.001           # cloud link
                + 2e-3 / 1.0)                    # sink cost on vm.large (speed 1.0)
    t_sent, t_received = table["t_sent"][0], table["t_received"][0]
    assert 0 <= t_sent < 1.0  # a periodic source starts at a random phase within its period
    assert t_received - t_sent == pytest.approx(expected, abs=1e-12)
    assert table["latency"][0] == pytest.approx(expected, abs=1e-12)
    assert (table["hops"][0], table["source"][0], table["sink"][0], table["lost"][0]) == (
        3, "dev", "cloud", False)
    assert result.facts["brokers"] == {"broker": 1}


def test_service_times_scale_with_the_node_speed() -> None:
    slow = messages(CHAIN.replace("profile: vm.large", "profile: rpi3b"))
    fast = messages(CHAIN)
    # only the sink's 2 ms changes: on a Pi 3B core (speed 0.25) it takes 8 ms
    assert slow["latency"][0] - fast["latency"][0] == pytest.approx(2e-3 / 0.25 - 2e-3,
                                                                    abs=1e-12)


def test_an_operator_on_the_gateway_reads_without_crossing_the_broker() -> None:
    text = CHAIN.replace("{name: sink, on: cloud, reads: s, cost: 2ms}",
                         "{name: sink, on: gw, reads: s, cost: 2ms}")
    result = run(text)
    table = result.tables["messages"]
    bits = 1250 * 8
    assert table["latency"][0] == pytest.approx(bits / 1e6 + 0.005 + 90e-6 / 0.45 + 2e-3 / 0.45,
                                                abs=1e-12)
    assert (table["sink"][0], table["hops"][0]) == ("gw", 1)
    assert result.facts["brokers"] == {"broker": 0}


def _with_filter_on_gateway(out_size: str) -> str:
    # the output size was first read from params; it is becoming a field of its own
    size = (f"out_size: {out_size}" if "out_size" in OperatorSpec.model_fields
            else f"params: {{out_size: {out_size}}}")
    return CHAIN.replace(
        "  - {name: sink, on: cloud, reads: s, cost: 2ms}",
        f"  - {{name: f, on: gw, reads: s, writes: t, {size}}}\n"
        "  - {name: sink, on: cloud, reads: t, cost: 2ms}")


def test_an_operators_output_size_sets_what_crosses_the_following_links() -> None:
    table = messages(_with_filter_on_gateway("625B"))
    expected = (1250 * 8 / 1e6 + 0.005 + 90e-6 / 0.45
                + 625 * 8 / 10e6 + 0.020 + 300e-6 + 625 * 8 / 100e6 + 0.001 + 2e-3)
    assert table["latency"][0] == pytest.approx(expected, abs=1e-12)


def test_an_output_size_with_a_unit_is_parsed_or_refused_before_running() -> None:
    text = _with_filter_on_gateway("1KB")
    try:
        point(text)
    except SpecError:
        return
    table = messages(text)
    expected = (1250 * 8 / 1e6 + 0.005 + 90e-6 / 0.45
                + 1000 * 8 / 10e6 + 0.020 + 300e-6 + 1000 * 8 / 100e6 + 0.001 + 2e-3)
    assert table["latency"][0] == pytest.approx(expected, abs=1e-12)


def test_a_gateway_cut_off_from_the_brokers_is_a_model_error() -> None:
    # a gateway whose one link goes to its device once sent routing into endless recursion
    text = CHAIN.replace("- {name: dev, kind: device}",
                         "- {name: dev, kind: device}\n    - {name: dev-2, kind: device}\n"
                         "    - {name: gw-2, kind: gateway}")
    text = text.replace("  links:\n", "  links:\n    - {from: dev-2, to: gw-2}\n")
    text = text.replace("sources: dev,", "sources: [dev, dev-2],")
    with pytest.raises(ModelError):
        run(text)


# -- queueing against M/D/1 ------------------------------------------------------------------

D = 1e-3  # the bottleneck's deterministic service time

LINK_BOTTLENECK = """
name: md1-link
topology:
  name: md1-link
  nodes:
    - {{name: dev, kind: device}}
    - {{name: gw, kind: gateway}}
  links:
    - {{from: dev, to: gw, bandwidth: 1Mbit}}
workload:
  name: poisson
  streams:
    - {{name: s, sources: dev, rate: {rate}/s, arrivals: poisson, size: 125B}}
pipeline:
  - {{name: sink, on: gw, reads: s}}
run: {{duration: {duration}s, seed: 11, driver_cost: 0, drain: 10s}}
"""

CPU_BOTTLENECK = """
name: md1-cpu
topology:
  name: md1-cpu
  nodes:
    - {{name: dev, kind: device}}
    - {{name: gw, kind: gateway}}
    - {{name: broker, kind: broker, broker: {{service_time: 0}}}}
    - {{name: vm, kind: cloud_vm, profile: vm.small}}
  links:
    - {{from: dev, to: gw}}
    - {{from: gw, to: broker}}
    - {{from: broker, to: vm}}
workload:
  name: poisson
  streams:
    - {{name: s, sources: dev, rate: {rate}/s, arrivals: poisson, size: 125B}}
pipeline:
  - {{name: sink, on: vm, reads: s, cost: 1ms}}
run: {{duration: {duration}s, seed: 11, driver_cost: 0, drain: 10s}}
"""


@pytest.mark.parametrize("rho", [0.5, 0.8])
@pytest.mark.parametrize("bottleneck", [LINK_BOTTLENECK, CPU_BOTTLENECK],
                         ids=["link-serialisation", "operator-on-one-core"])
def test_mean_wait_matches_md1(bottleneck: str, rho: float) -> None:
    # 100k (rho 0.5) to 240k (rho 0.8) messages: the estimate's standard error is about 1%
    duration = 200 if rho == 0.5 else 300
    result = run(bottleneck.format(rate=rho / D, duration=duration))
    table = result.tables["messages"]
    assert not table["lost"].any()
    assert len(table["id"]) == result.facts["emitted"] > rho / D * duration * 0.98
    wait = table["latency"] - D  # no other delay on the path
    assert wait.min() >= -1e-12
    expected = rho * D / (2 * (1 - rho))
    assert wait.mean() == pytest.approx(expected, rel=0.05)
    # an idle server serves at once: P(no wait) = 1 - rho for Poisson arrivals
    assert np.mean(wait < 1e-12) == pytest.approx(1 - rho, abs=0.02)


def test_sampled_cpu_utilisation_is_the_offered_load() -> None:
    result = run(CPU_BOTTLENECK.format(rate=0.6 / D, duration=60))
    nodes = result.tables["nodes"]
    vm = nodes["node"] == "vm"
    assert vm.sum() == 60  # one sample per second
    assert nodes["cpu"][vm].mean() == pytest.approx(0.6, abs=0.03)


# -- loss and QoS ----------------------------------------------------------------------------

LOSSY = """
name: lossy
topology:
  name: lossy
  nodes:
    - {{name: dev, kind: device, replicas: 10}}
    - {{name: gw, kind: gateway}}
    - {{name: broker, kind: broker}}
    - {{name: cloud, kind: cloud_vm}}
  links:
    - {{from: dev-*, to: gw, latency: 2ms, loss: {radio}}}
    - {{from: gw, to: broker, latency: 10ms, loss: {metro}}}
    - {{from: broker, to: cloud, latency: 1ms}}
workload:
  name: w
  streams:
    - {{name: s, sources: dev-*, rate: 20/s, arrivals: poisson, size: 200B, qos: {qos},
        retry: 500ms}}
pipeline:
  - {{name: sink, on: cloud, reads: s}}
run: {{duration: 20s, seed: 3}}
"""


@pytest.mark.parametrize(("radio", "metro"), [("20%", 0), (0, "20%")],
                         ids=["first-link", "later-link"])
def test_qos1_over_a_lossy_link_delivers_everything(radio, metro) -> None:
    result = run(LOSSY.format(radio=radio, metro=metro, qos=1))
    table = result.tables["messages"]
    emitted = result.facts["emitted"]
    assert emitted > 3500
    assert not table["lost"].any()
    assert len(table["id"]) == emitted
    assert sorted(table["id"]) == list(range(emitted))  # each message once
    if radio:
        # the radio drops: a resent message waits at least one retry timeout, a fifth of them
        resent = np.mean(table["latency"] >= 0.5)
        assert resent == pytest.approx(0.2, abs=0.03)
    else:
        # over TCP a loss is a retransmission (one RTO, 200 ms), never an MQTT retry: a fifth
        # of the messages are retransmitted, and more wait behind them on the connection
        assert result.facts["retransmissions"]["gw>broker"] / emitted == pytest.approx(
            0.2, abs=0.03)
        assert np.mean(table["latency"] >= 0.5) == 0
        assert np.mean(table["latency"] >= 0.2) >= 0.2


def test_qos0_over_a_lossy_link_loses_its_share_and_records_it() -> None:
    result = run(LOSSY.format(radio="20%", metro=0, qos=0))
    table = result.tables["messages"]
    emitted = result.facts["emitted"]
    assert len(table["id"]) == emitted  # every message has a row, delivered or lost
    lost = table["lost"]
    share = lost.mean()
    assert abs(share - 0.2) < 4 * math.sqrt(0.2 * 0.8 / emitted)
    assert np.isnan(table["latency"][lost]).all()
    assert np.isnan(table["t_received"][lost]).all()
    assert all(sink is None for sink in table["sink"][lost])
    assert np.isfinite(table["latency"][~lost]).all()
    assert (table["latency"][~lost] >= 0.013).all()


# -- determinism -----------------------------------------------------------------------------

def _quickstart(seed: int | None = None, duration: str = "30s", **changes):
    overrides = [f"run.duration={duration}"] + ([f"run.seed={seed}"] if seed is not None else [])
    return simulate_point(load("quickstart", overrides=overrides).points[0], **changes)


def test_same_seed_gives_identical_tables() -> None:
    first, second = _quickstart(), _quickstart()
    for name in ("messages", "nodes", "links"):
        assert_tables_equal(first.tables[name], second.tables[name])
    assert first.facts == second.facts
    assert first.tables["messages"]["lost"].any()  # the comparison covered NaN rows


def test_another_seed_gives_different_tables() -> None:
    assert tables_differ(_quickstart(seed=7).tables["messages"],
                         _quickstart(seed=8).tables["messages"])


# -- the direct hand-over optimisation -------------------------------------------------------

def test_direct_handover_changes_nothing_on_the_quickstart() -> None:
    direct = _quickstart(duration="60s").tables["messages"]
    assert direct["id"].size > 10_000
    assert_tables_equal(direct,
                        _quickstart(duration="60s", direct_handover=False).tables["messages"])


def test_the_quickstart_broker_hands_over_directly_and_its_gateways_do_not() -> None:
    quick = model(QUICK_TEXT)
    assert all(broker.direct for broker in quick.brokers.values())
    assert not any(driver.direct for driver in quick.drivers.values())  # they host the filter


QUICK_TEXT = """
name: quick
topology: smart-city
workload: city-sensors
pipeline:
  - {name: filter, on: gateways, reads: city, writes: clean, cost: 150us}
  - {name: stats, on: cloud-1, reads: clean, cost: 300us}
run: {duration: 5s}
"""


def _iotcloud(model_name: str, size: str, overrides: list[str] = (), **changes):
    """A point of the catalog's broker study (seed 001, 5.1), shortened to 20 s."""
    experiment = load("iotcloud-brokers", overrides=["run.duration=20s", *overrides])
    (chosen,) = [p for p in experiment.points
                 if p.values == {"topology.nodes.2.broker.model": model_name,
                                 "workload.streams.0.size": size}]
    return simulate_point(chosen, **changes)


FOG = """
name: fog
topology:
  name: fog
  nodes:
    - {name: dev, kind: device, replicas: 40}
    - {name: gw, kind: gateway, replicas: 2, profile: vm.medium}
    - {name: broker, kind: broker, broker: {model: kafka-like, service_time: 1ms}}
    - {name: cloud, kind: cloud_vm}
  links:
    - {from: dev-*, to: gw-*, mode: spread, latency: 5ms, jitter: 1ms, bandwidth: 250kbit}
    - {from: gw-*, to: broker, latency: 20ms, jitter: 2ms, bandwidth: 20Mbit}
    - {from: broker, to: cloud, latency: 1ms, jitter: 100us, bandwidth: 1Gbit}
workload:
  name: w
  streams:
    - {name: s, sources: dev-*, rate: 5/s, arrivals: poisson, size: 2KB}
pipeline:
  - {name: sink, on: cloud, reads: s, cost: 100us}
run: {duration: 30s, seed: 1}
"""


def _direct_everywhere(text: str) -> None:
    built = model(text)
    assert all(driver.direct for driver in built.drivers.values())
    assert all(broker.direct for broker in built.brokers.values())


@pytest.mark.parametrize("jitter_on", ["radio", "cloud"])
def test_direct_handover_changes_nothing_with_a_kafka_like_broker_and_jitter_on_one_link(
        jitter_on: str) -> None:
    keep = {"radio": "jitter: 1ms", "cloud": "jitter: 100us"}[jitter_on]
    text = FOG
    for jitter in ("jitter: 1ms", "jitter: 2ms", "jitter: 100us"):
        if jitter != keep:
            text = text.replace(f", {jitter}", "")
    _direct_everywhere(text)
    assert_tables_equal(messages(text), messages(text, direct_handover=False))


def test_direct_handover_changes_nothing_with_jitter_and_a_kafka_like_broker() -> None:
    _direct_everywhere(FOG)
    assert_tables_equal(messages(FOG), messages(FOG, direct_handover=False))


def test_direct_handover_changes_nothing_with_two_brokers_sharing_a_subscription() -> None:
    def tables(direct: bool):
        return _iotcloud("kafka-like", "50KB", ["topology.links.1.jitter=0"],
                         direct_handover=direct).tables["messages"]

    assert_tables_equal(tables(True), tables(False))


KAFKA_STALL = """
name: stall
topology:
  name: stall
  profiles:
    one: {arch: amd64, cores: 1, clock: 2GHz, memory: 1GiB, speed: 1.0}
  nodes:
    - {name: dev, kind: device, replicas: 4}
    - {name: gw, kind: gateway, profile: one}
    - {name: broker, kind: broker, profile: one,
       broker: {model: kafka-like, service_time: 0, flush_interval: 1s, disk_bandwidth: 10Mbit}}
    - {name: cloud, kind: cloud_vm}
  links:
    - {from: dev-*, to: gw, latency: 1ms}
    - {from: gw, to: broker, latency: 1ms}
    - {from: broker, to: cloud, latency: 1ms, bandwidth: 100Mbit}
workload:
  name: bursts
  streams:
    - {name: s, sources: dev-*, rate: 3/s, arrivals: periodic, size: 20KB,
       shape: {kind: bursty, on: 1s, off: 3s, high: 10, low: 0.5}}
pipeline:
  - {name: sink, on: cloud, reads: s}
run: {duration: 12s, seed: 1, driver_cost: 0}
"""


def test_direct_handover_changes_nothing_when_a_kafka_flush_outlasts_its_interval() -> None:
    assert_tables_equal(messages(KAFKA_STALL), messages(KAFKA_STALL, direct_handover=False))


def test_a_kafka_like_broker_keeps_messages_in_order_through_long_flushes() -> None:
    table = messages(KAFKA_STALL, direct_handover=False)
    order = np.argsort(table["t_sent"], kind="stable")
    assert (np.diff(table["t_received"][order]) >= 0).all()


QOS1_LATER_LOSS = """
name: resend
topology:
  name: resend
  nodes:
    - {name: dev, kind: device, replicas: 20}
    - {name: gw, kind: gateway}
    - {name: sw, kind: switch}
    - {name: broker, kind: broker}
    - {name: cloud, kind: cloud_vm}
  links:
    - {from: dev-*, to: gw, latency: 1ms}
    - {from: gw, to: sw, latency: 1ms, bandwidth: 2Mbit}
    - {from: sw, to: broker, latency: 1ms, loss: 30%}
    - {from: broker, to: cloud, latency: 1ms}
workload:
  name: w
  streams:
    - {name: s, sources: dev-*, rate: 20/s, arrivals: poisson, size: 200B, qos: 1, retry: 10ms}
pipeline:
  - {name: sink, on: cloud, reads: s}
run: {duration: 10s, seed: 1}
"""


def test_qos1_resends_from_the_gateway_without_driver_cost_match_event_by_event() -> None:
    text = QOS1_LATER_LOSS.replace("seed: 1}", "seed: 1, driver_cost: 0}")
    assert_tables_equal(messages(text), messages(text, direct_handover=False))


def test_direct_handover_changes_nothing_with_qos1_resends_through_the_gateway() -> None:
    assert_tables_equal(messages(QOS1_LATER_LOSS), messages(QOS1_LATER_LOSS,
                                                            direct_handover=False))


# -- the bucketed event queue ---------------------------------------------------------------

def _event_order(env) -> list[tuple[float, int]]:
    """The order an environment processes a seeded storm of events in: delays that tie, cross
    bucket bounds or reach far ahead, both priorities, events scheduled while others run."""
    rng = random.Random(4)
    delays = [0.0, 0.0, 1 / 64, 1 / 128, 1e-9, 0.001, 0.0156, 0.5, 3.0, 64.0, 0.1 + 0.2]
    order: list[tuple[float, int]] = []

    def fire(event) -> None:
        order.append((env.now, event.value))
        if len(order) < 20_000:
            for _ in range(rng.choice((0, 1, 2, 2))):
                child = Event(env)
                child._ok, child._value = True, rng.randrange(1 << 30)
                child.callbacks.append(fire)
                env.schedule(child, rng.choice((URGENT, NORMAL)), rng.choice(delays))

    for i in range(50):
        first = Event(env)
        first._ok, first._value = True, i
        first.callbacks.append(fire)
        env.schedule(first, NORMAL, rng.choice(delays))
    env.run(until=30.5)
    env.run()
    return order


@pytest.mark.parametrize("bucketed", [True, False])
def test_the_models_environment_processes_events_in_simpys_order(bucketed: bool) -> None:
    plain = _event_order(simpy.Environment())
    assert len(plain) > 20_000
    assert _event_order(Environment(bucketed)) == plain


@pytest.mark.parametrize("change", ["bucketed_queue", "in_place"])
def test_the_event_shortcuts_change_nothing_on_the_quickstart(change: str) -> None:
    fast = _quickstart(duration="60s")
    plain = _quickstart(duration="60s", **{change: False})
    for name in ("messages", "nodes", "links"):
        assert_tables_equal(fast.tables[name], plain.tables[name])
    assert fast.facts == plain.facts


def test_a_run_pauses_the_garbage_collector_and_gives_it_back() -> None:
    seen = []
    simulated = model(QUICK_TEXT)
    simulated.env.process(_record_collector(simulated.env, seen))
    simulated.run()
    assert seen == [False] and gc.isenabled()


def _record_collector(env, seen: list):
    yield env.timeout(1)
    seen.append(gc.isenabled())


MOBILE = """
name: mobile
topology: metro-10k
workload:
  name: telemetry
  streams:
    - {name: telemetry, sources: sensor-*, rate: 1/2s, size: 200B, channel: exclusive}
pipeline:
  - {name: track, follow: users, on: gateways, reads: telemetry, cost: 50us, window: {size: 5s}}
scenario:
  mobility:
    model: {kind: random_waypoint, speed: [5, 25], pause: [0s, 5s]}
    radio: {range: 200, latency: [2ms, 10ms], bandwidth: [10Mbit, 1Mbit], loss: 1%}
    handover: {hysteresis: 20, min_dwell: 2s}
    record: 10s
  policy: {operator: track, threshold: 10ms, hysteresis: 2ms, capacity: 20, fallback: [vm-1]}
  migration: {strategy: pause_transfer, launch: 500ms}
run: {duration: 60s, seed: 3}
"""


def test_the_event_shortcuts_change_nothing_with_moving_users_and_migrations() -> None:
    def simulate(**changes):
        return run(MOBILE, ["topology.nodes.0.replicas=400"], **changes)

    fast = simulate()
    assert len(fast.tables["migrations"]["id"]) > 50
    assert fast.facts["handovers"] > 100
    for plain in (simulate(bucketed_queue=False), simulate(in_place=False)):
        for name in plain.tables:
            assert_tables_equal(fast.tables[name], plain.tables[name])
        assert fast.facts == plain.facts


# -- shared subscriptions and channels -------------------------------------------------------

FANOUT = """
name: fanout
topology:
  name: fanout
  nodes:
    - {{name: dev, kind: device, replicas: 6}}
    - {{name: gw, kind: gateway, replicas: 2}}
    - {{name: broker, kind: broker}}
    - {{name: vm, kind: cloud_vm, replicas: 3}}
  links:
    - {{from: dev-*, to: gw-*, mode: spread, latency: 1ms}}
    - {{from: gw-*, to: broker, latency: 5ms}}
    - {{from: broker, to: vm-*, latency: 1ms}}
workload:
  name: w
  streams:
    - {{name: s, sources: dev-*, rate: 10/s, arrivals: poisson, size: 100B, channel: {channel}}}
pipeline:
{pipeline}
run: {{duration: 10s, seed: 2}}
"""


def _fanout(pipeline: str, channel: str = "shared") -> str:
    return FANOUT.format(pipeline=pipeline, channel=channel)


def test_shared_subscription_delivers_each_message_once_in_turn() -> None:
    result = run(_fanout("  - {name: spout, on: vm-*, reads: s}"))
    table = result.tables["messages"]
    assert len(table["id"]) == result.facts["emitted"]
    assert len(set(table["id"])) == len(table["id"])
    counts = [int((table["sink"] == f"vm-{i}").sum()) for i in (1, 2, 3)]
    assert sum(counts) == result.facts["emitted"]
    assert max(counts) - min(counts) <= 1
    assert result.facts["brokers"] == {"broker": result.facts["emitted"]}


def test_two_operators_reading_one_stream_each_get_every_message() -> None:
    result = run(_fanout("  - {name: a, on: vm-1, reads: s}\n"
                         "  - {name: b, on: vm-2, reads: s}"))
    table = result.tables["messages"]
    emitted = result.facts["emitted"]
    assert (table["sink"] == "vm-1").sum() == (table["sink"] == "vm-2").sum() == emitted
    assert result.facts["brokers"] == {"broker": emitted}  # one publish, two copies out


def test_a_local_operator_reads_its_own_gateways_devices_without_the_broker() -> None:
    result = run(_fanout("  - {name: local, on: gateways, reads: s}"))
    table = result.tables["messages"]
    assert len(table["id"]) == result.facts["emitted"]
    gateway_of = {f"dev-{i}": f"gw-{(i - 1) // 3 + 1}" for i in range(1, 7)}
    assert all(gateway_of[src] == sink for src, sink in zip(table["source"], table["sink"],
                                                             strict=True))
    assert result.facts["brokers"] == {"broker": 0}


def test_only_a_local_operators_output_crosses_the_broker() -> None:
    result = run(_fanout("  - {name: filter, on: gateways, reads: s, writes: t}\n"
                         "  - {name: sink, on: vm-*, reads: t}"))
    table = result.tables["messages"]
    emitted = result.facts["emitted"]
    assert len(table["id"]) == emitted
    assert result.facts["brokers"] == {"broker": emitted}  # t, not s


@pytest.mark.parametrize(("channel", "topics"), [
    ("shared", {"s/gw-1", "s/gw-2"}),
    ("exclusive", {f"s/gw-{(i - 1) // 3 + 1}/dev-{i}" for i in range(1, 7)}),
])
def test_channel_gives_one_topic_per_gateway_or_per_device(channel: str, topics: set) -> None:
    built = model(_fanout("  - {name: spout, on: vm-*, reads: s}", channel))
    assert {source.topic for source in built.sources} == topics
    built.run()
    assert built.brokers["broker"].topics == topics  # the spout reads all through it


def test_the_broker_knows_the_topics_that_crossed_it() -> None:
    built = model(_fanout("  - {name: spout, on: vm-*, reads: s}", "exclusive"))
    built.run()
    assert len(built.brokers["broker"].topics) == 6


# -- broker profiles (seed 001, section 5.1) -------------------------------------------------

def test_a_kafka_like_broker_shows_latency_spikes_a_rabbitmq_like_one_does_not() -> None:
    rabbit = _iotcloud("rabbitmq-like", "50KB").tables["messages"]["latency"]
    kafka = _iotcloud("kafka-like", "50KB").tables["messages"]["latency"]
    assert rabbit.size == kafka.size == 4 * 50 * 20
    assert np.median(kafka) == pytest.approx(np.median(rabbit), rel=0.05)
    assert np.percentile(kafka, 99) > 10 * np.percentile(rabbit, 99)
    assert kafka.max() > 10 * rabbit.max()
    # rabbitmq-like latency hardly varies (seed 001, 5.2)
    assert rabbit.max() < 1.2 * np.median(rabbit)


def test_kafka_like_spikes_grow_with_message_size() -> None:
    small = _iotcloud("kafka-like", "1KB").tables["messages"]["latency"].max()
    large = _iotcloud("kafka-like", "200KB").tables["messages"]["latency"].max()
    assert large > 10 * small


# -- selectivity -----------------------------------------------------------------------------

SELECTIVE = """
name: selective
topology:
  name: selective
  nodes:
    - {{name: dev, kind: device}}
    - {{name: gw, kind: gateway}}
    - {{name: broker, kind: broker}}
    - {{name: cloud, kind: cloud_vm}}
  links:
    - {{from: dev, to: gw, latency: 1ms}}
    - {{from: gw, to: broker, latency: 1ms}}
    - {{from: broker, to: cloud, latency: 1ms}}
workload:
  name: w
  streams:
    - {{name: s, sources: dev, rate: 10/s, arrivals: periodic}}
pipeline:
{pipeline}
run: {{duration: 10s, seed: 4}}
"""


def _selective(pipeline: str):
    """The delivered rows; the others are the filtered ones, a row each."""
    result = run(SELECTIVE.format(pipeline=pipeline))
    assert result.facts["emitted"] == 100
    messages = result.tables["messages"]
    delivered = messages["state"] == "delivered"
    passed = set(messages["id"][delivered])
    assert sorted(messages["id"][~delivered]) == [i for i in range(100) if i not in passed]
    assert set(messages["state"][~delivered]) <= {"filtered"}
    return {name: values[delivered] for name, values in messages.items()}


def test_a_filter_with_selectivity_a_quarter_passes_every_fourth_message() -> None:
    table = _selective("  - {name: f, on: gw, reads: s, writes: t, selectivity: 0.25}\n"
                       "  - {name: sink, on: cloud, reads: t}")
    assert list(table["id"]) == list(range(3, 100, 4))


def test_a_sink_with_selectivity_a_quarter_records_every_fourth_message() -> None:
    table = _selective("  - {name: sink, on: cloud, reads: s, selectivity: 0.25}")
    assert list(table["id"]) == list(range(3, 100, 4))


def test_selectivity_two_doubles_each_message() -> None:
    table = _selective("  - {name: f, on: gw, reads: s, writes: t, selectivity: 2}\n"
                       "  - {name: sink, on: cloud, reads: t}")
    assert sorted(table["id"]) == sorted(list(range(100)) * 2)


def test_a_filter_with_selectivity_a_tenth_passes_every_tenth_message() -> None:
    table = _selective("  - {name: f, on: gw, reads: s, writes: t, selectivity: 0.1}\n"
                       "  - {name: sink, on: cloud, reads: t}")
    assert list(table["id"]) == list(range(9, 100, 10))


# -- rate shapes -----------------------------------------------------------------------------

SHAPED = """
name: shaped
topology:
  name: shaped
  nodes:
    - {{name: dev, kind: device, replicas: 10}}
    - {{name: gw, kind: gateway}}
  links:
    - {{from: dev-*, to: gw}}
workload:
  name: w
  streams:
    - {{name: s, sources: dev-*, rate: {rate}, arrivals: {arrivals}, shape: {shape}}}
pipeline:
  - {{name: sink, on: gw, reads: s}}
run: {{duration: {duration}, seed: 9}}
"""


def _sent(rate: str, shape: str, duration: str, arrivals: str = "poisson") -> np.ndarray:
    text = SHAPED.format(rate=rate, shape=shape, duration=duration, arrivals=arrivals)
    return messages(text)["t_sent"]


@pytest.mark.parametrize("arrivals", ["poisson", "periodic"])
def test_bursty_stream_sends_high_in_bursts_and_low_between(arrivals: str) -> None:
    sent = _sent("10/s", "{kind: bursty, on: 2s, off: 8s, high: 5, low: 0.5}", "100s",
                 arrivals)
    on = (sent % 10.0) < 2.0
    on_rate = on.sum() / (10 * 10 * 2.0)  # per device per second over 10 bursts
    off_rate = (~on).sum() / (10 * 10 * 8.0)
    assert on_rate == pytest.approx(50, rel=0.08)
    assert off_rate == pytest.approx(5, rel=0.08)


def test_periodic_constant_stream_sends_at_exact_intervals() -> None:
    text = SHAPED.format(rate="4/s", shape="constant", duration="10s", arrivals="periodic")
    table = messages(text)
    for device in {f"dev-{i}" for i in range(1, 11)}:
        sent = np.sort(table["t_sent"][table["source"] == device])
        assert len(sent) in (40, 41) and sent[0] < 0.25
        assert np.allclose(np.diff(sent), 0.25, rtol=0, atol=1e-9)


def test_diurnal_stream_peaks_where_configured() -> None:
    # a 240 s day: the 14:00 peak falls at 140 s
    sent = _sent("5/s", "{kind: diurnal, day: 240s, peaks: [14h], width: 2h, floor: 0.1, "
                 "height: 2}", "240s")
    counts, _ = np.histogram(sent, bins=24, range=(0, 240))
    assert np.argmax(counts) in (13, 14)
    assert counts.max() > 8 * counts.min()


def test_bimodal_stream_peaks_at_eight_and_eighteen() -> None:
    sent = _sent("5/s", "{kind: bimodal, day: 240s, width: 1h, floor: 0.1, height: 2}",
                 "240s")
    counts, _ = np.histogram(sent, bins=24, range=(0, 240))
    morning, evening = np.argmax(counts[:12]), 12 + np.argmax(counts[12:])
    assert morning in (7, 8) and evening in (17, 18)
    assert counts[12] < counts[morning] / 4  # a trough at noon


def test_sawtooth_stream_ramps_up_within_each_period() -> None:
    sent = _sent("5/s", "{kind: sawtooth, period: 20s, low: 0.2, high: 1.8}", "200s")
    phase = sent % 20.0
    first, second = (phase < 10).sum(), (phase >= 10).sum()
    # mean factor 0.6 in the first half, 1.4 in the second
    assert second / first == pytest.approx(1.4 / 0.6, rel=0.1)


def test_a_stream_starts_when_told() -> None:
    text = SHAPED.format(rate="5/s", shape="constant", duration="10s", arrivals="poisson")
    text = text.replace("shape: constant}", "shape: constant, start: 4s}")
    sent = messages(text)["t_sent"]
    assert sent.min() >= 4.0
    assert len(sent) == pytest.approx(10 * 5 * 6, rel=0.15)
