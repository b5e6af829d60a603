"""The features' timers on a dilated clock (emu.agent.timebase), without containers: at K = 2
a fault, a scheduled migration and a command's timeout act K times later on the host's clock
than their emulated spans, and what they record is in emulated seconds; Health reads the
engine's (host) times on the run's clock. Real clock, waits of a second or two."""

from __future__ import annotations

import statistics
import time

import pytest

from emu.agent.timebase import TimeBase
from emu.features.faults import FaultSchedule
from emu.run.health import HEALTH_POLL_S, Health, Seen
from tests.emu_run.test_fault_schedule import faults

K = 2.0
# A thread's wake-up on a loaded 2-core host: the bound on when a timer fired (host seconds).
LATE_S = 0.15


def dilated() -> TimeBase:
    return TimeBase(K, time.time())


class HostEngine:
    """Notes the host time of each action (a fault's engine, no containers)."""

    shaper = "relay"

    def __init__(self) -> None:
        self.log: list[tuple[str, str, float]] = []

    def kill(self, node): self.log.append(("kill", node, time.time()))
    def start(self, node): self.log.append(("start", node, time.time()))
    def paths(self): return {}


def test_a_fault_acts_at_the_host_time_of_its_emulated_time_and_records_emulated_seconds():
    clock = dilated()
    epoch = clock.now()
    engine = HostEngine()
    schedule = FaultSchedule(faults({"at": "0.3s", "crash": "gw-2", "for": "0.4s"}), engine,
                             epoch, timebase=clock)
    schedule.start()
    schedule._thread.join(5.0)
    schedule.finish()
    (kill, _, t_kill), (start, _, t_start) = engine.log
    assert (kill, start) == ("kill", "start")
    # at 0.3 and 0.7 emulated seconds from the epoch: 0.6 and 1.4 s of the host's clock
    assert clock.host(epoch + 0.3) <= t_kill < clock.host(epoch + 0.3) + LATE_S
    assert clock.host(epoch + 0.7) <= t_start < clock.host(epoch + 0.7) + LATE_S
    (row,) = [schedule.records[0]]
    assert 0.3 <= row.t_start < 0.3 + LATE_S / K and 0.7 <= row.t_end < 0.7 + LATE_S / K
    assert schedule.facts()["late_max_s"] < LATE_S / K


def test_undilated_the_same_fault_acts_at_its_time():
    clock = TimeBase()
    epoch = time.time()
    engine = HostEngine()
    schedule = FaultSchedule(faults({"at": "0.3s", "crash": "gw-2", "for": "0.4s"}), engine,
                             epoch, timebase=clock)
    assert schedule.clock is time.time  # nothing converted at K = 1
    schedule.start()
    schedule._thread.join(5.0)
    schedule.finish()
    (_, _, t_kill), (_, _, t_start) = engine.log
    assert epoch + 0.3 <= t_kill < epoch + 0.3 + LATE_S
    assert epoch + 0.7 <= t_start < epoch + 0.7 + LATE_S


def test_a_scheduled_migration_starts_at_the_host_time_of_its_at(monkeypatch):
    import emu.features.moves.dispatch
    from emu.features.migrations import MigrationSchedule
    from workloads.migration.record import MigrationRecord
    from workloads.scenario import ScheduledMigration

    clock = dilated()
    epoch = clock.now()
    called: list[float] = []

    def migrate(control, operator, source, target, strategy, settings, *, clock, **rest):
        called.append(time.time())
        return MigrationRecord(rest["record_id"], operator, strategy, source, target,
                               clock.now(), clock.now())

    monkeypatch.setattr(emu.features.moves.dispatch, "migrate", migrate)
    plans = [ScheduledMigration.model_validate({"at": 0.4, "operator": "count",
                                                "from": "gw-1", "to": "gw-2"})]
    schedule = MigrationSchedule(object(), plans, None, {}, epoch, clock=clock)
    schedule.start()
    schedule._thread.join(5.0)
    (record,) = schedule.finish()
    (t_called,) = called
    assert clock.host(epoch + 0.4) <= t_called < clock.host(epoch + 0.4) + LATE_S
    assert 0.4 <= record.start - epoch < 0.4 + LATE_S / K


def test_a_commands_timeout_is_emulated_seconds():
    from emu.control.commands import Controller

    for k in (1.0, K):
        control = Controller("127.0.0.1:1", clock=TimeBase(k, time.time()))
        began = time.monotonic()
        result = control.send(["gw-1"], "ping", timeout=0.3)  # no broker: nobody answers
        waited = time.monotonic() - began
        assert result.missing == ["gw-1"]
        assert 0.3 * k <= waited < 0.3 * k + LATE_S, (k, waited)
        # its times are on the run's clock: the 0.3 emulated seconds it waited
        assert result.duration == pytest.approx(0.3, abs=LATE_S / k)


def test_health_reads_the_engines_host_times_on_the_runs_clock():
    clock = TimeBase(K, 1000.0)
    health = Health(lambda: {}, [], ["broker"], timebase=clock)
    health.epoch = 1000.0  # the anchor: emulated and host agree there
    health.observe({"broker": Seen("running", started=990.0)}, clock.now())
    # stopped at host 1010 and started again at host 1014: emulated 1005 to 1007
    health.observe({"broker": Seen("running", started=1014.0, finished=1010.0)}, clock.now())
    assert health.facts() == {"broker": [[5.0, 7.0]]}
    # the engine is asked as often on the host's clock: K times as often in emulated time
    assert health.interval == pytest.approx(HEALTH_POLL_S / K)


def test_the_dilated_models_seconds_last_k_host_seconds_and_its_lag_is_emulated():
    from experiments.hybrid.realtime import RealTime

    clock = dilated()
    seen = []

    def build(env):
        def ticks():
            while True:
                seen.append((env.now, time.time()))
                yield env.timeout(0.1)
        env.process(ticks())

    epoch = clock.now() + 0.2
    model = RealTime(build, duration=0.6, clock=clock)
    model.start(epoch)
    lag = model.join(5.0)
    assert len(seen) >= 6
    late = sorted(wall - clock.host(epoch + t_model) for t_model, wall in seen)
    assert late[0] > -0.005  # never early, on the host's clock K times slower
    # On time give or take the host's scheduling: a quarter second holds on CI's loaded
    # parallel phase (an idle relay set's timers ran 67 ms late there); a clock that ignored
    # K would be early (above) or K times 0.1 s late.
    assert statistics.median(late) < 0.25
    # the lag is reported in emulated seconds: the host's over K
    assert lag.max == pytest.approx(max(late) / K, abs=0.05 / K)


def test_actions_time_decisions_on_the_runs_clock():
    from experiments.hybrid.actions import Actions

    clock = dilated()
    actions = Actions(clock.now, workers=1)
    actions.put("handover", "u-1", 0.0, lambda action: time.sleep(0.4))
    (done,) = actions.close(timeout=clock.host_seconds(5.0))
    assert done.ok
    # 0.4 host seconds of work: 0.2 emulated
    assert done.t_done - done.t_begun == pytest.approx(0.4 / K, abs=LATE_S / K)


def test_the_load_generator_emits_on_the_dilated_schedule(tmp_path):
    """Hybrid's simulated load at K = 2, into a local Mosquitto: it emits what its schedule
    says at the emulated times (the sent records), K times as far apart on the host, and its
    rate and lag are emulated."""
    from emu.agent.config import DriverConfig
    from experiments.hybrid.load import RECORDS, LoadGenerator, Target, planned
    from workloads.spark.local_broker import LocalMosquitto, find_mosquitto

    if find_mosquitto() is None:
        pytest.skip("mosquitto is not installed")
    load = DriverConfig("city", ["s-1", "s-2"], rate=10.0, arrivals="periodic", size=100,
                        qos=0, load=True)
    clock = dilated()
    with LocalMosquitto() as broker:
        target = Target("gw-1", 1, 5, f"{broker.host}:{broker.port}", (load,))
        epoch = clock.now() + 0.2
        generator = LoadGenerator([target], epoch, tmp_path / RECORDS, timebase=clock).start()
        began = time.monotonic()
        try:
            time.sleep(clock.until(epoch + 1.5))  # 1.5 emulated seconds: 3 on the host
        finally:
            generator.stop(drain=0.1)
        assert time.monotonic() - began >= 1.5 * K
    rows = [line.split(",") for line in
            (tmp_path / RECORDS / "sent.csv").read_text().splitlines()[1:]]
    sent = {int(row[0]): float(row[3]) for row in rows}
    schedule = {row[0]: row[3] for row in planned(target, epoch, 1.4)}
    # every reading due in the first 1.4 emulated seconds, at its emulated time
    assert set(schedule) <= set(sent) and len(sent) <= len(schedule) + 4
    late = [sent[i] - t for i, t in schedule.items()]
    assert min(late) > -1e-6 and max(late) < LATE_S / K, (min(late), max(late))
    facts = generator.facts()
    assert 15 <= facts["rate"] <= 25, facts  # 2 devices at 10/s of emulated time
    assert facts["lag_ms"]["p99"] < 100 / K, facts


def test_replication_reads_every_interval_of_emulated_time():
    """The controller's readings at K = 2: every `interval` of the run's clock (K times as far
    apart on the host), stamped in emulated seconds from the epoch."""
    from emu.agent.config import AgentConfig, OperatorConfig
    from emu.control.commands import CommandResult
    from emu.features.replication import Replication
    from tests.emu_run.test_fault_schedule import TOPOLOGY
    from topologies.model import expand
    from topologies.spec import TopologySpec
    from workloads.replication import ReplicationSpec

    asked: list[float] = []

    class Control:
        def send(self, nodes, command, args, timeout):
            asked.append(time.time())
            return CommandResult(command, timeout=timeout)  # nobody answered: no decision

    clock = dilated()
    configs = {"gw-1": AgentConfig(node="gw-1", mqtt="127.0.0.1:1", operators=[
        OperatorConfig("count", reads=["s"], slo=0.1)])}
    replication = Replication(Control(), ReplicationSpec(interval=0.25),
                              expand(TopologySpec.model_validate(TOPOLOGY)),
                              None, configs, timebase=clock)
    epoch = clock.now()
    replication.start(epoch)
    time.sleep(clock.host_seconds(0.9))
    replication.finish()
    # at 0.25, 0.5 and 0.75 emulated seconds: 0.5, 1.0 and 1.5 s of the host's
    assert len(asked) == 3, asked
    for k, t in enumerate(asked, start=1):
        assert clock.host(epoch + 0.25 * k) <= t < clock.host(epoch + 0.25 * k) + LATE_S
    times = [sample[0] for sample in replication.samples]
    assert times == pytest.approx([0.25, 0.5, 0.75], abs=LATE_S / K)
