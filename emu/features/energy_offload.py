"""The energy-aware offload on real containers (`scenario.energy.offload` on emu, and on
hybrid, which runs the same features): each battery gateway's container watched while the run
measures, its operators moved to the cloud by emu.features.moves.dispatch when
workloads.energy_offload's rule says so.

The rule is workloads.energy_offload's (`offload_reason`, `offload_time`), the one the model's
watcher asks (sim.energy_policy); only the draw's source differs. Every `interval` (emulated
seconds) the gateway's container is read as the `nodes` table's sampler reads it (emu.host.metrics:
its cgroup's CPU time over the host seconds since the last read, as a share of its CPU
limit), turned into the emulated Pi's own utilisation by workloads.energy_power.hardware_share (the
limit in host cores at the calibration's QEMU speed, over the Pi's cores) and into watts by
its power profile, and added to what it drew at that draw. Between reads the charge runs
down at the last read draw, as a battery gauge's does: when `offload_time` at that draw falls
before the next read, the watcher wakes then, so a steady gateway moves at the instant its
charge crosses the threshold, as on the model.

The moves are made on a thread of their own, one at a time, in the order the gateways
decided (the watcher keeps reading the others meanwhile): each operator the gateway runs, by
`emu.features.moves.dispatch.migrate` with the offload's strategy, the records the run's
`migrations` table gets. Nothing is decided at or after the run's end (its last read is recorded),
and a move whose turn comes then is recorded refused (its start when its gateway decided). No way
back: the battery does not recharge, the operators stay where they went.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

from emu.agent.timebase import TimeBase
from emu.features.moves import dispatch
from emu.host.metrics import counters
from workloads.energy_offload import Offload, offload_reason, offload_time
from workloads.energy_power import Power


@dataclass
class Gauge:
    """One battery gateway as the watcher reads it; `t`, `reason` once it decided."""

    gateway: str
    container: str
    limit: float  # its container's CPU limit in host cores
    factor: float  # container share -> the emulated hardware's utilisation
    power: Power
    capacity: float
    operators: list[str]  # what it runs, in its config's order: what it sends away
    drawn: float = 0.0
    watts: float = 0.0
    t: float | None = None
    reason: str | None = None
    read_at: float = 0.0  # the run's time of the last read
    cpu: tuple[float, float] | None = None  # (host time, CPU seconds) of the last read
    moved: list[str] = field(default_factory=list)  # the operators whose move ended done

    def fact(self, target: str) -> dict:
        """The row the run's facts get, as the model's watcher's (EnergyOffload.fact)."""
        return {"gateway": self.gateway, "capacity_j": self.capacity, "t": self.t,
                "reason": self.reason, "drawn_j": self.drawn, "watts": self.watts,
                "target": target, "operators": list(self.operators) if self.t is not None
                else [], "moved": list(self.moved)}


class OffloadWatcher:
    """The run's battery gateways, watched from `start` to `finish` (see the module's
    docstring). `gauges`: one per gateway; `control`: the run's controller; `settings`: the
    scenario's migration settings; `node_control`: the engine's (Engine.node), for a
    container whose cgroup is not on this host (a task on another swarm node)."""

    def __init__(self, control, offload: Offload, gauges: list[Gauge], target: str,
                 strategy: str, settings, clock: TimeBase, duration: float,
                 node_control=None, cgroups: dict | None = None) -> None:
        self.control, self.policy, self.gauges = control, offload, gauges
        self.target, self.strategy, self.settings = target, strategy, settings
        self.clock, self.duration = clock, duration
        # gateway -> its CPU counters (emu.host.metrics.counters; given: a unit test's stand-ins)
        self.cgroups = cgroups if cgroups is not None else {
            g.gateway: counters(g.container,
                                node=node_control(g.gateway) if node_control else None)
            for g in gauges}
        self.records: list = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._moves: queue.Queue = queue.Queue()
        self._watcher = threading.Thread(target=self._watch, name="foglab-offload-watch",
                                         daemon=True)
        self._mover = threading.Thread(target=self._move, name="foglab-offload-moves",
                                       daemon=True)
        self.epoch = 0.0

    def start(self, epoch: float) -> None:
        self.epoch = epoch
        for gauge in self.gauges:
            gauge.watts = gauge.power.watts(0.0)  # idle until the first read says otherwise
            gauge.read_at = 0.0
            gauge.cpu = self._cpu(gauge)
        self._watcher.start()
        self._mover.start()

    def _cpu(self, gauge: Gauge) -> tuple[float, float] | None:
        try:
            return time.time(), self.cgroups[gauge.gateway].usage().cpu_s
        except (FileNotFoundError, ProcessLookupError, ValueError):
            return None  # its container is gone: it draws what it drew last (a fault's)

    def _read(self, gauge: Gauge, now: float) -> None:
        """The draw over the interval since the last read; the charge it took."""
        then, fresh = gauge.cpu, self._cpu(gauge)
        if then is not None and fresh is not None and fresh[0] > then[0]:
            spent = fresh[1] - then[1] if fresh[1] >= then[1] else fresh[1]  # restarted
            share = spent / (gauge.limit * (fresh[0] - then[0]))
            gauge.drawn += (now - gauge.read_at) * gauge.watts
            gauge.watts = gauge.power.watts(share * gauge.factor)
        else:
            gauge.drawn += (now - gauge.read_at) * gauge.watts
        gauge.cpu, gauge.read_at = fresh, now

    def _decide(self, gauge: Gauge, now: float, reason: str) -> None:
        gauge.t, gauge.reason = now, reason
        for operator in gauge.operators:
            self._moves.put((gauge, operator))

    def _watch(self) -> None:
        policy, clock = self.policy, self.clock
        waiting = list(self.gauges)
        early: set[str] = set()  # gateways whose crossing the float's slack left for the read
        next_read = policy.interval
        while waiting:
            now = clock.now() - self.epoch
            if now >= self.duration:
                break  # the run's time, as the energy table counts (not its drain)
            # The earliest crossing at the present draws, if it comes before the next read.
            crossings = [(offload_time(policy, g.capacity, g.drawn, g.watts, g.read_at), g)
                         for g in waiting if g.gateway not in early]
            crossing, first = min(crossings, key=lambda pair: pair[0],
                                  default=(float("inf"), None))
            wake = min(next_read, crossing, self.duration)
            if wake > now and clock.wait(self._stop, wake - now):
                return
            now = clock.now() - self.epoch
            if crossing <= now and crossing < next_read and now < self.duration:
                # A hair of float slack: at the crossing the charge left equals the threshold.
                drawn = first.drawn + (now - first.read_at) * first.watts
                reason = offload_reason(policy, first.capacity, drawn + 1e-9, first.watts)
                if reason is not None:
                    self._read(first, now)  # its draw up to this instant, then it moves
                    self._decide(first, now, reason)
                    waiting.remove(first)
                else:
                    early.add(first.gateway)
                continue
            if now < next_read and now < self.duration:
                continue  # woken early (a crossing the float's slack left for the read)
            early.clear()
            for gauge in list(waiting):
                self._read(gauge, min(now, self.duration))
                if now >= self.duration:
                    continue  # the run's last read: nothing is decided at its end
                reason = offload_reason(policy, gauge.capacity, gauge.drawn + 1e-9,
                                        gauge.watts)
                if reason is not None:
                    self._decide(gauge, now, reason)
                    waiting.remove(gauge)
            while next_read <= now:
                next_read += policy.interval

    def _move(self) -> None:
        while True:
            item = self._moves.get()
            if item is None:
                return
            gauge, operator = item
            now = self.clock.now()
            if now - self.epoch >= self.duration:  # its turn came after the run's end
                record = dispatch.MigrationRecord.refused(
                    len(self.records), operator, self.strategy, gauge.gateway, self.target,
                    self.epoch + gauge.t, now)
            else:
                record = dispatch.attempt(self.control, operator, gauge.gateway, self.target,
                                           self.strategy, self.settings,
                                           record_id=len(self.records), clock=self.clock)
            if record.status == "done":
                gauge.moved.append(operator)
            else:
                self.errors.append(f"{operator} from {gauge.gateway}: {record.error}")
            self.records.append(record)

    def finish(self) -> list:
        """Stop watching; wait for the moves already decided (a move begun is not cut); the
        records (emu.features.moves.dispatch.MigrationRecord)."""
        self._stop.set()
        if self._watcher.is_alive():
            self._watcher.join()
        if self._mover.is_alive():
            self._moves.put(None)
            self._mover.join()
        return self.records

    def left(self, node: str) -> set[str]:
        """The operators that moved away from `node` for good."""
        return {op for g in self.gauges if g.gateway == node for op in g.moved}

    def facts(self) -> list[dict]:
        return [gauge.fact(self.target) for gauge in self.gauges]

