"""Failure detection and recovery in the model (`scenario.recovery`, an operator's
`checkpoint`): the same detector and re-placement as the emulation's (workloads.recovery,
emu.features.recovery), on the model's clock, network and CPUs.

- Checkpoints: every `checkpoint` seconds, half a period off the run's grid (at
  (k + CHECKPOINT_PHASE) * checkpoint, as the agents take them: between window closes, never
  at one), each instance of such an operator snapshots its open window (its events, count,
  last serial number) to the state store; a snapshot due at a crash's instant is taken before
  the crash (before any other event of that instant). Windowed instances count each input
  when its job finishes (not when it is admitted, as they otherwise may), so that a snapshot
  and a crash see only finished work.
- Detection: sim.features.faults tells `Recovery` (sim.model.Model.on_crash) when a
  gateway or cloud VM crashes; ZooKeeper expires the node's agent session at
  `workloads.recovery.expiry`, with the agent's ping phase (one per node) and the server's
  tick phase drawn from the model's `recovery` stream.
  A node that comes back meanwhile (a crash `for` a while) is noticed all the same: on emu its
  container starts again without its agent, so the session is not renewed.
- Input: from the crash on, the broker holds the operator's input (the hold of a migration's
  pause, sim.migration; the operator's whole group, as a pause holds it); its QoS 1 messages
  then on their way to the dead instance are held too (unacknowledged, they are sent again
  to whoever takes the session over), QoS 0 ones are lost, on the way as in the hold (the
  broker writes them into the dead connection); what the instance had admitted on its CPU
  but not processed is lost with it (sim.features.faults drops it).
- A snapshot whose window the crashed instance had closed and sent on before the crash (a
  crash after a window's close, before the next checkpoint) is restored without it: the new
  instance starts with the window that was open at the crash, empty (the agents mark each
  window they send in ZooKeeper, emu.agent.checkpoint, and drop the same).
- Re-placement: the controller takes the crashed node's operators one after the other, in
  the order detected (emu.features.recovery's worker thread does): each goes to `place` over
  `candidates` (the live nodes of `recovery.to`, less the crashed node and those that run
  the operator already), weighed by the path latency from its input devices. The restore
  costs what a pause_transfer migration charges for the same steps (sim.migration's
  Coordinator): a command to the target, each chunk of the checkpoint read from the store
  (`chunk_overhead` each), its bytes loaded at `restore_bandwidth` on the target's CPU, the
  resume command; then the broker hands the held input to the new instance, in order.
- Recorded: the `recoveries` table (experiments.schema), a row per (node, operator):
  `rolled_back` is what the crashed instance processed after the snapshot restored (none: the
  open window at the crash for a windowed operator, nothing for a stateless one), `lost` its
  input that reached no instance; an operator left with no live candidate keeps its input
  held until the run ends, when it is lost, and has a row with target "" and NaN times.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

import numpy as np
from simpy.core import URGENT

from sim.features.base import Feature
from sim.windowed import OpenWindow, WindowedInstance
from workloads.recovery import (
    CHECKPOINT_PHASE,
    ZK_TICK_S,
    RecoverySpec,
    candidates,
    expiry,
    input_devices,
    ping_interval,
    place,
)

AGENT_KINDS = ("gateway", "cloud_vm")  # nodes whose agents hold a ZooKeeper session
COLUMNS = ("node", "operator", "target", "t_crash", "t_detected", "t_recovered", "detect",
           "recover", "t_checkpoint", "state_bytes", "held", "rolled_back", "lost")


@dataclass(slots=True)
class Snapshot:
    """An instance's checkpoint: when, its open window, and how many inputs it had processed."""

    t: float
    state: OpenWindow
    processed: int


@dataclass
class Row:
    """One re-placement, as the recoveries table records it."""

    node: str
    operator: str
    t_crash: float
    group: object
    old: object
    snapshot: Snapshot | None
    rolled_back: int
    lost: int = 0
    inflight: list = field(default_factory=list)  # QoS 1 input taken off the way to `old`
    target: str = ""
    t_detected: float = math.nan
    instance: object = None  # the new one
    resumed: bool = False
    state_bytes: int | None = None
    held: int | None = None
    open_index: int = -1  # the window the crashed instance had open (sent on those before)


class Recovery(Feature):
    """Checkpoints, detects crashed agents and re-places their operators (sim.model.Model)."""

    dynamic = True  # it puts new instances in crashed ones' places

    def __init__(self, model, spec: RecoverySpec):
        super().__init__(model, spec)
        self.env = model.env
        workload = model.workload
        self.settings = model.coordinator.settings  # the migration costs a restore pays
        self.rows: list[Row] = []
        self.snapshots: dict[object, Snapshot] = {}  # instance -> its last checkpoint
        self._queue: list[Row] = []  # detected, waiting for the controller
        self._busy = False
        topology = model.topology
        rng = random.Random(f"{model.settings.seed}:recovery")
        self.tick_phase = rng.uniform(0.0, ZK_TICK_S)  # one ZooKeeper server
        every = ping_interval(spec.session_timeout)
        self.phase = {node.name: rng.uniform(0.0, every) for node in topology.nodes.values()
                      if node.kind in AGENT_KINDS}
        self.sources = {spec_.name: input_devices(spec_.reads, workload, topology)
                        for spec_ in model.specs.values()}
        for group in model.every_group():
            for instance in group.instances:
                if isinstance(instance, WindowedInstance):
                    instance.eager = False
        for spec_ in model.specs.values():
            if spec_.checkpoint is not None:
                self._at(0, spec_.name, spec_.checkpoint)
        model.on_crash(self._crashed)

    # -- checkpoints ----------------------------------------------------------------------

    def _at(self, k: int, operator: str, period: float) -> None:
        """The k-th checkpoint of `operator` (from 0), at k + CHECKPOINT_PHASE periods, before
        the instant's other events (a crash at that instant included)."""
        t = (k + CHECKPOINT_PHASE) * period
        if t > self.model.settings.duration:
            return
        self.env.event_at(t, URGENT).callbacks.append(
            lambda _: self._checkpoint(k, t, operator, period))

    def _checkpoint(self, k: int, t: float, operator: str, period: float) -> None:
        down = self.model.down
        for group in self.model.groups_of(operator):
            for instance in group.instances:
                if instance.node not in down and instance.active:
                    self.snapshots[instance] = Snapshot(t, replace(instance.open),
                                                        instance.processed)
        self._at(k + 1, operator, period)

    # -- the crash ------------------------------------------------------------------------

    def _crashed(self, node: str, now: float) -> None:
        """Before sim.features.faults drops the node's work: hold each of its operators' input, take
        what was on its way to them, count what dies with them, and await the detection."""
        model = self.model
        if model.topology.nodes[node].kind not in AGENT_KINDS:
            return
        rows = []
        recovering = {id(r.old) for r in self.rows if not r.resumed}
        for group in model.every_group():
            old = group.on_node.get(node)
            if old is None or id(old) in recovering:  # down again before it was re-placed
                continue
            group.paused = True
            row = Row(node, model.operator_of(group.name).name, now, group, old,
                      self.snapshots.get(old), self._rolled_back(old))
            row.lost = self._take_inflight(row) + self._unprocessed(row)
            if isinstance(old, WindowedInstance):
                row.open_index = old.open.index
                old.stop()
            rows.append(row)
        if not rows:
            return
        self.rows.extend(rows)
        t_detected = expiry(now, self.spec.session_timeout, self.phase[node], ZK_TICK_S,
                            self.tick_phase)
        if t_detected >= self.model.settings.duration:
            return  # the controller stops watching at the run's end (as emu's): not detected
        self.env.event_at(t_detected).callbacks.append(lambda _: self._detected(rows))

    def _rolled_back(self, old) -> int:
        """What the crashed instance processed after the snapshot it is restored from."""
        if not isinstance(old, WindowedInstance):
            return 0
        snapshot = self.snapshots.get(old)
        if snapshot is not None:
            return old.processed - snapshot.processed
        spec = self.model.operator_of(old.operator)
        return old.processed if spec.checkpoint is not None else old.open.count

    def _take_inflight(self, row: Row) -> int:
        """The messages on their way to the dead instance: QoS 1 ones to be handed to the new
        one, in order; QoS 0 ones lost. Returns how many were lost."""
        receive = row.old.receive
        # The broker sends each again from its leg's start.
        taken = self.model.network.take_back(lambda msg: msg.deliver == receive)
        taken.sort(key=lambda msg: (msg.sn, msg.id))
        row.inflight = [msg.copy() for msg in taken if msg.qos]
        lost = [msg for msg in taken if not msg.qos]
        for msg in lost:
            self.model.log.lost(msg, self.env.now)
        return len(lost)

    def _unprocessed(self, row: Row) -> int:
        """The inputs the dead instance had admitted on its CPU but not processed
        (sim.features.faults drops them next): jobs waiting for their finish, and a sink's
        inputs recorded with their finish after now."""
        old, env = row.old, self.env
        owner = old.completions
        waiting = env.count(lambda event: event.callbacks is owner)
        if old.log is None or isinstance(old, WindowedInstance):
            return waiting
        log = self.model.log
        sinks = np.frombuffer(log.sink, dtype=np.int32)
        later = np.frombuffer(log.t_received, dtype=np.float64) > env.now
        read = [s.stream_index for s in self.model.sources if row.group.reads(s.topic)]
        streams = np.isin(np.frombuffer(log.stream, dtype=np.int32), read)
        recorded = int(np.count_nonzero((sinks == old.node_index) & later & streams))
        del sinks, later, streams  # the arrays grow again: no view may outlive this
        return waiting + recorded

    # -- the controller -------------------------------------------------------------------

    def _detected(self, rows: list[Row]) -> None:
        for row in rows:
            row.t_detected = self.env.now
        self._queue.extend(rows)
        if not self._busy:
            self._busy = True
            self.env.process(self._controller())

    def _controller(self):
        """One re-placement after the other, as the emulation's controller does them; none
        begins at or after the run's end (one under way then finishes)."""
        while self._queue and self.env.now < self.model.settings.duration:
            yield from self._recover(self._queue.pop(0))
        self._queue.clear()
        self._busy = False

    def _recover(self, row: Row):
        model, settings = self.model, self.settings
        coordinator = model.coordinator
        group = row.group
        down = model.down
        hosting = [i.node for i in group.instances if i is not row.old]
        options = [n for n in candidates(self.spec.to, model.topology, down | {row.node},
                                         hosting) if n in model.cpus]
        target = place(options, self.sources[row.operator], coordinator.latency)
        if target is None:
            return
        row.target = target
        yield self.env.timeout(coordinator.command(target))  # recover: to the target
        state = None
        row.state_bytes = 0
        if row.snapshot is not None:
            state = replace(row.snapshot.state)
            row.state_bytes = state.state_bytes(settings.state_per_event, settings.state_base)
            if state.index < row.open_index:
                # Its window closed and went on before the crash (the agents mark each
                # window sent, emu.agent.checkpoint): not again; start at the one open then.
                state = OpenWindow(row.open_index)
            remaining = row.state_bytes
            while remaining > 0:  # each chunk read from the store
                size = min(settings.chunk, remaining)
                yield from coordinator.carry(coordinator.store, target, size)
                yield self.env.timeout(settings.chunk_overhead)
                remaining -= size
        instance = model.instance_on(group, target, state)
        if isinstance(instance, WindowedInstance):
            instance.eager = False
        if row.state_bytes:
            load = row.state_bytes * 8 / settings.restore_bandwidth
            yield self.env.timeout(instance.cpu.admit(self.env.now, load) - self.env.now)
        yield self.env.timeout(coordinator.command(target))  # resume: it takes the session
        group.replace(row.old, instance)
        row.instance = instance
        row.resumed = True
        if not any(r.group is group and not r.resumed for r in self.rows):
            group.paused = False  # (an operator left without a node holds its group's input)
        held, group.held = group.held, []
        held = row.inflight + held
        row.inflight = []
        broker = model.broker_serving(group)
        row.held = 0
        for msg in held:
            if msg.qos:
                broker.send(msg, instance)
                row.held += 1
            else:  # written into the dead connection meanwhile
                model.log.lost(msg, self.env.now)
                row.lost += 1

    # -- the table ------------------------------------------------------------------------

    def finish(self, tables: dict, facts: dict) -> None:
        """The recoveries table; the input still held for an operator that never came back
        is lost (recorded in the messages table)."""
        model = self.model
        for row in self.rows:
            if row.resumed:
                continue
            for msg in row.inflight + row.group.held:
                model.log.lost(msg, self.env.now)
                row.lost += 1
            row.inflight, row.group.held = [], []
        columns: dict[str, list] = {name: [] for name in COLUMNS}
        for row in self.rows:
            first = row.instance.first_processed if row.instance is not None else math.inf
            t_recovered = first if first < math.inf else math.nan
            t_checkpoint = (row.snapshot.t if row.snapshot is not None and row.resumed
                            else math.nan)
            values = (row.node, row.operator, row.target, row.t_crash, row.t_detected,
                      t_recovered, row.t_detected - row.t_crash, t_recovered - row.t_crash,
                      t_checkpoint, row.state_bytes, row.held, row.rolled_back, row.lost)
            for name, value in zip(COLUMNS, values, strict=True):
                columns[name].append(value)
        floats = ("t_crash", "t_detected", "t_recovered", "detect", "recover", "t_checkpoint")
        tables["recoveries"] = {name: np.array(values, dtype=float if name in floats else object)
                                for name, values in columns.items()}
