"""Nothing starts at or after the run's end, on any backend: no migration (scheduled, a
policy's, an offload's), handover decision, replica or broker join; the drain only lets what is
in flight arrive. A move whose turn comes after the end is recorded `refused`, with its start
when it was decided; a file that schedules something at or after the end is refused before
anything starts, naming the file, the field and the value."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from foundation.helpers import model, point, settings, simulate_point
from foundation.test_summary import UNFINISHED

from experiments.loader import load, parse_text
from experiments.schema import conform
from sim.model import Model
from topologies.errors import SpecError

MOBILITY = ["run.backend=sim", "run.duration=20s"]


def test_hybrid_mobility_on_sim_starts_and_decides_nothing_after_the_end() -> None:
    # The case: a migration started at 184 s of a 180 s run (in the drain); at 20 s
    # the same city moved five instances in its drain (at 20 s and 23 s).
    run_point = load("hybrid-mobility", [*MOBILITY, "scenario.faults=[{at: 10s, "
                                         "slow: gw-2, factor: 2, for: 5s}]"]).points[0]
    duration = run_point.spec.run.duration
    built = Model(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                  settings(run_point))
    steps: list[float] = []
    check = built.mobility.on_step

    def watched(t: float) -> None:
        steps.append(t)
        check(t)

    built.mobility.on_step = watched
    result = built.run()
    tables = conform(result.tables)
    migrations = tables["migrations"].to_pydict()
    assert len(migrations["start"]) >= 5
    assert max(migrations["start"]) < duration, migrations["start"]
    assert set(migrations["status"]) == {"done"}
    # Users move, hand over and the policy decides at each step before the end, not after.
    assert steps and max(steps) < duration and max(steps) == duration - 1.0
    assert max(tables["positions"].column("t").to_pylist()) < duration
    faults = tables["faults"].to_pydict()
    assert faults["t_start"] == [10.0] and faults["t_end"] == [15.0]


def test_the_coordinator_refuses_a_move_asked_at_the_end() -> None:
    built = model(_PAIR)
    ended: list[bool] = []

    def late(_event) -> None:
        group = built.group("count")
        built.coordinator.start(group, group.instances[0], "gw-2", None,
                                lambda ok=True: ended.append(ok))

    built.env.event_at(10.0).callbacks.append(late)
    result = built.run()
    migrations = result.tables["migrations"]
    assert list(migrations["status"]) == ["refused"]
    assert migrations["start"][0] == migrations["end"][0] == 10.0
    assert ended == [False]
    assert set(result.tables["windows"]["node"]) == {"gw-1"}  # nothing moved
    conform(result.tables)


# Two gateways and a window count on gw-1 (the summary tests' fixture), no move planned.
_PAIR = UNFINISHED.replace("name: unfinished", "name: pair").replace(
    "strategy: parallel, launch: 30s", "strategy: pause_transfer").replace(
    "  migrations: [{at: 5s, operator: count, to: gw-2}]\n", "").replace("drain: 1s", "drain: 3s")


# -- the energy offload (sim.energy_policy) -----------------------------------------------------

FOG = """
name: energy-offload
topology:
  name: duo
  sites: [{name: edge, position: [0, 0]}, {name: cloud, position: [5000, 0]}]
  nodes:
    - {name: dev, kind: device, position: [0, 0]}
    - {name: gw, kind: gateway, replicas: 2, profile: rpi4, site: edge, spacing: 50}
    - {name: broker, kind: broker, profile: vm.medium, site: cloud}
    - {name: cloud, kind: cloud_vm, profile: vm.small, site: cloud}
  links:
    - {from: dev, to: gw-1, latency: 5ms, bandwidth: 1Mbit}
    - {from: gw-*, to: broker, latency: 20ms, bandwidth: 10Mbit}
    - {from: broker, to: cloud, latency: 1ms, bandwidth: 100Mbit}
workload:
  name: one
  streams:
    - {name: s, sources: dev, rate: 10/s, arrivals: periodic, size: 100B}
pipeline:
  - {name: filter, task: passthrough, on: [gw-1, gw-2], reads: s, writes: kept, cost: 0ms}
  - {name: store, task: passthrough, on: cloud, reads: kept, cost: 1ms}
scenario:
  energy: {}
  migration: {strategy: pause_drain, launch: 2s}
run: {duration: 20s, seed: 1, driver_cost: 0ms, drain: 4s}
"""
IDLE_W = 2.7  # a Pi 4's idle draw


def _offload(policy, capacities: dict[str, float]):
    from sim.energy_policy import EnergyOffload
    from sim.migration import OneAtATime

    run_point = point(FOG)
    built = Model(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                  settings(run_point, direct_handover=False))
    moves = OneAtATime(built)
    offloads = [EnergyOffload(built, policy, gateway, capacity, moves=moves)
                for gateway, capacity in capacities.items()]
    return offloads, built.run()


def test_an_offload_due_at_the_end_moves_nothing() -> None:
    from workloads.energy_offload import EnergyPolicy

    # The idle Pi is over the budget at its first measure, which is the run's end.
    (offload,), result = _offload(EnergyPolicy(budget=1.0, interval=20.0), {"gw-1": 1000.0})
    assert offload.reason is None and offload.moves == 0 and offload.fact()["t"] is None
    assert offload.drawn == pytest.approx(20.0 * IDLE_W, rel=1e-3)  # over the whole run
    assert len(result.tables["migrations"]["start"]) == 0


def test_an_offloaded_move_whose_turn_comes_after_the_end_is_refused() -> None:
    from workloads.energy_offload import EnergyPolicy

    # 80 % of the charge at the idle draw: gw-1 decides at 19.9 s, gw-2 at 19.95 s; their
    # instances are of one operator, moved one after the other, and gw-1's takes the
    # target's 2 s launch: gw-2's turn comes at about 21.9 s, after the end.
    capacities = {"gw-1": 19.9 * IDLE_W / 0.8, "gw-2": 19.95 * IDLE_W / 0.8}
    offloads, result = _offload(EnergyPolicy(battery_low=0.2), capacities)
    assert [round(o.moved_at, 6) for o in offloads] == [19.9, 19.95]
    migrations = result.tables["migrations"]
    assert list(migrations["source"]) == ["gw-1", "gw-2"]
    assert list(migrations["status"]) == ["done", "refused"]
    # The refused one's start is its decision, its end its turn.
    assert list(migrations["start"]) == [pytest.approx(19.9), pytest.approx(19.95)]
    assert migrations["end"][1] == migrations["end"][0] > 21.0
    conform(result.tables)


# -- replication and broker scaling --------------------------------------------------------------

def test_no_replica_starts_at_the_end() -> None:
    from tests.sim.test_replication import REPLICATION, STAR

    # Over the bound in the first two intervals: the start is due at 2 s, the run's end.
    text = STAR.replace("REPLICATION", REPLICATION.replace("MAX", "2")).replace(
        "duration: 20s", "duration: 2s")
    result = simulate_point(point(text))
    assert len(result.tables["replicas"]["t"]) == 0
    samples = result.facts["replication"]["samples"]
    assert [s[0] for s in samples] == [1.0, 2.0]  # the last interval is still measured
    assert samples[-1][3] > 0.050


def test_no_broker_joins_at_the_end() -> None:
    # broker-scaling decides the join at 12 s (tests/sim/test_broker_scaling.py).
    result = simulate_point(load("broker-scaling", ["run.duration=12s"]).points[0])
    (entry,) = result.facts["broker_scaling"]
    assert not entry["joined"] and entry["t_join"] is None and entry["moved"] == []
    assert entry["probes"][-1][0] == 12.0 and entry["probes"][-1][1] > 0.020
    assert len(result.tables["replicas"]["t"]) == 0


# -- validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "backend", "fault", "message"), [
    ("migrate-parallel", "sim", "{at: 60s, crash: gw-2}",
     "scenario.faults[0].at: a time before the run ends (run.duration: 60 s) (got 60.0)"),
    ("migrate-parallel", "emu", "{at: 61s, crash: gw-2}",
     "scenario.faults[0].at: a time before the run ends (run.duration: 60 s) (got 61.0)"),
    ("hybrid-mobility", "hybrid", "{at: 3m, crash: gw-2}",
     "scenario.faults[0].at: a time before the run ends (run.duration: 180 s) (got 180.0)"),
])
def test_a_fault_at_or_after_the_end_is_refused_naming_file_field_and_value(
        tmp_path, name, backend, fault, message) -> None:
    text = (Path(__file__).parents[2] / "experiments" / f"{name}.yaml").read_text()
    path = tmp_path / f"{name}.yaml"
    path.write_text(text.replace("scenario:\n", f"scenario:\n  faults: [{fault}]\n", 1))
    with pytest.raises(SpecError) as caught:
        load(path, [f"run.backend={backend}"])
    assert str(caught.value).startswith(str(path)) and message in str(caught.value)
    with pytest.raises(SpecError, match="--set scenario.faults"):  # named where it came from
        load(name, [f"run.backend={backend}", f"scenario.faults=[{fault}]"])


def test_a_migration_at_the_end_is_refused_naming_the_field() -> None:
    text = _PAIR.replace("scenario:", "scenario:\n  migrations: [{at: 10s, operator: count, "
                         "to: gw-2}]")
    with pytest.raises(SpecError, match=r"pair.yaml.*scenario.migrations\[0\].at: a time "
                                        r"before the run ends \(run.duration: 10 s\)"):
        parse_text(text, "pair.yaml")


# -- the emulation and hybrid ------------------------------------------------------------------

class _Plan:
    def __init__(self, at: float, operator: str) -> None:
        self.at, self.operator, self.source, self.target = at, operator, "gw-1", "gw-2"
        self.within_window, self.strategy = False, "pause_drain"


def test_a_scheduled_emulated_move_whose_turn_comes_after_the_end_is_refused(
        monkeypatch) -> None:
    from emu.agent.timebase import UNDILATED
    from emu.features.migrations import MigrationSchedule
    from workloads.migration.record import MigrationRecord

    moved: list[str] = []

    def migrate(control, operator, source, target, strategy, settings, **kw):
        start = UNDILATED.now()
        moved.append(operator)
        time.sleep(0.3)  # the first move runs past the run's end
        return MigrationRecord(kw["record_id"], operator, strategy, source, target, start,
                               UNDILATED.now())

    monkeypatch.setattr("emu.features.moves.dispatch.migrate", migrate)
    epoch = UNDILATED.now()
    schedule = MigrationSchedule(None, [_Plan(0.05, "a"), _Plan(0.1, "b")], None, {}, epoch,
                                 clock=UNDILATED, duration=0.2)
    schedule.start()
    time.sleep(0.5)
    first, second = schedule.finish()
    assert moved == ["a"] and first.status == "done"
    assert second.operator == "b" and second.status == "refused"
    assert second.start - epoch == pytest.approx(0.1)  # when it was due
    assert second.end - epoch >= 0.3 and "run ended" in second.error
    assert second.row(epoch)["status"] == "refused"


def test_an_emulated_offload_decides_nothing_at_the_end_and_refuses_late_moves(
        monkeypatch) -> None:
    from emu.agent.timebase import UNDILATED
    from emu.features.energy_offload import Gauge, OffloadWatcher
    from emu.host.metrics import Usage
    from workloads.energy_offload import Offload
    from workloads.energy_power import Power
    from workloads.migration.record import MigrationRecord

    class Idle:
        def usage(self) -> Usage:
            return Usage(0.0, 0)

    moved: list[str] = []

    def migrate(control, operator, source, target, strategy, settings, **kw):
        start = UNDILATED.now()
        moved.append(operator)
        time.sleep(0.5)
        return MigrationRecord(kw["record_id"], operator, strategy, source, target, start,
                               UNDILATED.now())

    monkeypatch.setattr("emu.features.moves.dispatch.migrate", migrate)
    power = Power(1.0, 3.0)
    # `early` (0.25 J at its idle 1 W) falls below 20 % at 0.2 s and decides then; `late`
    # (100 J) is over the budget (0.5 J an interval) at its first read, the run's end (0.6 s).
    offload = Offload(gateways=["gw-*"], joules=1.0, interval=0.6, budget=0.5)
    early = Gauge("gw-early", "c1", 1.0, 1.0, power, 0.25, ["a", "b"])
    late = Gauge("gw-late", "c2", 1.0, 1.0, power, 100.0, ["c"])
    watcher = OffloadWatcher(None, offload, [early, late],
                             "cloud", "pause_drain", None, UNDILATED, 0.6,
                             cgroups={"gw-early": Idle(), "gw-late": Idle()})
    epoch = UNDILATED.now()
    watcher.start(epoch)
    time.sleep(1.3)
    records = watcher.finish()
    assert early.t is not None and early.t < 0.6 and late.t is None and late.reason is None
    assert moved == ["a"]
    assert [(r.operator, r.status) for r in records] == [("a", "done"), ("b", "refused")]
    assert records[1].start - epoch == pytest.approx(early.t, abs=0.05)
    assert records[1].end - epoch >= 0.6


def test_a_hybrid_policy_move_whose_turn_comes_after_the_end_is_refused(monkeypatch) -> None:
    from emu.agent.timebase import UNDILATED
    from experiments.hybrid.migrations import PolicyMigrations

    def attempt(*args, **kwargs):
        raise AssertionError("a move after the run's end was attempted")

    monkeypatch.setattr("emu.features.moves.dispatch.attempt", attempt)

    class Env:
        now = 19.5

    class Mobility:
        devices = ["p-1"]
        env = Env()

    class Actions:
        def __init__(self) -> None:
            self.queued = []

        def put(self, kind, subject, t_model, run):
            self.queued.append(run)
            return run

    actions = Actions()
    now = UNDILATED.now()
    movers = PolicyMigrations(Mobility(), actions, None, "trail", {"p-1": "gw-1"}, None, 7,
                              UNDILATED, until=now + 0.05)
    ended: list[bool] = []
    movers.start(0, "gw-2", "pause_transfer", ended.append)
    time.sleep(0.1)  # its turn comes after the end
    with pytest.raises(RuntimeError, match="run ended"):
        actions.queued[0](None)
    movers.settle()
    (record,) = movers.records
    assert record.status == "refused" and record.id == 7
    assert record.start == pytest.approx(now, abs=0.01) and record.end >= now + 0.05
    assert ended == [False] and movers.where["trail@p-1"] == "gw-1"
    assert np.isfinite(record.end)


def test_an_emulated_replica_is_not_started_at_the_end() -> None:
    from emu.agent.config import AgentConfig, OperatorConfig
    from emu.features.replication import Replication
    from tests.sim.test_replication import REPLICATION, STAR

    run_point = point(STAR.replace("REPLICATION", REPLICATION.replace("MAX", "2")))
    asked: list[str] = []

    class Reply:
        ok, error = True, None

        def __init__(self, result) -> None:
            self.result = result

    class Control:
        def send(self, nodes, command, args, timeout):
            asked.append(command)
            result = {"delays": [0.2] * 10} if command == "operator.delays" else {}
            return type("Result", (), {"replies": {n: Reply(result) for n in nodes}})()

    now = [0.0]
    configs = {"gw-1": AgentConfig("gw-1", "broker:1883", operators=[
        OperatorConfig("work", reads=["s/#"], slo=0.050)])}
    replication = Replication(Control(), run_point.spec.scenario.replication,
                              run_point.topology, run_point.spec.workload, configs,
                              clock=lambda: now[0], duration=2.0)
    for now[0] in (1.0, 2.0):  # over the bound twice (up = 2): due at 2 s, the run's end
        replication._observe("work")
    assert asked == ["operator.delays"] * 2 and replication.rows == []
    assert [s[0] for s in replication.samples] == [1.0, 2.0]


def test_an_emulated_broker_join_is_not_started_at_the_end() -> None:
    import threading

    from emu.agent.timebase import UNDILATED
    from emu.features.broker_scaling import BrokerScaling
    from workloads.broker_scaling import BrokerScalingSpec

    run_point = load("broker-scaling").points[0]
    entry = BrokerScalingSpec(broker="broker-1", spare="broker-2", bound=0.020, interval=0.2,
                              probe=0.1, up=2)
    asked: list[str] = []

    class Control:
        def send(self, nodes, command, args, timeout):
            asked.append(command)
            return type("Result", (), {"replies": {}})()

    class Probe:  # every probe 1 s late: over the bound in every interval
        def send(self) -> None:
            pass

        def take(self, since: float, until: float) -> list[float]:
            return [1.0]

    scaling = BrokerScaling(Control(), [entry], run_point.topology, {}, {"gw-1": "broker-1"},
                            ["gw-1"], timebase=UNDILATED, duration=0.4)
    scaling.epoch = UNDILATED.now()
    watching = threading.Thread(target=scaling._watch, args=(0, Probe()))
    watching.start()
    time.sleep(0.55)  # decisions at 0.2 s and 0.4 s, the run's end: up = 2 due then
    scaling._stop.set()
    watching.join()
    assert [t for t, _ in scaling.figures[0]] == [0.2, 0.4]
    assert asked == [] and scaling.joins == [None] and scaling.rows == []


@pytest.mark.parametrize("crash", [19.0, 17.5])
def test_a_crash_noticed_after_the_end_is_not_recovered_in_the_drain(crash: float) -> None:
    # The controller stops watching at the run's end, as emu's does: a crash whose session
    # expires after it (2 s timeout) is not detected and its operator is not re-placed in the
    # drain; one noticed before the end is (17.5 s: ZooKeeper's expiry within 2 s and a tick).
    run_point = load("recovery", ["run.duration=20s", f"scenario.faults=[{{at: {crash}s, "
                                  "crash: gw-1}]"]).points[0]
    result = simulate_point(run_point)
    rows = result.tables["recoveries"]
    assert list(rows["node"]) == ["gw-1"]
    detected = float(rows["t_detected"][0])
    if crash == 19.0:
        assert np.isnan(detected) and rows["target"][0] == ""
        assert np.isnan(float(rows["t_recovered"][0]))
    else:
        assert crash < detected < 20.0 and rows["target"][0] in ("gw-2", "cloud")
    migrations = result.tables["migrations"]
    assert all(t < 20.0 for t in migrations["start"])


def test_a_hybrid_policy_move_whose_turn_never_came_reads_refused_not_unfinished() -> None:
    # The queue of actions gave up at the end (Actions.close) before the move's turn: it never
    # began, so it is not `unfinished` (a move under way), it is refused.
    from emu.agent.timebase import UNDILATED
    from experiments.hybrid.migrations import PolicyMigrations

    class Env:
        now = 12.0

    class Mobility:
        devices = ["p-1", "p-2"]
        env = Env()

    class Actions:
        def put(self, kind, subject, t_model, run):
            return run  # never run: the queue closed first

    movers = PolicyMigrations(Mobility(), Actions(), None, "trail",
                              {"p-1": "gw-1", "p-2": "gw-1"}, None, 3, UNDILATED)
    movers.start(0, "gw-2", "pause_transfer", lambda ok: None)
    (record,) = movers.closed()
    assert record.status == "refused" and record.id == 3
    assert "not begun" in record.error and np.isfinite(record.end)


def test_a_run_without_a_drain_ends_at_its_duration() -> None:
    # run.drain=0s crashed the model ("until (21.0) must be greater than the current
    # simulation time"): what is on its way at the end is in flight.
    result = simulate_point(load("quickstart", ["run.duration=20s", "run.drain=0s"]).points[0])
    states = result.tables["messages"]["state"]
    assert result.facts["end"] == 20.0 and (states == "in_flight").sum() > 0
