"""An operator moved to a node behind another broker on emu: its input session stays on the
broker its input is published to, and the target takes it over there, over the link the
cluster's plan gives it (emu.cluster.plan): the migration is done, nothing is lost, and the
readings after the move are processed on the target. A move that cannot reach the session
(a parallel migration across brokers) is refused before any container starts. The agents'
part first, in-process on two loopback Mosquittos; then whole runs on containers."""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emu.agent.agent import Agent
from emu.agent.config import AgentConfig, DriverConfig, OperatorConfig
from emu.control.commands import Controller
from emu.features.moves.dispatch import migrate
from experiments.loader import parse_text
from experiments.runner import run_experiment
from workloads.spark.local_broker import LocalMosquitto, find_mosquitto

SENSORS, RATE, AT, DURATION = 4, 10, 6.0, 16.0

# count on gw-1 (behind broker-1) reads the sensors gw-1 publishes to broker-1; at 6 s it
# moves to gw-2, behind broker-2: brokers are not bridged.
MOVE = f"""
name: across
topology:
  name: across
  nodes:
    - {{name: sensor, kind: device, replicas: {SENSORS}}}
    - {{name: gw, kind: gateway, profile: vm.small, replicas: 2}}
    - {{name: broker, kind: broker, replicas: 2}}
    - {{name: core, kind: switch}}
  links:
    - {{from: sensor-*, to: gw-1, latency: 2ms}}
    - {{from: gw-1, to: broker-1, latency: 5ms}}
    - {{from: gw-2, to: broker-2, latency: 5ms}}
    - {{from: broker-*, to: core, latency: 2ms}}
workload:
  name: w
  streams: [{{name: s, sources: sensor-*, rate: {RATE}/s, arrivals: periodic, size: 100B,
              qos: 1}}]
pipeline:
  - {{name: count, task: passthrough, on: gw-1, reads: s, window: {{size: 2s}}}}
scenario:
  migration: {{strategy: STRATEGY}}
  migrations: [{{at: {AT}s, operator: count, to: gw-2}}]
run: {{backend: emu, duration: {DURATION}s, seed: 4, drain: 3s}}
"""


@pytest.fixture(scope="module")
def brokers() -> Iterator[tuple[str, str]]:
    """Two loopback Mosquittos, not bridged: b-1's and b-2's addresses."""
    if find_mosquitto() is None:
        pytest.skip("mosquitto is not installed")
    with LocalMosquitto() as first, LocalMosquitto() as second:
        yield f"{first.host}:{first.port}", f"{second.host}:{second.port}"


def _received(agent: Agent) -> list[dict[str, str]]:
    path = agent.records.directory / "received.csv"
    if not path.exists():  # it took nothing
        return []
    with path.open(newline="") as rows:
        return list(csv.DictReader(rows))


def _agents(brokers: tuple[str, str], tmp_path: Path,
            linked: bool) -> tuple[Agent, Agent]:
    """gw-1 behind b-1: two devices at QoS 1 and `count`, reading them through a session of
    its own on b-1. gw-2 behind b-2, with a link to b-1 when `linked` (as the plan gives)."""
    first, second = brokers
    source = Agent(AgentConfig(
        node="gw-1", mqtt=first, broker="b-1", index=1, records=str(tmp_path / "gw-1"),
        drivers=[DriverConfig("s", ["d-1", "d-2"], 20.0, arrivals="periodic", qos=1,
                              forward=True)],
        operators=[OperatorConfig("count", reads=["s/#"], session="foglab-op-count-gw-1",
                                  broker="b-1")]))
    target = Agent(AgentConfig(
        node="gw-2", mqtt=second, broker="b-2", index=2, records=str(tmp_path / "gw-2"),
        other_brokers={"b-1": first} if linked else {}))
    for agent in (source, target):
        agent.start()
        assert agent.ready.wait(10), f"{agent.node} did not connect to its broker"
    return source, target


def _stop(*agents: Agent) -> None:
    for agent in agents:
        agent.scheduler.call(agent.drivers.set_rate, 0.0)
    time.sleep(1.0)  # what is under way arrives
    for agent in agents:
        agent.stop()


def test_the_target_takes_the_session_over_on_the_source_s_broker(brokers, tmp_path) -> None:
    source, target = _agents(brokers, tmp_path, linked=True)
    try:
        time.sleep(1.5)
        with Controller({"gw-1": brokers[0], "gw-2": brokers[1]}) as control:
            record = migrate(control, "count", "gw-1", "gw-2", "pause_drain", timeout=10)
        assert record.status == "done", record.error
        time.sleep(1.5)
    finally:
        _stop(source, target)
    with (tmp_path / "gw-1" / "sent.csv").open(newline="") as rows:
        sent = {row["id"] for row in csv.DictReader(rows)}
    before, after = _received(source), _received(target)
    taken = [row["id"] for row in before + after]
    # Every reading once: those b-1 held over the pause went to gw-2 with the live ones.
    assert len(taken) == len(set(taken)) and set(taken) == sent
    assert record.lost == record.duplicates == record.reordered == 0
    later = [row for row in after if float(row["t_sent"]) > record.end]
    assert len(later) >= 2 * 20 * 1.0  # two devices at 20/s for the last 1.5 s, give or take


def test_a_target_with_no_link_to_the_session_s_broker_refuses_and_the_source_goes_on(
        brokers, tmp_path) -> None:
    source, target = _agents(brokers, tmp_path, linked=False)
    try:
        with Controller({"gw-1": brokers[0], "gw-2": brokers[1]}) as control:
            record = migrate(control, "count", "gw-1", "gw-2", "pause_drain", timeout=10)
        assert record.status == "failed"
        assert "node gw-2 has no link to b-1" in record.error, record.error
        assert "pause" not in record.phases  # refused at the target's prepare
        time.sleep(1.0)
        count = source.operators["count"]
        assert count.running and source.sessions["count"].client.is_connected()
    finally:
        _stop(source, target)
    # The source never paused: it took every reading, those after the refusal too.
    assert any(float(row["t_sent"]) > record.end for row in _received(source))
    assert not _received(target)


def _emulation_here() -> None:
    if os.geteuid() != 0:
        pytest.skip("the emulation needs root")
    pytest.importorskip("docker")


@pytest.mark.emu
@pytest.mark.slow
def test_a_migration_to_a_gateway_behind_another_broker_takes_the_session_over_there(
        tmp_path) -> None:
    _emulation_here()
    experiment = parse_text(MOVE.replace("STRATEGY", "pause_transfer"))
    (outcome,) = run_experiment(experiment, tmp_path)
    assert outcome.error is None, outcome.error
    assert outcome.status == "ok", outcome.failed_summary()
    facts = json.loads((outcome.folder / "manifest.json").read_text())["facts"]
    assert facts["migrations"][0]["status"] == "done", facts["migrations"]
    (moved,) = pq.read_table(outcome.folder / "migrations.parquet").to_pylist()
    assert (moved["source"], moved["target"], moved["strategy"]) == (
        "gw-1", "gw-2", "pause_transfer")
    assert AT <= moved["start"] < moved["end"] < DURATION
    assert moved["state_bytes"] > 0
    assert (moved["lost"], moved["duplicates"], moved["reordered"]) == (0, 0, 0)
    # The target took the readings broker-1 held over the pause, and those after it.
    messages = pq.read_table(outcome.folder / "messages.parquet").to_pandas()
    counts = facts["messages"]
    assert not messages["lost"].any() and counts["duplicated"] == 0, counts
    assert len(messages) == counts["sent"] - counts["dropped"]
    before = messages[messages["t_received"] < moved["start"]]
    after = messages[messages["t_sent"] > moved["end"]]
    assert set(before["sink"]) == {"gw-1"} and set(after["sink"]) == {"gw-2"}
    # Devices emit until the run's end: the move leaves most of the run to the target.
    assert len(after) >= SENSORS * RATE * (DURATION - moved["end"] - 1)
    # device, gw-1 up to broker-1; then back to gw-1, or on to gw-2 through broker-2's site
    assert set(before["hops"]) == {3} and set(after["hops"]) == {1 + 1 + 3}
    windows = pq.read_table(outcome.folder / "windows.parquet").to_pandas()
    assert set(windows[windows["t"] > moved["end"] + 2.0]["node"]) == {"gw-2"}
    steps = windows.sort_values("t")
    # the window's count went on across the move: no serial number skipped or repeated
    assert (steps["last_sn"].diff().dropna() == steps["count"].iloc[1:].to_numpy()).all()


@pytest.mark.emu
@pytest.mark.slow
def test_a_parallel_migration_across_brokers_is_refused_before_the_run(tmp_path) -> None:
    """A parallel migration's mirror goes through each node's own broker: refused, naming
    the migration's field, the brokers and the strategies that do move across."""
    _emulation_here()
    experiment = parse_text(MOVE.replace("STRATEGY", "parallel"))
    (outcome,) = run_experiment(experiment, tmp_path)
    assert outcome.error is not None
    assert "scenario.migrations[0].to" in outcome.error, outcome.error
    assert ("input session is on broker broker-1, gw-2 is behind broker-2"
            in outcome.error), outcome.error
    assert "use pause_transfer or pause_drain" in outcome.error, outcome.error
