"""The emulation's offload watcher (emu.features.energy_offload) around its real-time loop, with
stand-ins for a container's CPU counters and for emu.features.moves.dispatch.migrate (the
containers' run is tests/emu_run/test_energy_offload.py): an idle gateway decides at offload_time's
instant at its idle draw, a busy one reads its draw from its CPU time and decides sooner, one that
lasts the run decides nothing, and every operator of a gateway that decided is moved, in
order, with a failed move recorded. Real clock, about a second."""

from __future__ import annotations

import time

import pytest

from emu.agent.timebase import UNDILATED
from emu.features.energy_offload import Gauge, OffloadWatcher
from emu.host.metrics import Usage
from workloads.energy_offload import Offload, offload_time
from workloads.energy_power import Power
from workloads.migration.record import MigrationRecord

POWER = Power(1.0, 3.0)  # 1 W idle, 3 W at full load
# A wake-up on a loaded 2-core host: how late a decision may be (s).
LATE_S = 0.1


class Cpu:
    """A container's CPU counter that grows at `cores` CPU seconds per second."""

    def __init__(self, cores: float) -> None:
        self.cores, self.t0 = cores, time.time()

    def usage(self) -> Usage:
        return Usage(self.cores * (time.time() - self.t0), 0)


def gauge(name: str, capacity: float, operators: list[str]) -> Gauge:
    return Gauge(name, f"id-{name}", 1.0, 1.0, POWER, capacity, operators)


def test_gateways_decide_at_their_crossing_and_move_every_operator(monkeypatch) -> None:
    moves: list[tuple[str, str, str, str, float]] = []

    def migrate(control, operator, source, target, strategy, settings, **kw):
        now = time.time()
        moves.append((operator, source, target, strategy, now))
        if operator == "broken":
            raise RuntimeError("no agent answered")
        return MigrationRecord(kw["record_id"], operator, strategy, source, target, now,
                               now + 0.01)

    monkeypatch.setattr("emu.features.moves.dispatch.migrate", migrate)
    offload = Offload(gateways=["gw-*"], joules=1.0, interval=0.25)
    # idle: 1 W, so 0.8 J drawn (20 % left) at 0.8 s; busy: half its core, 2 W from its first
    # read (idle before it: 0.25 J by 0.25 s), so at 0.25 + 0.55 / 2 = 0.525 s;
    # lasting: 100 J, never within the run's 1.2 s.
    idle, busy = gauge("gw-idle", 1.0, ["a", "broken"]), gauge("gw-busy", 1.0, ["b"])
    lasting = gauge("gw-lasting", 100.0, ["c"])
    watcher = OffloadWatcher(None, offload, [idle, busy, lasting], "cloud-1", "pause_drain",
                             None, UNDILATED, 1.2,
                             cgroups={"gw-idle": Cpu(0.0), "gw-busy": Cpu(0.5),
                                      "gw-lasting": Cpu(0.0)})
    epoch = time.time()
    watcher.start(epoch)
    time.sleep(1.3)
    records = watcher.finish()

    assert idle.t == pytest.approx(offload_time(offload, 1.0, 0.0, 1.0), abs=LATE_S)
    assert idle.reason == "battery_low" and idle.drawn == pytest.approx(0.8, abs=LATE_S)
    assert busy.watts == pytest.approx(2.0, abs=0.05)
    assert busy.t == pytest.approx(0.25 + 0.55 / 2.0, abs=LATE_S)
    assert busy.t < idle.t
    assert lasting.t is None and lasting.reason is None
    assert lasting.drawn == pytest.approx(1.2, abs=LATE_S)  # idle over the run's time
    # The moves in the order the gateways decided, each operator of each, to the target.
    assert [m[:4] for m in moves] == [("b", "gw-busy", "cloud-1", "pause_drain"),
                                      ("a", "gw-idle", "cloud-1", "pause_drain"),
                                      ("broken", "gw-idle", "cloud-1", "pause_drain")]
    assert moves[1][4] - epoch == pytest.approx(idle.t, abs=LATE_S)
    assert [(r.operator, r.status) for r in records] == [("b", "done"), ("a", "done"),
                                                         ("broken", "failed")]
    assert "no agent answered" in records[2].error
    assert [r.id for r in records] == [0, 1, 2]
    assert watcher.left("gw-idle") == {"a"} and watcher.left("gw-lasting") == set()
    facts = {row["gateway"]: row for row in watcher.facts()}
    assert facts["gw-idle"]["operators"] == ["a", "broken"]
    assert facts["gw-idle"]["moved"] == ["a"]
    assert facts["gw-lasting"]["t"] is None and facts["gw-lasting"]["operators"] == []
