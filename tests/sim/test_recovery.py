"""scenario.recovery on sim: a crashed gateway's operator noticed when ZooKeeper expires its
agent's session, re-placed on the live node nearest its input and restored from its last
checkpoint; the recoveries table's figures (no containers)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.loader import load
from experiments.schema import TABLES, conform
from sim.model import Model
from tests.foundation.helpers import point, settings
from workloads.recovery import ZK_TICK_S, expiry

# A device linked to gw-2 (it survives gw-1's crash), a count on gw-1 reading it through the
# broker, a cloud VM further away: 10 readings/s, periodic, no jitter anywhere.
CHAIN = """
name: recovery
topology:
  name: chain
  nodes:
    - {name: dev, kind: device}
    - {name: gw, kind: gateway, replicas: 2, profile: rpi4}
    - {name: broker, kind: broker, profile: vm.small}
    - {name: cloud, kind: cloud_vm, profile: vm.large}
  links:
    - {from: dev, to: gw-2, latency: 5ms, bandwidth: 1Mbit}
    - {from: gw-*, to: broker, latency: 20ms, bandwidth: 10Mbit}
    - {from: broker, to: cloud, latency: 1ms, bandwidth: 100Mbit}
workload:
  name: one
  streams:
    - {name: s, sources: dev, rate: 10/s, arrivals: periodic, size: 1250B, qos: QOS}
pipeline:
  - OPERATOR
scenario:
  faults: [{at: CRASH, crash: gw-1}]
  RECOVERY
run: {duration: 16s, seed: 5, driver_cost: 1ms, drain: 5s}
"""
COUNT = "{name: count, on: gw-1, reads: s, cost: 2ms, window: {size: 10s, jitter: 0s}, " \
        "checkpoint: 4s}"
SINK = "{name: sink, on: gw-1, reads: s, cost: 2ms}"
SESSION_S = 2.0
# Checkpoints every 4 s half a period off the grid (at 2, 6, 10 s): the crash 1.5 s after
# the one at 6 s, 15 readings of a 10/s stream.
CRASH_S = 7.5
RECOVERY = f"recovery: {{session_timeout: {SESSION_S:g}s}}"


def text(qos: int = 1, operator: str = COUNT, recovery: str = RECOVERY,
         crash: float = CRASH_S) -> str:
    return (CHAIN.replace("QOS", str(qos)).replace("OPERATOR", operator)
            .replace("RECOVERY", recovery).replace("CRASH", f"{crash:g}s"))


def simulate(yaml: str) -> tuple[Model, dict]:
    """The model (for its drawn phases) and its conformed tables as pandas frames."""
    run_point = point(yaml)
    model = Model(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                  settings(run_point))
    result = model.run()
    tables = conform(result.tables)  # every table passes the schema's checks
    assert len(result.tables["messages"]["id"]) == result.facts["emitted"]  # none forgotten
    return model, {name: table.to_pandas() for name, table in tables.items()}


def only_row(tables: dict) -> dict:
    rows = tables["recoveries"].to_dict("records")
    assert len(rows) == 1
    return rows[0]


@pytest.fixture(scope="module")
def qos1():
    return simulate(text())


def test_detection_is_zookeepers_expiry_for_the_drawn_phases(qos1) -> None:
    model, tables = qos1
    row = only_row(tables)
    recovery = model.features["recovery"]
    phase, tick_phase = recovery.phase["gw-1"], recovery.tick_phase
    assert 0 <= phase < SESSION_S / 3 and 0 <= tick_phase < ZK_TICK_S
    assert row["t_crash"] == CRASH_S
    assert row["t_detected"] == expiry(CRASH_S, SESSION_S, phase, ZK_TICK_S, tick_phase)
    assert CRASH_S + 2 / 3 * SESSION_S <= row["t_detected"] <= CRASH_S + SESSION_S + ZK_TICK_S
    assert row["detect"] == pytest.approx(row["t_detected"] - CRASH_S)


def test_the_count_goes_on_from_its_checkpoint_on_the_nearest_live_node(qos1) -> None:
    _, tables = qos1
    row = only_row(tables)
    assert row["node"] == "gw-1" and row["operator"] == "count"
    assert row["target"] == "gw-2"  # 5 ms from the device; the cloud VM is 46 ms away
    messages = tables["messages"]
    assert not messages["lost"].any() and row["lost"] == 0  # QoS 1: the broker held it all
    at_gw1 = messages[messages["sink"] == "gw-1"]["t_received"]
    # The checkpoint at 6 s: window 0's count then; rolled back: what gw-1 processed after it.
    at_checkpoint = int((at_gw1 <= 6.0).sum())
    assert row["t_checkpoint"] == 6.0
    assert row["rolled_back"] == int(((at_gw1 > 6.0) & (at_gw1 <= CRASH_S)).sum()) == 15
    assert row["state_bytes"] == 1024 + 64 * at_checkpoint  # state_base + per event
    # Held: every reading that reached the broker between the crash and the resume, late on
    # gw-2 (the others take the path's 60 ms); at least those sent until the detection.
    at_gw2 = messages[messages["sink"] == "gw-2"]
    assert row["held"] == int((at_gw2["latency"] > 0.1).sum())
    assert row["held"] >= int((at_gw2["t_sent"] < row["t_detected"]).sum()) > 15
    # Restored: a command, the checkpoint's chunk through the store, its load, a command.
    command = 2 * 0.020 + 10e-3
    assert row["t_recovered"] > row["t_detected"] + 2 * command + 20e-3 + 0.020
    assert row["t_recovered"] == pytest.approx(at_gw2["t_received"].min())
    assert row["recover"] == pytest.approx(row["t_recovered"] - CRASH_S)
    windows = tables["windows"]
    assert list(windows["window"]) == [0, 1] and set(windows["node"]) == {"gw-2"}
    (count,) = windows.loc[windows["window"] == 0, "count"]
    in_window = int((messages["t_received"] < 10.0).sum())
    # Window 0 counts from the checkpoint on: all of its readings but those rolled back.
    assert count == in_window - row["rolled_back"]
    assert count > int((at_gw2["t_received"] < 10.0).sum())  # not from 0


def test_qos0_input_meanwhile_is_lost() -> None:
    _, tables = simulate(text(qos=0))
    row = only_row(tables)
    lost = int(tables["messages"]["lost"].sum())
    assert row["held"] == 0
    assert row["lost"] == lost > 10  # about the seconds from the crash to the resume, at 10/s
    assert row["rolled_back"] == 15


def test_with_no_live_candidate_nothing_is_restored() -> None:
    _, tables = simulate(text(recovery="recovery: {session_timeout: 2s, to: [gw-1]}"))
    row = only_row(tables)
    assert row["target"] == ""
    assert math.isnan(row["t_recovered"]) and math.isnan(row["recover"])
    assert math.isnan(row["t_checkpoint"])
    assert row["state_bytes"] is None or math.isnan(row["state_bytes"])
    assert not math.isnan(row["t_detected"])
    messages = tables["messages"]
    # Its input was held until the run ended, then lost: every reading after the crash.
    assert row["lost"] == int(messages["lost"].sum()) > 0
    assert (messages.loc[messages["lost"], "t_sent"] > CRASH_S - 0.1).all()
    assert len(tables["windows"]) == 0


def test_a_stateless_operator_is_re_placed_too() -> None:
    _, tables = simulate(text(operator=SINK))
    row = only_row(tables)
    assert row["target"] == "gw-2"
    assert row["state_bytes"] == 0 and math.isnan(row["t_checkpoint"])
    assert row["rolled_back"] == 0 and row["lost"] == 0 and row["held"] > 0
    messages = tables["messages"]
    assert not messages["lost"].any()
    after = messages[messages["t_received"] > CRASH_S]
    assert set(after["sink"]) == {"gw-2"}


@pytest.mark.parametrize("operator", [COUNT, SINK], ids=["count", "stateless"])
def test_a_crash_in_the_middle_of_a_job_loses_what_the_cpu_held(operator: str) -> None:
    # A job ends 2 ms / 0.45 (a Pi 4 core) after its reading reaches gw-1: a crash inside one.
    _, base = simulate(text(operator=operator))
    t = float(base["messages"].loc[base["messages"]["sink"] == "gw-1", "t_received"].iloc[45])
    _, tables = simulate(text(operator=operator, crash=round(t - 1e-3, 6)))
    row = only_row(tables)
    assert row["lost"] == int(tables["messages"]["lost"].sum()) == 1


def test_without_recovery_a_crashed_operator_stays_down() -> None:
    _, tables = simulate(text(recovery=""))
    assert len(tables["recoveries"]) == 0
    assert len(tables["windows"]) == 0  # window 0's count died with gw-1
    messages = tables["messages"]
    assert (messages.loc[messages["lost"], "t_sent"] > CRASH_S - 0.1).all()


def test_the_shipped_experiment() -> None:
    experiment = load("experiments/recovery.yaml")
    (run_point,) = experiment.points
    model = Model(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                  settings(run_point))
    tables = conform(model.run().tables)
    assert tables["recoveries"].schema == TABLES["recoveries"]
    (row,) = tables["recoveries"].to_pylist()
    assert (row["node"], row["operator"], row["target"]) == ("gw-1", "count", "gw-2")
    assert row["lost"] == 0 and row["held"] > 0
    windows = tables["windows"].to_pandas()
    assert set(windows.loc[windows["t"] > row["t_recovered"], "node"]) == {"gw-2"}
    # The checkpoint at 9 s (every 2 s, half a period off the windows' grid), the crash at
    # 9.5 s: window 4 (8 to 10 s) is restored with its first second, and closed at once on
    # gw-2 (its end has passed); what gw-1 counted after 9 s is rolled back. No window is
    # lost or emitted twice.
    assert row["t_checkpoint"] == 9.0 and row["rolled_back"] == 20  # 4 sensors at 10/s
    assert list(windows["window"]) == list(range(15))
    (closed,) = windows.loc[windows["window"] == 4, ["node", "count"]].to_records(index=False)
    # The checkpoint's bytes: state_base (1024) and 64 per event of the window.
    assert tuple(closed) == ("gw-2", (row["state_bytes"] - 1024) // 64)
    assert 39 <= closed[1] <= 41  # 4 sensors at 10/s for 1 s
    assert np.isclose(row["recover"], row["t_recovered"] - row["t_crash"])


def test_a_window_sent_before_the_crash_is_not_sent_again_from_the_checkpoint() -> None:
    # The crash at 10.5 s: window 4 (8 to 10 s) closed on gw-1 at 10 s, after the checkpoint
    # at 9 s that holds it; gw-2 starts with window 5, empty, and window 4 appears once.
    # Window 5 is lost: what gw-1 took of it died there, and the held readings are processed
    # on gw-2 after 12 s, in window 6.
    experiment = load("experiments/recovery.yaml", overrides=["scenario.faults.0.at=10.5s"])
    (run_point,) = experiment.points
    model = Model(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                  settings(run_point))
    tables = conform(model.run().tables)
    windows = tables["windows"].to_pandas()
    (row,) = tables["recoveries"].to_pylist()
    assert 12.0 < row["t_recovered"] < 13.0
    assert list(windows["window"]) == [0, 1, 2, 3, 4, *range(6, 15)]
    assert row["t_checkpoint"] == 9.0 and row["rolled_back"] == 60  # 9 to 10.5 s at 40/s
    (four,) = windows.loc[windows["window"] == 4, ["node", "count"]].to_records(index=False)
    assert four[0] == "gw-1" and four[1] >= 79
    (six,) = windows.loc[windows["window"] == 6, ["node", "count"]].to_records(index=False)
    # its own 80 and the 60 held readings sent from the crash to 12 s
    assert six[0] == "gw-2" and 138 <= six[1] <= 142
