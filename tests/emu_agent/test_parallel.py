"""Parallel migration between real agents (emu.features.moves.dispatch, strategy parallel): a real
Mosquitto on loopback; the source mirrors its serial-numbered input to the target, the
target's consistency checker forwards window outputs that cover every input once, in order."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from emu.agent.config import OperatorConfig
from emu.agent.operators import Operator
from emu.agent.parallel import parallel_refusal
from emu.agent.parallel_link import topics as migration_topics
from emu.agent.parallel_target import ParallelTarget
from emu.agent.protocol import Envelope
from emu.control.commands import Controller
from emu.features.moves.dispatch import migrate
from workloads.migration import synchronise
from workloads.migration.measures import coverage

from .conftest import read_csv, wait_for
from .test_migration import Publisher, publisher  # noqa: F401

WINDOW = 1.0  # seconds: a tumbling time count, the thesis's operator
RATE = 200.0  # events/s


def counter(records: Path | None = None, window: Any = WINDOW) -> OperatorConfig:
    return OperatorConfig(name="counter", reads=["city/+"], writes="counter", window=window,
                          session="foglab-op-counter-0",
                          records=None if records is None else str(records))


def heard_outputs(listener) -> list[tuple[int, int]]:
    """(last SN, count) of each window output that went downstream, as it arrived."""
    return [(data["last_sn"], data["count"]) for data in
            (json.loads(h.envelope.body) for h in listener.snapshot("counter/"))]


def covers_every_input(outputs: list[tuple[int, int]], inputs: int) -> None:
    assert outputs, "no window output went downstream"
    assert coverage(outputs) == (0, 0, 0), outputs
    assert outputs[0][0] - outputs[0][1] == 0, outputs[:3]  # from the first SN
    assert sum(count for _, count in outputs) == inputs, outputs
    assert outputs[-1][0] == inputs


@pytest.mark.emu
def test_parallel_migration_forwards_outputs_that_cover_every_input_once(
        broker, config, agents, controller: Controller, publisher: Publisher,  # noqa: F811
        listen, tmp_path: Path) -> None:
    epoch = time.time()
    source = agents(config("gw-src", epoch=epoch,
                           operators=[counter(tmp_path / "gw-src")]))
    target = agents(config("gw-dst", epoch=epoch))
    listener = listen("counter/#")
    feeding = threading.Thread(target=publisher.publish, args=(int(RATE * 6), RATE))
    feeding.start()
    time.sleep(1.5)  # the move begins mid-window, while messages flow
    phases: list[str] = []
    settings = type("Settings", (), {"sync": 2, "chunk": 0})()
    record = migrate(controller, "counter", "gw-src", "gw-dst", "parallel", settings,
                     record_id=3, progress=phases.append)
    feeding.join()
    assert record.status == "done", record.error
    assert phases == ["prepare", "divert", "sync", "handover", "resume", "release", "done"]
    assert record.synchronised in ("strong", "old_ahead", "new_ahead")
    assert record.downtime == 0.0 and record.state_bytes == 0 and record.chunks == 0
    assert record.resumed >= record.paused and record.held >= 0
    assert (record.duplicates, record.lost, record.reordered) == (0, 0, 0)
    assert "counter" not in source.operators and "counter" in target.operators
    assert not source.migrations.parallel.diverted and not target.migrations.parallel.targets
    sent = len(publisher.sent)
    wait_for(lambda: heard_outputs(listener) and heard_outputs(listener)[-1][0] >= sent,
             timeout=3 * WINDOW + 5)
    time.sleep(0.3)
    outputs = heard_outputs(listener)
    covers_every_input(outputs, sent)
    topics = [h.topic for h in listener.snapshot("counter/")]
    assert topics[0] == "counter/gw-src" and topics[-1] == "counter/gw-dst"
    # windows.csv on both nodes says what went downstream: the same outputs, in order.
    rows = sorted(read_csv(tmp_path / "gw-src" / "windows.csv")
                  + read_csv(tmp_path / "gw-dst" / "windows.csv"), key=lambda r: float(r["t"]))
    assert [(int(r["last_sn"]), int(r["count"])) for r in rows] == outputs
    during = [r for r in rows if r["migration"] == "3"]
    assert during and {r["node"] for r in during} <= {"gw-src", "gw-dst"}
    assert {r["migration"] for r in rows} <= {"-1", "3"}
    print(f"parallel: {record.synchronised}, sync after "
          f"{record.phases['handover'] - record.phases['sync']:.2f} s, handover held "
          f"{record.held} ({(record.resumed - record.paused) * 1000:.0f} ms), outputs {outputs}")


@pytest.mark.emu
@pytest.mark.parametrize("when", ["sync", "handover"])
def test_a_target_killed_rolls_back_losing_nothing(
        when: str, broker, config, agents, processes, controller: Controller,
        publisher: Publisher, listen, tmp_path: Path) -> None:  # noqa: F811
    """Killed before synchronising (the source's outputs went on through the checker), or
    after it, once the source has left its session for the handover (the target's outputs
    went downstream): the source goes on, and what went downstream covers every input once."""
    epoch = time.time()
    source = agents(config("gw-src", epoch=epoch, operators=[counter(tmp_path / "gw-src")]))
    doomed = processes(config("gw-dst"))
    wait_for(lambda: "gw-dst" in controller.ping(["gw-dst"], timeout=1).replies, timeout=30)
    listener = listen("counter/#")
    feeding = threading.Thread(target=publisher.publish, args=(int(RATE * 6), RATE))
    feeding.start()
    time.sleep(1.2)

    def phase(name: str) -> None:
        if name == when:
            os.kill(doomed.pid, signal.SIGKILL)
            doomed.wait()

    settings = type("Settings", (), {"sync": 2, "chunk": 0})()
    record = migrate(controller, "counter", "gw-src", "gw-dst", "parallel", settings,
                     timeout=2, sync_timeout=2, progress=phase)
    assert record.status == "failed"
    assert "gw-dst did not answer" in record.error, record.error
    assert record.synchronised == ("" if when == "sync" else record.synchronised)
    feeding.join()
    operator = source.operators["counter"]
    assert operator.running and operator.window.divert is None
    assert not source.migrations.parallel.diverted and not source.migrations.paused
    sent = len(publisher.sent)
    wait_for(lambda: heard_outputs(listener) and heard_outputs(listener)[-1][0] >= sent,
             timeout=3 * WINDOW + 5)
    time.sleep(0.3)
    covers_every_input(heard_outputs(listener), sent)
    assert operator.processed == sent
    if when == "handover":  # the target's outputs went downstream before it died
        assert {h.topic for h in listener.snapshot("counter/")} == {
            "counter/gw-src", "counter/gw-dst"}


@pytest.mark.emu
@pytest.mark.parametrize("word", ["none", "late"])
def test_a_rollback_sends_nothing_the_target_sent_downstream_before_it_died(
        word: str, broker, config, agents, controller: Controller, publisher: Publisher,  # noqa: F811
        listen) -> None:
    """The target forwarded the source's first windows downstream and died before its
    `covered` word reached the source (`none`: never sent; `late`: on its way, arriving after
    the rollback began): the source sends none of them again. The race CI's loaded host
    showed at the handover (141 readings, one window, went downstream twice). The dead target
    is the test's own client here, publishing what the target's checker forwards."""
    import paho.mqtt.client as mqtt

    epoch = time.time()
    source = agents(config("gw-src", epoch=epoch, operators=[counter()]))
    ways = migration_topics("t39", "gw-src", "gw-dst")
    listener = listen("counter/#", ways["old"])
    feeding = threading.Thread(target=publisher.publish, args=(int(RATE * 5), RATE))
    feeding.start()
    time.sleep(0.6)
    divert = controller.send(["gw-src"], "migrate.divert",
                             {"operator": "counter", "tag": "t39", "migration": 7,
                              "target": "gw-dst"}, timeout=5)
    assert divert.ok, divert.summary()
    # Two windows diverted to the checker; the dead target forwarded both downstream.
    wait_for(lambda: len(listener.snapshot(ways["old"])) >= 2, timeout=6)
    diverted = [json.loads(h.payload) for h in listener.snapshot(ways["old"])]
    target = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    target.connect(broker.host, broker.port)
    target.loop_start()
    try:
        for item in diverted[:2]:
            target.publish("counter/gw-dst", item["message"].encode(), qos=1).wait_for_publish(5)
        if word == "late":  # the checker's word, published after the rollback's barrier
            threading.Timer(0.5, lambda: target.publish(
                ways["covered"],
                json.dumps({"covered": diverted[1]["row"][7]}).encode(), qos=1)).start()
        rollback = controller.send(["gw-src"], "migrate.rollback",
                                   {"operator": "counter", "covered": None}, timeout=5)
        assert rollback.ok, rollback.summary()
        taken = rollback.replies["gw-src"].result
        assert taken["covered"] == diverted[1]["row"][7], taken
        feeding.join()
        sent = len(publisher.sent)
        wait_for(lambda: heard_outputs(listener) and heard_outputs(listener)[-1][0] >= sent,
                 timeout=3 * WINDOW + 5)
        time.sleep(0.3)
    finally:
        target.disconnect()
        target.loop_stop()
    outputs = heard_outputs(listener)
    covers_every_input(outputs, sent)  # nothing twice, nothing missing
    assert [h.topic for h in listener.snapshot("counter/")][:2] == ["counter/gw-dst"] * 2
    assert source.operators["counter"].running
    assert not source.migrations.parallel.diverted


@pytest.mark.emu
def test_operators_parallel_migration_cannot_pair_are_refused(
        broker, config, agents, controller: Controller) -> None:
    agents(config("gw-src", operators=[
        counter(window={"size": 50, "basis": "count"}),
        OperatorConfig(name="relay", reads=["city/+"], writes="relay", session="s-relay")]))
    agents(config("gw-dst"))
    record = migrate(controller, "counter", "gw-src", "gw-dst", "parallel", timeout=5)
    assert record.status == "failed" and "tumbling time" in record.error, record.error
    record = migrate(controller, "relay", "gw-src", "gw-dst", "parallel", timeout=5)
    assert record.status == "failed" and "has no window" in record.error, record.error


def test_what_parallel_migration_refuses() -> None:
    def refusal(window: Any, sync: int = 2) -> str:
        return parallel_refusal(Operator(counter(window=window), "gw-1", 0.0), sync)

    assert refusal(5.0) == "" and refusal({"size": 5, "aggregate": "sum"}, 0) == ""
    assert "sliding time window" in refusal({"size": 4, "slide": 2, "kind": "sliding"})
    assert "needs sync 0" in refusal({"size": 5, "aggregate": "average"})


class _Agent:
    """What ParallelTarget uses of an agent, to drive its checker by hand (no broker)."""

    def __init__(self) -> None:
        self.emitted: list[dict] = []
        self.node = "gw-dst"  # the migration's topics name it
        self.config = type("Config", (), {"mqtt": "127.0.0.1:1"})()

    def clock(self) -> float:
        return time.time()

    def emit(self, operator, output: Envelope, qos: int | None = None) -> None:
        self.emitted.append(json.loads(output.body))


@pytest.mark.parametrize("example", ["strong", "old_ahead", "new_ahead"])
def test_the_target_forwards_what_the_checker_decides_adjusted_included(
        example: str, tmp_path: Path) -> None:
    """The thesis's worked examples (notes 4.4) through the target's part: its downstream
    outputs and windows.csv rows are the checker's, adjusted SNs and counts included."""
    old, new, order, sync = {
        "strong": ([(3, 3), (7, 4), (9, 2), (13, 4), (18, 5), (20, 2)],
                   [(2, 2), (5, 3), (9, 4), (12, 3), (17, 5), (20, 3)], None, 0),
        "old_ahead": ([(5, 5), (9, 4), (13, 4), (18, 5), (20, 2)],
                      [(1, 1), (5, 4), (10, 5), (15, 5), (20, 5)], None, 3),
        "new_ahead": ([(1, 1), (10, 9), (11, 1), (15, 4), (17, 2), (20, 3)],
                      [(6, 6), (14, 8), (15, 1), (17, 2), (19, 2), (20, 1)], None, 3),
    }[example]
    expected = synchronise(old, new, sync, order)
    agent = _Agent()
    operator = Operator(counter(tmp_path), "gw-dst", 0.0)
    part = ParallelTarget(agent, operator, "t", sync, 7, lambda: None, "gw-src")
    streams = {"old": iter(old), "new": iter(new)}
    for side in ("old", "new") * 6:
        sn, count = next(streams[side], (None, None))
        if sn is None:
            continue
        body = {"operator": "counter", "node": side, "window": sn, "start": 0, "end": 1,
                "count": count, "value": count, "first_sn": sn - count + 1, "last_sn": sn,
                "first": 1}
        output = Envelope(1, "city", "d-1", 0.0, 1, json.dumps(body))
        row = (0.0, "counter", side, sn, 0, 1, sn - count + 1, sn, count, count, 0.0, -1, 0)
        if side == "old":
            part._old(json.dumps({"row": row, "message": output.encode().decode()}).encode())
        else:
            part._new(output, row)
        if part.checker.synchronised:
            break
    after = [(d["last_sn"], d["count"]) for d in agent.emitted]
    assert after == [(f.sn, f.count) for f in expected.forwarded[:len(after)]]
    assert part.checker.synchronised and part.report()["mode"] == example
    rows = read_csv(tmp_path / "windows.csv")
    assert [(int(r["last_sn"]), int(r["count"]), r["adjusted"]) for r in rows] == [
        (f.sn, f.count, str(int(f.adjusted))) for f in expected.forwarded[:len(after)]]
    assert {r["migration"] for r in rows} == {"7"}
    assert all(d["first_sn"] == d["last_sn"] - d["count"] + 1 for d in agent.emitted)
