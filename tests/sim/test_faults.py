"""scenario.faults on sim: each fault kind at exact times in the tables, the faults table, and
the schedule's validation (no containers)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from experiments.loader import load
from experiments.runner import run_experiment
from experiments.schema import TABLES, conform
from tests.foundation.helpers import assert_tables_equal, point, run
from topologies.errors import SpecError

# One device, its gateway, a broker and a cloud sink; no jitter, no loss, no queueing at
# 10 messages/s: every message's times follow from the path (see PATH_S).
CHAIN = """
name: faults
topology:
  name: chain
  nodes:
    - {name: dev, kind: device}
    - {name: gw, kind: gateway, profile: rpi4}
    - {name: broker, kind: broker, profile: vm.small, broker: {service_time: BROKER_S}}
    - {name: cloud, kind: cloud_vm, profile: vm.large}
  links:
    - {from: dev, to: gw, latency: 5ms, bandwidth: 1Mbit}
    - {from: gw, to: broker, latency: 20ms, bandwidth: 10Mbit}
    - {from: broker, to: cloud, latency: 1ms, bandwidth: 100Mbit}
workload:
  name: one
  streams:
    - {name: s, sources: dev, rate: 10/s, arrivals: periodic, size: 1250B, qos: QOS}
pipeline:
  - {name: sink, on: cloud, reads: s, cost: 2ms}
scenario:
  faults: FAULTS
run: {duration: 6s, seed: 5, driver_cost: 1ms, drain: 5s}
"""
BITS = 1250 * 8
RADIO_S = BITS / 1e6 + 0.005  # dev -> gw
DRIVER_S = 1e-3 / 0.45  # on a Pi 4 core
METRO_S = BITS / 10e6 + 0.020  # gw -> broker
BROKER_S = 300e-6
CLOUD_S = BITS / 100e6 + 0.001 + 2e-3  # broker -> cloud, then the sink's cost
PATH_S = RADIO_S + DRIVER_S + METRO_S + BROKER_S + CLOUD_S


def text(faults: str, qos: int = 0, broker_s: float = BROKER_S) -> str:
    return (CHAIN.replace("FAULTS", faults).replace("QOS", str(qos))
            .replace("BROKER_S", f"{broker_s * 1e6:g}us"))


def simulate(faults: str, **kwargs):
    result = run(text(faults, **kwargs))
    conform(result.tables)  # the tables pass the schema's checks
    return result


def messages(result) -> dict[str, np.ndarray]:
    table = result.tables["messages"]
    assert len(table["id"]) == result.facts["emitted"]  # a row per message, none forgotten
    return table


def test_without_faults_every_message_takes_the_path_time() -> None:
    table = messages(simulate("[]"))
    assert not table["lost"].any()
    assert np.allclose(table["latency"], PATH_S, atol=1e-9)
    assert len(run(text("[]")).tables.get("faults", {}).get("kind", [])) == 0


def test_a_crashed_gateway_loses_its_devices_readings_exactly_while_down() -> None:
    result = simulate("[{at: 2s, crash: gw, for: 1s}]")
    table = messages(result)
    at_gw = table["t_sent"] + RADIO_S
    # Lost: what reached the gateway while it was down, and what it was converting at 2 s.
    lost = (at_gw + DRIVER_S > 2.0) & (at_gw < 3.0)
    assert lost.sum() == 10
    assert np.array_equal(table["lost"], lost)
    assert np.allclose(table["latency"][~lost], PATH_S, atol=1e-9)  # none slowed, after too
    assert table["sink"][lost].tolist() == [None] * 10
    faults = result.tables["faults"]
    assert (list(faults["kind"]), list(faults["target"]), list(faults["t_start"]),
            list(faults["t_end"]), list(faults["params"])) == (
        ["crash"], ["gw"], [2.0], [3.0], ["{}"])
    nodes = result.tables["nodes"]
    gw = nodes["node"] == "gw"
    down = {float(t) for t in nodes["t"][gw & ~nodes["up"]]}
    assert down == {3.0}  # the one sample interval (2, 3] wholly inside the crash
    assert (nodes["cpu"][gw & ~nodes["up"]] == 0).all()


def test_a_gateway_crashed_for_good_loses_everything_after() -> None:
    result = simulate("[{at: 2s, crash: gw}]")
    table = messages(result)
    assert np.array_equal(table["lost"], table["t_sent"] + RADIO_S + DRIVER_S > 2.0)
    assert np.isnan(result.tables["faults"]["t_end"][0])


def test_qos1_to_a_broker_crashed_for_good_is_lost_at_the_end() -> None:
    table = messages(simulate("[{at: 2s, crash: broker}]", qos=1))
    at_broker = table["t_sent"] + RADIO_S + DRIVER_S + METRO_S
    assert np.array_equal(table["lost"], at_broker >= 2.0)  # resent until the run ended


def test_a_crashed_sink_drops_what_it_held_and_serves_again_after() -> None:
    table = messages(simulate("[{at: 2s, crash: cloud, for: 1s}]"))
    at_cloud = table["t_sent"] + PATH_S - 2e-3
    lost = (at_cloud + 2e-3 > 2.0) & (at_cloud < 3.0)
    assert lost.sum() == 10
    assert np.array_equal(table["lost"], lost)


def test_a_crash_loses_a_window_operators_open_window() -> None:
    windowed = text("[{at: 2500ms, crash: cloud, for: 1s}]").replace(
        "cost: 2ms}", "cost: 2ms, window: {size: 1s}}")
    result = run(windowed)
    conform(result.tables)
    windows = result.tables["windows"]
    # Window 2 had five events when the node went down at 2.5 s: gone with its state; window
    # 3 counts only what came after 3.5 s.
    assert list(windows["window"]) == [0, 1, 3, 4, 5]
    assert list(windows["count"]) == [10, 10, 5, 10, 10]
    assert messages(result)["lost"].sum() == 10


def test_a_partition_loses_qos0_and_delays_qos1_until_it_heals() -> None:
    fault = "[{at: 2s, partition: [gw, [broker, cloud]], for: 1s}]"
    table = messages(simulate(fault))
    at_broker = table["t_sent"] + RADIO_S + DRIVER_S + METRO_S
    crossing = (at_broker >= 2.0) & (at_broker < 3.0)
    assert crossing.sum() == 10
    assert np.array_equal(table["lost"], crossing)
    table = messages(simulate(fault, qos=1))
    assert not table["lost"].any()
    at_broker = table["t_sent"] + RADIO_S + DRIVER_S + METRO_S
    crossing = (at_broker >= 2.0) & (at_broker < 3.0)
    # QoS 1: the gateway sends again after its 1 s retry, until the partition has healed.
    assert (table["t_received"][crossing] > 3.0).all()
    assert np.allclose(table["latency"][crossing], 1.0 + PATH_S, atol=1e-9)
    # A resend and a new message a second younger reach the link together: one waits for
    # the other's serialisation.
    others = table["latency"][~crossing]
    assert (others >= PATH_S - 1e-9).all() and (others <= PATH_S + BITS / 10e6 + 1e-9).all()


def test_a_delay_adds_its_latency_to_what_crosses_the_link_meanwhile() -> None:
    result = simulate("[{at: 2s, delay: {from: gw, to: broker}, latency: 50ms, for: 1s}]")
    table = messages(result)
    onto_link = table["t_sent"] + RADIO_S + DRIVER_S
    delayed = (onto_link >= 2.0) & (onto_link < 3.0)
    assert delayed.sum() == 10
    assert np.allclose(table["latency"][delayed], PATH_S + 0.05, atol=1e-9)
    assert np.allclose(table["latency"][~delayed], PATH_S, atol=1e-9)
    assert json.loads(result.tables["faults"]["params"][0]) == {"latency": 0.05, "jitter": 0.0}


def test_a_loss_drops_what_crosses_the_link_meanwhile() -> None:
    table = messages(simulate("[{at: 2s, loss: {from: dev, to: gw}, rate: 100%, for: 1s}]"))
    sent = table["t_sent"]
    assert np.array_equal(table["lost"], (sent >= 2.0) & (sent < 3.0))
    half = messages(simulate("[{at: 1s, loss: {from: dev, to: gw}, rate: 50%, for: 4s}]"))
    during = (half["t_sent"] >= 1.0) & (half["t_sent"] < 5.0)
    assert not half["lost"][~during].any()
    assert 10 <= half["lost"][during].sum() <= 30  # 40 messages at 50 %


def test_slow_scales_the_nodes_processing_meanwhile() -> None:
    table = messages(simulate("[{at: 2s, slow: gw, factor: 4, for: 1s}]"))
    at_gw = table["t_sent"] + RADIO_S
    slowed = (at_gw >= 2.0) & (at_gw < 3.0)
    assert slowed.sum() == 10
    assert np.allclose(table["latency"][slowed], PATH_S + 3 * DRIVER_S, atol=1e-9)
    assert np.allclose(table["latency"][~slowed], PATH_S, atol=1e-9)


# The broker serves in 90 ms of the 100 ms between messages: one is nearly always in service.
SLOW_BROKER_S = 0.09


def test_a_broker_restart_loses_qos0_in_flight_and_queued() -> None:
    table = messages(simulate("[{at: 2s, restart: broker, for: 500ms}]", broker_s=SLOW_BROKER_S))
    at_broker = table["t_sent"] + RADIO_S + DRIVER_S + METRO_S
    lost = table["lost"]
    sent_to_it = (at_broker >= 2.0) & (at_broker < 2.5)
    assert sent_to_it.sum() == 5
    assert lost[sent_to_it].all()  # published while it was down
    held = lost & (at_broker < 2.0)
    assert held.sum() == 1  # the one it was serving when it went down
    assert lost.sum() == 6


def test_qos1_with_persistent_sessions_loses_nothing_through_a_broker_restart() -> None:
    result = simulate("[{at: 2s, restart: broker, for: 500ms}]", qos=1, broker_s=SLOW_BROKER_S)
    table = messages(result)
    assert not table["lost"].any()
    at_broker = table["t_sent"] + RADIO_S + DRIVER_S + METRO_S
    # The message in service at 2 s was kept and is served once the broker is back.
    kept = (at_broker < 2.0) & (table["t_received"] > 2.5)
    assert kept.sum() == 1
    assert (table["t_received"][(at_broker >= 2.0) & (at_broker < 2.5)] > 2.5).all()
    assert list(result.tables["faults"]["t_end"]) == [2.5]


def test_faults_are_deterministic() -> None:
    faults = ("[{at: 1s, loss: {from: dev, to: gw}, rate: 30%, for: 2s},"
              " {at: 2s, delay: {from: dev, to: gw}, latency: 10ms, jitter: 3ms, for: 2s}]")
    a, b = simulate(faults), simulate(faults)
    assert a.tables["messages"]["lost"].any()
    for name in ("messages", "nodes", "links", "faults"):
        assert_tables_equal({k: np.asarray(v) for k, v in a.tables[name].items()},
                            {k: np.asarray(v) for k, v in b.tables[name].items()})


# -- validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("faults", "message"), [
    ("[{at: 1s, crash: gw-9, for: 1s}]",
     "scenario.faults[0].crash: a node name or pattern of topology chain (got 'gw-9')"),
    ("[{at: 1s, restart: gw}]",
     "scenario.faults[0].restart: nodes a restart applies to (broker), but gw is a gateway"),
    ("[{at: 1s, slow: dev, factor: 2, for: 1s}]",
     "scenario.faults[0].slow: nodes a slow applies to (gateway, broker, cloud_vm, "
     "coordinator), but dev is a device"),
    ("[{at: 1s, delay: {from: dev, to: cloud}, latency: 5ms, for: 1s}]",
     "scenario.faults[0].delay: links of topology chain (no link joins"),
    ("[{at: 1s, crash: gw, for: 2s}, {at: 2s, slow: g*, factor: 2, for: 1s}]",
     "scenario.faults[1]: a fault that does not overlap scenario.faults[0] (crash of gw from "
     "1 s to 3 s) on gw"),
    ("[{at: 1s, crash: gw}, {at: 5s, crash: gw, for: 500ms}]",
     "scenario.faults[1]: a fault that does not overlap scenario.faults[0] (crash of gw from "
     "1 s for good)"),
    ("[{at: 7s, crash: gw}]", "scenario.faults[0].at: a time before the run ends "
     "(run.duration: 6 s) (got 7.0)"),
    ("[{at: 5s, partition: [gw, broker], for: 2s}]", "scenario.faults[0].for: a duration that "
     "heals the fault by the run's end (5 s + 2 s > run.duration 6 s)"),
    ("[{at: 1s, partition: [[gw, broker], broker], for: 1s}]",
     "scenario.faults[0].partition: two groups with no node in common, but broker is in both"),
    ("[{at: 1s, crash: gw, slow: gw}]", "scenario.faults[0]: a fault with exactly one of the "
     "keys crash, partition, delay, loss, slow, restart"),
    ("[{at: 1s, slow: gw, factor: 0.5, for: 1s}]",
     "scenario.faults[0].factor: more than 1 (got 0.5)"),
    ("[{at: 1s, partition: [gw, broker]}]",
     "scenario.faults[0].for: a value: this field is required"),
])
def test_a_bad_schedule_is_refused_naming_the_field(faults: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        point(text(faults))
    assert message in str(caught.value)


def test_faults_on_different_links_or_times_are_accepted() -> None:
    point(text("[{at: 1s, crash: gw, for: 1s}, {at: 2s, crash: gw, for: 1s},"
               " {at: 1s, delay: {from: gw, to: broker}, latency: 5ms, for: 3s},"
               " {at: 1s, loss: {from: gw, to: broker}, rate: 1%, for: 3s}]"))


@pytest.mark.parametrize("backend", ["emu", "hybrid"])
def test_emu_and_hybrid_refuse_what_they_cannot_inject_before_anything_starts(
        backend: str) -> None:
    # emu.features.faults injects the other kinds; a device's link runs inside its gateway's agent.
    with pytest.raises(SpecError, match="no delay of a device's link on " + backend):
        point(text("[{at: 1s, delay: {from: dev, to: gw}, latency: 5ms, for: 1s}]"),
              [f"run.backend={backend}"])


def test_a_run_writes_the_faults_table(tmp_path) -> None:
    experiment = load("faults-crash")
    (outcome,) = run_experiment(experiment, tmp_path, sweep_id="faults")
    assert outcome.error is None
    table = pq.read_table(outcome.folder / "faults.parquet")
    assert table.schema.remove_metadata().equals(TABLES["faults"])
    rows = table.to_pylist()
    assert [(r["kind"], r["target"], r["t_start"], r["t_end"]) for r in rows] == [
        ("crash", "gw-2", 30.0, 60.0), ("partition", "gw-1|broker-1,cloud-1", 70.0, 90.0),
        ("delay", "gw-3,gw-4>broker-1", 100.0, 120.0), ("slow", "cloud-1", 130.0, 150.0),
        ("restart", "broker-1", 160.0, 162.0)]
    messages = pq.read_table(outcome.folder / "messages.parquet").to_pandas()
    from_gw2 = messages["source"].isin([f"sensor-{i}" for i in range(51, 101)])
    crashed = messages["t_sent"].between(30.01, 59.99)
    # Sensors 51-100 reach gw-2 (the topology spreads 200 sensors over 4 gateways).
    assert messages["lost"][from_gw2 & crashed].all()
    after = from_gw2 & messages["t_sent"].between(62.0, 69.0)
    assert after.sum() > 100 and messages["lost"][after].mean() < 0.02  # the radio's 0.5 %
