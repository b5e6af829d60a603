"""Operator migration in the model: the protocols of thesis chapters 5 and 6 as SimPy processes.

- pause_drain (stateless operators): pause the input (the broker holds it), let the source
  instance finish what it has, switch the subscription to the target, release the input.
- pause_transfer (chapter 5): the same, and between drain and release the open window's state
  travels in `chunk`-sized pieces through a ZooKeeper-like store: each piece crosses the
  network to the store, costs `chunk_overhead` (znode write, watch, read, delete) and crosses
  to the target; the target loads the state before any new event.
- parallel (chapter 6): the target starts beside the source, the broker mirrors the input to
  both with serial numbers, and a consistency checker on the broker's node
  (workloads.migration.Synchroniser) forwards the right window outputs until the two are
  consistent; then the source is terminated.

Every coordinator command costs the network latency to the agent and back plus `command`.

Downtime, which the thesis never defines operationally ("output is halted due to processing
being paused"), is defined here as the time from the pause (the broker starts holding the
operator's input) until the target has processed the first held event, or until the resume when
nothing was held; 0 for parallel migration, where the target processes before the source
stops. `output_gap` is what a consumer downstream sees: the longest gap between consecutive
window outputs that overlaps the migration, beyond the window size.

A migration still under way when the run (its duration and drain) ends is recorded `unfinished`,
with no end. Nothing starts at or after the run's duration, whoever asks (a scheduled move, a
policy's, an offload's): such a move is recorded `refused` and never begins.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from sim.recorder import WindowLog
from sim.windowed import WindowedInstance, WindowOutput
from workloads.migration import Side, Synchroniser
from workloads.migration.measures import coverage, output_gap
from workloads.migration.record import MigrationRecord as SharedRecord
from workloads.scenario import MigrationSettings, ScheduledMigration


@dataclass
class MigrationRecord(SharedRecord):
    """The shared record, and the target's instance, whose first processed event ends the
    downtime."""

    target_instance: object = None


@dataclass
class _Checking:
    """A parallel migration's consistency checker, the source (old) operator, and the event
    that fires when the two are consistent."""

    checker: Synchroniser
    old: WindowedInstance
    consistent: object


class Coordinator:
    """Runs migrations; keeps each migrated operator's forwarded window outputs for metrics."""

    def __init__(self, model, settings: MigrationSettings):
        self.model = model
        self.env = model.env
        self.settings = settings
        self.node = self._coordinator_node()
        self.store = settings.store or self.node
        self.records: list[MigrationRecord] = []
        self.forwarded = WindowLog()  # the window outputs that went downstream
        self._active: dict[str, MigrationRecord] = {}  # operator -> its running migration
        self._latencies: dict[tuple[str, str], float] = {}
        self._checkers: dict[str, _Checking] = {}  # operators in a parallel migration

    def _coordinator_node(self) -> str:
        topology = self.model.topology
        for kind in ("coordinator", "broker"):
            nodes = topology.of_kind(kind)
            if nodes:
                return nodes[0].name
        return next(iter(topology.nodes))

    # -- outputs ----------------------------------------------------------------------------

    def window_closed(self, instance: WindowedInstance, output: WindowOutput) -> None:
        """Every window output comes here; during a parallel migration it first crosses to
        the consistency checker on the broker's node."""
        checking = self._checkers.get(output.operator)
        if checking is None:
            self._forward(output, output.last_sn, output.count, False)
            return
        delay = self.latency(instance.node, self._broker_of(instance))
        self.env.process(self._to_checker(instance, output, delay))

    def _to_checker(self, instance, output: WindowOutput, delay: float):
        yield self.env.timeout(delay)
        checking = self._checkers.get(output.operator)
        if checking is None:
            self._forward(output, output.last_sn, output.count, False)
            return
        side = Side.OLD if instance is checking.old else Side.NEW
        for forwarded in checking.checker.offer(side, (output.last_sn, output.count)):
            self._forward(output, forwarded.sn, forwarded.count, forwarded.adjusted)
        if checking.checker.synchronised and not checking.consistent.triggered:
            checking.consistent.succeed()

    def _forward(self, output: WindowOutput, last_sn: int, count: int, adjusted: bool) -> None:
        record = self._active.get(output.operator)
        self.forwarded.append(self.env._now, output, last_sn, count,
                              record.id if record else -1, adjusted)
        self.model.window_forwarded(output)

    # -- protocols --------------------------------------------------------------------------

    def schedule(self, plan: ScheduledMigration, start: float) -> None:
        """A migration planned in the scenario, at `start`."""
        self.env.process(self._scheduled(plan, start))

    def _scheduled(self, plan: ScheduledMigration, start: float):
        yield self.env.timeout(max(0.0, start - self.env.now))
        group = self.model.group(plan.operator)
        source = group.on_node.get(plan.source) if plan.source else group.instances[0]
        yield from self._migrate(group, source, plan.target,
                                 plan.strategy or self.settings.strategy)

    def start(self, group, source, target: str, strategy: str | None, done=None,
              decided: float | None = None) -> None:
        """A migration a policy decided, now; `done(ok)` is called when it has ended
        (`done(False)`: refused). `decided`: when it was decided, if before now (a move
        queued behind another): a refused one's start."""
        self.env.process(self._migrate(group, source, target, strategy or self.settings.strategy,
                                       done, decided))

    def _migrate(self, group, source, target: str, strategy: str, done=None,
                 decided: float | None = None):
        now = self.env.now
        if now >= self.model.settings.duration:
            # Nothing starts at or after the run's end (the drain only lets what is in flight
            # arrive): whoever asked for it, the move is recorded refused and never begins.
            self.records.append(SharedRecord.refused(
                len(self.records), group.name, strategy, source.node, target,
                now if decided is None else decided, now))
            if done is not None:
                done(False)
            return
        down = [node for node in (source.node, target) if node in self.model.down]
        if down:
            # A crashed node answers no command (emu.features.moves.dispatch.attempt: a move that
            # could not begin is failed): the operator stays where it is.
            self.records.append(SharedRecord(
                len(self.records), group.name, strategy, source.node, target, now, now,
                status="failed", error=f"{' and '.join(down)} down (crashed) when it began"))
            if done is not None:
                done(False)
            return
        record = MigrationRecord(len(self.records), group.name, strategy, source.node, target,
                                 now, status="unfinished")
        self.records.append(record)
        self._active[group.name] = record
        protocol = {"pause_drain": self._pause_drain, "pause_transfer": self._pause_transfer,
                    "parallel": self._parallel}[strategy]
        yield from protocol(group, source, target, record)
        record.end = self.env.now
        record.status = "done"
        del self._active[group.name]
        if done is not None:
            done()

    def _pause_drain(self, group, source, target: str, record: MigrationRecord):
        yield from self._pause_and_move(group, source, target, record, transfer=False)

    def _pause_transfer(self, group, source, target: str, record: MigrationRecord):
        yield from self._pause_and_move(group, source, target, record, transfer=True)

    def _pause_and_move(self, group, source, target: str, record: MigrationRecord,
                        transfer: bool):
        settings = self.settings
        # Role assignment to both agents, then launch-retrieve to the target, whose start-up
        # overlaps the source's pause, drain and state transfer.
        yield self.env.timeout(max(self.command(source.node), self.command(target)))
        ready = self.env.now + self.command(target) + settings.launch
        yield self.env.timeout(self.command(source.node))  # pause-transfer
        group.paused = True
        record.paused = self.env.now
        if source.pending > 0:  # drain: what the broker already sent must be processed
            source.drained = self.env.event()
            yield source.drained
        state = source.stop() if isinstance(source, WindowedInstance) else None
        if transfer and state is not None:
            record.state_bytes = state.state_bytes(settings.state_per_event, settings.state_base)
            yield from self._transfer(source.node, target, record, ready)
        yield self.env.timeout(max(0.0, ready - self.env.now))
        instance = self.model.instance_on(group, target, state)
        if record.state_bytes:
            # The target processes the transferred state before any new event.
            load = record.state_bytes * 8 / settings.restore_bandwidth
            yield self.env.timeout(instance.cpu.admit(self.env.now, load) - self.env.now)
        group.replace(source, instance)
        group.paused = False
        held, group.held = group.held, []
        record.held = len(held)
        record.resumed = self.env.now
        record.target_instance = instance
        broker = self.model.broker_serving(group)
        for msg in held:
            broker.send(msg, instance)
        yield self.env.timeout(self.command(target) + settings.housekeeping)

    def _transfer(self, source: str, target: str, record: MigrationRecord, ready: float):
        """Alg. 5.1/5.2: one chunk at a time through the store; the source writes the next only
        when the target, once it is up (`ready`), has read and deleted the previous one; then
        an 'end' flag."""
        settings = self.settings
        remaining = record.state_bytes
        while remaining > 0:
            size = min(settings.chunk, remaining)
            yield from self.carry(source, self.store, size)
            yield self.env.timeout(settings.chunk_overhead)
            yield self.env.timeout(max(0.0, ready - self.env.now))
            yield from self.carry(self.store, target, size)
            yield self.env.timeout(self.latency(target, self.store))  # delete: store empty
            remaining -= size
            record.chunks += 1
        yield from self.carry(source, self.store, 1)  # the 'end' flag
        yield from self.carry(self.store, target, 1)

    def _parallel(self, group, source, target: str, record: MigrationRecord):
        settings = self.settings
        yield self.env.timeout(max(self.command(source.node), self.command(target)))
        yield self.env.timeout(self.command(source.node))  # divert the source
        checking = self._checkers[record.operator] = _Checking(
            Synchroniser(settings.sync), source, self.env.event())
        yield self.env.timeout(self.command(target) + settings.launch)  # launch-divert
        instance = self.model.instance_on(group, target, None)
        if isinstance(instance, WindowedInstance):
            instance.recording = False  # the source's consumption is the one on record
        group.mirror = instance
        yield checking.consistent
        record.synchronised = checking.checker.mode.value if checking.checker.mode else ""
        yield self.env.timeout(self.command(source.node))  # terminate the source
        source.stop()
        if isinstance(instance, WindowedInstance):
            # Copies mirrored before now may still be on their way to the target: the source
            # counted those on record already, and a reading is consumed once.
            instance.recorded_to = source.counted_to()
        instance.recording = source.recording
        group.mirror = None
        group.replace(source, instance)
        record.downtime = 0.0
        del self._checkers[record.operator]
        yield self.env.timeout(self.command(target) + settings.housekeeping)  # remove-divert

    # -- costs ------------------------------------------------------------------------------

    def latency(self, a: str, b: str) -> float:
        key = (a, b)
        if key not in self._latencies:
            self._latencies[key] = self.model.network.routes.latency(a, b) if a != b else 0.0
        return self._latencies[key]

    def command(self, agent: str) -> float:
        """A request-response between the coordinator and an agent (through the broker)."""
        return 2 * self.latency(self.node, agent) + self.settings.command

    def _broker_of(self, instance) -> str:
        return self.model.broker_serving(self.model.group(instance.operator)).name

    def carry(self, a: str, b: str, size: int):
        """Bytes across the network, queueing behind the data on each link. The hops are
        computed at once (store and forward) rather than with an event each: a state chunk
        may then take its place on a later link a little before data that reaches that link
        first, an error of at most one chunk's serialisation there."""
        t = self.env.now
        for channel in self.model.network.path(a, b):
            arrival = channel.transmit(t, size)
            while arrival < 0:  # a lost piece is resent by TCP after a timeout
                t += 0.2
                arrival = channel.transmit(t, size)
            t = arrival
        yield self.env.timeout(t - self.env.now)

    # -- metrics ----------------------------------------------------------------------------

    def consumed_twice(self, messages: dict) -> None:
        """Add to each migration's `duplicates` the readings its operator's source and target
        both consumed on record (the messages table's delivered rows at the two nodes, from
        the migration's start to its end plus a window): what the sink counts twice, as emu
        counts the messages both processed. Counted in one sort of the table
        (sim.duplicates), restricted to the rows the table can tell are the operator's: of
        the streams it reads, and a follow operator's of its user's device; two sink
        operators reading one stream on one node are not told apart."""
        if not self.records:
            return
        from sim.duplicates import Span, count_twice, readings_of, repeated_rows

        rows = repeated_rows(messages["id"], messages["t_received"])
        if not len(rows):  # no reading was delivered twice: most runs
            return
        spans = []
        for record in self.records:
            end = record.end if not math.isnan(record.end) else np.inf
            spans.append(Span((record.source, record.target), record.start,
                              end + self.model.window_size(record.operator),
                              *readings_of(self.model, record.operator)))
        for record, twice in zip(self.records, count_twice(messages, spans, rows), strict=True):
            record.duplicates += twice

    def finish(self, window_size) -> None:
        """Downtime and consistency of each migration from what the instances processed and
        the outputs that went downstream; `window_size(group)` is 0 for operators without."""
        forwarded = self.forwarded
        rows_of = forwarded.rows_of({record.operator for record in self.records})
        t, last_sn, count = forwarded.t, forwarded.last_sn, forwarded.count
        for record in self.records:
            if record.status == "refused":
                continue  # it never began: nothing to measure
            if not math.isnan(record.paused):
                back = record.resumed
                if record.held and record.target_instance is not None:
                    back = getattr(record.target_instance, "first_processed", back)
                record.downtime = back - record.paused
            period = window_size(record.operator)
            if not period:
                continue
            end = record.end if not math.isnan(record.end) else self.env.now
            rows = rows_of[record.operator]
            times = [t[i] for i in rows]
            record.output_gap = output_gap(times, record.start, end, period)
            around = coverage((last_sn[i], count[i]) for i in rows
                              if record.start - 2 * period <= t[i] <= end + 2 * period)
            record.lost += around.lost
            record.duplicates += around.duplicates
            record.reordered += around.reordered


class OneAtATime:
    """Moves of one operator group one after another: the model's coordinator carries out one
    migration of a group at a time, and gateways that offload together may each hold an
    instance of one operator (`on: gateways`), as a re-placement's moves of one operator
    may. A move waits for the one before it to end."""

    def __init__(self, model):
        self.model = model
        self.waiting: dict[str, deque] = {}  # group -> moves queued behind the running one

    def start(self, group, instance, target: str, strategy: str | None, then=None) -> None:
        """Move `instance` of `group` to `target` once the group's moves before it ended;
        `then(ok)`, if given, is told how it ended (the coordinator's `done`)."""
        decided = self.model.env.now
        queued = self.waiting.get(group.name)
        if queued is not None:
            queued.append((group, instance, target, strategy, decided, then))
            return
        self.waiting[group.name] = deque()
        self._run(group, instance, target, strategy, decided, then)

    def _run(self, group, instance, target: str, strategy: str | None, decided: float,
             then=None) -> None:
        def done(ok: bool = True) -> None:
            if then is not None:
                then(ok)
            queued = self.waiting[group.name]
            if queued:
                self._run(*queued.popleft())
            else:
                del self.waiting[group.name]

        # A move whose turn comes at or after the run's end the coordinator refuses, its
        # start the time it was decided.
        self.model.coordinator.start(group, instance, target, strategy, done, decided)
