"""Energy and cost in the model (`scenario.energy`): the `energy` table and facts, from the
utilisation and bytes the model records anyway, and devices' batteries.

- Nodes with a CPU: each sample interval of the `nodes` table (sim.sampler) at utilisation u
  costs interval * P(u) (workloads.energy_power.Power); a crashed node draws its idle power (the
  hardware stays on). u is the hardware's own: a calibrated model's CPU share is of the
  emulation's container limit, turned into the node's by
  workloads.energy_power.hardware_share.
- Infrastructure links: each interval's bytes of the `links` table times the link's energy
  per bit (workloads.energy_power.energy_per_bit), a row per direction.
- Devices and their radio links (thousands of them: as the links table, no row per
  interval): one row each for the run, a device's idle power for the run's duration plus its
  radio's energy per message sent (emitted counts), a radio link's bytes times its energy per
  bit; a device with a battery has a row per interval.
- Batteries: a battery device's sources are gated (sim.sources.Source.gate): before each
  emission the drain so far (idle power times the time, plus each message's radio energy) is
  weighed against the capacity, and an emission the battery cannot pay is not made. The device
  dies at the first instant its drain reaches the capacity: at its idle power's running out
  between emissions, or at an emission it cannot pay. The idle death's timer is set at a
  bound that holds for the next `left` emissions (of at most the device's largest radio
  energy each): fired, or passed by more emissions, it is set again from what was drawn; as
  the battery empties the bound tightens to the exact time, so the death is on time without
  an event per emission. It is
  then down (sim.model.Model.crashed: the crash listeners hear of it) and the faults table has
  a `battery` row for it.
- The offload (`offload`): each gateway it names is watched by sim.energy_policy.EnergyOffload
  (a process per gateway, every `interval`), which moves its operators to the target through
  the model's migration coordinator when the rule says so: a row per move in the migrations
  table, and a row per gateway watched in the facts' `offloads` (when, why, what it had
  drawn). Only with an offload is the feature dynamic (`moves`): the model then keeps no
  direct hand-over, which is exact only for instances that never move.
So nothing runs on the hot path unless a device has a battery, and then only its emissions
pay for the check. Every figure is over the run's duration (not its drain).
"""

from __future__ import annotations

import json
import math
from array import array

import numpy as np

from sim.energy_policy import EnergyOffload
from sim.features.base import Feature
from sim.migration import OneAtATime
from sim.sampler import row_starts
from workloads.energy import EnergySpec, battery_of
from workloads.energy_ledger import Ledger
from workloads.energy_offload import offload_target
from workloads.energy_power import hardware_share, radio_energy
from workloads.energy_prices import load_prices
from workloads.faults import columns as fault_columns

FAULT_COLUMNS = ("kind", "target", "t_start", "t_end", "params")


class _Battery:
    """One device's battery: what it drew so far and when it died."""

    __slots__ = ("device", "capacity", "idle", "need", "sent", "times", "drawn", "sizes",
                 "death", "timer", "left")

    def __init__(self, device: str, capacity: float, idle: float, need: float):
        self.device = device
        self.capacity = capacity
        self.idle = idle  # watts
        self.need = need  # the largest radio energy of one of its messages
        self.sent = 0.0  # joules its radio spent so far
        self.times = array("d")  # each emission's time and radio energy
        self.drawn = array("d")
        self.sizes = array("q")
        self.death = math.inf
        self.timer = 0  # the idle death's timer in force (a counter: earlier ones are stale)
        self.left = 0  # emissions the timer's bound holds for
    def idle_death(self) -> float:
        """When the idle power alone empties what is left, from the emissions so far."""
        if self.idle <= 0:
            return math.inf
        return (self.capacity - self.sent) / self.idle


class Energy(Feature):
    """The energy table, batteries, the offload and the run's cost (sim.model.Model)."""

    @classmethod
    def moves(cls, spec: EnergySpec) -> bool:
        """Dynamic (it moves operator instances) only with an offload."""
        return spec.offload is not None

    def __init__(self, model, spec: EnergySpec):
        super().__init__(model, spec)
        self.env = model.env
        topology = model.topology
        self.duration = model.settings.duration
        self.prices = load_prices(spec.prices)
        self.ledger = Ledger(spec, topology, self.duration)
        self.power = self.ledger.power
        # The nodes table's CPU share is of the model's CPU (with a calibration: of the
        # emulation's container limit at the calibrated speed); the power model takes the
        # hardware's own (taken before any fault slows a CPU).
        self.factor = {name: hardware_share(cpu.capacity, cpu.speed,
                                            topology.nodes[name].profile)
                       for name, cpu in model.cpus.items()}
        self.batteries: dict[str, _Battery] = {}
        need: dict[str, float] = {}
        for source in model.sources:
            device = model.node_names[source.device_index]
            need[device] = max(need.get(device, 0.0),
                               radio_energy(spec.radio, source.stream.size))
        for device, capacity in battery_of(spec, topology).items():
            self.batteries[device] = _Battery(device, capacity, self.power[device].idle,
                                              need.get(device, 0.0))
        self.deaths: list[tuple[str, float]] = []
        for source in model.sources:
            battery = self.batteries.get(model.node_names[source.device_index])
            if battery is not None:
                source.gate(self._gate(battery, radio_energy(spec.radio, source.stream.size),
                                       source.stream.size))
        for battery in self.batteries.values():
            self._arm(battery, 0.0)
        offload = spec.offload
        self.offloads: list[EnergyOffload] = []
        if offload is not None:
            target = offload_target(offload, topology)
            queue = OneAtATime(model)  # gateways running one operator move it in turn
            self.offloads = [EnergyOffload(model, offload, gateway, offload.capacity, target,
                                           spec, offload.strategy, queue)
                             for gateway in topology.select(offload.gateways)]

    # -- batteries ------------------------------------------------------------------------

    def _gate(self, battery: _Battery, need: float, size: int):
        """What a battery device's source asks before each emission (of `need` joules)."""
        times, drawn, sizes = battery.times.append, battery.drawn.append, battery.sizes.append

        def allow(_source, now: float) -> bool:
            """Whether the battery pays for this emission; the device dies if not."""
            if battery.death < math.inf:
                return False
            if battery.idle * now + battery.sent + need > battery.capacity:
                self._die(battery, min(now, battery.idle_death()))
                return False
            battery.sent += need
            times(now)
            drawn(need)
            sizes(size)
            battery.left -= 1
            if battery.left < 0:
                self._arm(battery, now)
            return True
        return allow

    def _arm(self, battery: _Battery, now: float) -> None:
        """The idle death's timer, at a time it cannot come before while at most `left` more
        emissions are made (an earlier timer is stale): half the energy left pays for them,
        at most 64; none once less is left than two of them, and the timer is exact."""
        if battery.idle <= 0:
            return  # it dies at an emission it cannot pay, if ever
        remaining = battery.capacity - battery.sent - battery.idle * now
        if battery.need > 0:
            left = min(64, int(remaining / (2 * battery.need))) if remaining > 0 else 0
        else:
            left = 1 << 62  # emissions draw nothing: the idle death is exact whatever comes
        battery.left = left
        t = (battery.capacity - battery.sent - min(left, 64) * battery.need) / battery.idle \
            if battery.need > 0 else battery.idle_death()
        battery.timer += 1
        if t > self.duration:
            return
        mine = battery.timer
        self.env.event_at(t).callbacks.append(lambda _: self._due(battery, mine))

    def _due(self, battery: _Battery, mine: int) -> None:
        """The timer: the battery is empty now, or the bound passed and is set again."""
        if battery.timer != mine or battery.death < math.inf:
            return
        now = self.env.now
        death = battery.idle_death()
        if death <= now + 1e-12:
            self._die(battery, death)
        else:
            self._arm(battery, now)

    def _die(self, battery: _Battery, t: float) -> None:
        if battery.death < math.inf:
            return
        battery.death = t
        battery.timer += 1  # no timer of it fires any more
        device = battery.device
        index = self.model.node_index[device]
        for source in self.model.sources:
            if source.device_index == index:
                source.end = min(source.end, t)
        self.deaths.append((device, t))
        self.model.crashed(device, self.env.now)

    # -- the table ------------------------------------------------------------------------

    def finish(self, tables: dict, facts: dict) -> None:
        model, topology, spec = self.model, self.model.topology, self.spec
        ledger = self.ledger
        interval = model.settings.sample
        nodes, factor = tables["nodes"], self.factor
        for t0, t, name, share in zip(row_starts(nodes["t"]), nodes["t"], nodes["node"],
                                      nodes["cpu"], strict=True):
            ledger.cpu(t0, float(t), name, float(share) * factor[name])
        links = tables["links"]
        for t0, t, src, dst, count in zip(row_starts(links["t"]), links["t"], links["src"],
                                          links["dst"], links["bytes"], strict=True):
            ledger.link(t0, float(t), src, dst, int(count))
        radio: dict[str, float] = {}
        sent: dict[str, int] = {}
        for source in model.sources:
            device = model.node_names[source.device_index]
            size = source.stream.size
            radio[device] = radio.get(device, 0.0) + source.emitted * radio_energy(spec.radio,
                                                                                  size)
            sent[device] = sent.get(device, 0) + source.emitted * size
        for node in topology.of_kind("device"):
            battery = self.batteries.get(node.name)
            if battery is None:
                ledger.device(node.name, sent.get(node.name, 0), radio.get(node.name, 0.0))
            else:
                self._battery_rows(battery, interval)
        # The radio links, one row each for the run (their bytes as the channels counted).
        for (src, dst), channel in model.network.channels.items():
            if topology.nodes[src].kind == "device" or topology.nodes[dst].kind == "device":
                ledger.link(0.0, self.duration, src, dst, channel.bytes)
        ledger.unsampled()
        tables["energy"] = ledger.table()
        if self.deaths:
            self._record_deaths(tables)
        facts["energy"] = ledger.facts(self._delivered(), dict(self.deaths), self.prices)
        if self.spec.offload is not None:
            facts["energy"]["offloads"] = [watch.fact() for watch in self.offloads]

    def _battery_rows(self, battery: _Battery, interval: float) -> None:
        """A battery device's rows, interval by interval: its idle power while alive and
        the radio energy of the readings it sent in each."""
        end = self.duration
        count = max(1, math.ceil(end / interval - 1e-9))
        starts = np.arange(count) * interval
        ends = np.minimum(starts + interval, end)
        times = np.frombuffer(battery.times, dtype=np.float64)
        which = np.minimum((times // interval).astype(np.int64), count - 1)
        drawn = np.bincount(which, np.frombuffer(battery.drawn, dtype=np.float64), count)
        sizes = np.bincount(which, np.frombuffer(battery.sizes, dtype=np.int64), count)
        alive = np.clip(np.minimum(ends, battery.death) - starts, 0.0, None)
        self.ledger.device_intervals(battery.device, starts.tolist(), ends.tolist(),
                                     sizes.astype(np.int64).tolist(),
                                     (battery.idle * alive + drawn).tolist())

    def _record_deaths(self, tables: dict) -> None:
        """A `battery` row per dead device in the faults table, after the faults scheduled
        (sim.features: this feature finishes after the faults feature has written it)."""
        faults = tables.get("faults") or fault_columns([])
        merged = {name: list(faults[name]) for name in FAULT_COLUMNS}
        for device, t in self.deaths:
            capacity = self.batteries[device].capacity
            for name, value in zip(FAULT_COLUMNS, ("battery", device, t, math.nan,
                                                   json.dumps({"capacity_j": capacity})),
                                   strict=True):
                merged[name].append(value)
        tables["faults"] = merged

    def _delivered(self) -> int:
        """Readings delivered by the run's end (the messages table's `delivered`): this
        feature finishes last, when every other has recorded its ends in the log."""
        log = self.model.log
        sinks = np.frombuffer(log.sink, dtype=np.int32)
        received = np.frombuffer(log.t_received, dtype=np.float64)
        count = int(np.count_nonzero((sinks >= 0) & (received <= self.env.now)))
        del sinks, received  # no view may outlive this
        return count
