"""Moving an instance the agents run (engine python) between two agents of a running cluster:
migrate_instance() -> record. emu.features.moves.dispatch.migrate dispatches an operator's move here
by its engine (OperatorEngine.moves_by: Move.AGENTS).

The host is the thesis's coordinator (chapter 5, Fig. 5.4): it sends each step as a request
over the management protocol (emu.control.commands.Controller) and the agents carry it out
(emu.agent.migration, which says how the input is held and how exactly-once holds):
role assignment to both (`migrate.prepare`; the target starts retrieving at once), the pause
and state transfer to the source (`migrate.pause`), the resume to the target
(`migrate.resume`), and housekeeping (`migrate.release`). The target takes the instance's
input session over on the broker that holds it (OperatorConfig.broker), which may be another
than its own: the cluster's plan links it there. A step that fails or times out rolls
back: the source starts again from where it stopped, on the session that held its input
meanwhile (`migrate.rollback`), the target drops what it prepared, and the record says
`failed` with the error. Nothing is lost either way.

`parallel` (thesis chapter 6, Fig. 6.3; emu.agent.parallel says how the agents do it):
role assignment (`migrate.prepare`: the target starts on the mirror beside the consistency
checker, S = the settings' `sync`), divert (`migrate.divert`: the source stamps and mirrors
its input and sends its window outputs to the checker), then the host waits for the checker
(`migrate.sync`, answered when synchronised, with the mode). Then the input session changes
hands, which the thesis leaves to the broker: the source pauses its session and answers the
last serial number it stamped (`migrate.pause`), the target takes the mirror up to it and
connects the session (`migrate.resume`); release removes the source and the checker. A
failure before the handover (the target dead, no synchronisation within `sync_timeout`) rolls
back: the source stops mirroring and sends downstream the outputs the checker had not
covered, and the target's instance goes.

The record (workloads.migration.record, the model's too) has the columns of the migrations
table, with the model's meanings: `downtime` runs from the pause (the source
leaves its session: the broker holds the input from then) until the target has processed the
first held message, or until the target's session is back when nothing was held; `held` counts
the messages the target took that were sent before its session was back; `state_bytes` and
`chunks` are what crossed ZooKeeper (pause_transfer); `duplicates` are messages both processed
and `reordered` messages the target took before one of their publisher's the source had
already processed, from the keys the agents report; `lost` counts serial numbers skipped
between the source's last input and the target's first, when the inputs carry them (0
otherwise: the agents cannot see a loss without them). `output_gap` needs the window outputs:
the run fills it in (emu.run.emulate). Times are the run's clock (emu.agent.timebase: the
controller's `clock`, emulated at a dilation, as the agents' answers are); a run turns them
into seconds since its epoch. Every timeout here is emulated seconds: the controller waits K
times longer on the host for an answer, and the agents scale what they are handed.

For `parallel`, `downtime` is 0 as the model defines it (the target processes every event
before the source stops), `synchronised` is the checker's mode (strong, old_ahead,
new_ahead), and the input handover is recorded as measured: `paused` when the source left
the session, `resumed` when the target had it, `held` the inputs the target took after it
that were sent before it: those the broker held, and any backlog the source had not taken
yet. Measured on two arm64 gateways at 100 events/s (benchmarks/emu_migration.py): a hold of
0.14 s and 46 inputs on a quiet host; 0.3 to 1.2 s and 371 to 940 inputs (mostly the source's
backlog) on a saturated one.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from emu.agent.timebase import UNDILATED, TimeBase
from workloads.migration.record import MigrationRecord

STRATEGIES = ("pause_drain", "pause_transfer", "parallel")
STATE_ROOT = "/foglab/migration"
# How long the checker may take to synchronise, in windows of the operator, beyond `timeout`:
# the thesis's median at S = 2 is about 4 windows of 5 s (Table 6.5), its worst at S = 0 ten.
SYNC_WINDOWS = 12


class MigrationError(RuntimeError):
    """A migration that cannot start: a strategy emu does not run, an unknown operator."""


def migrate_instance(control, operator: str, source: str, target: str,
                     strategy: str = "pause_transfer", settings: Any = None, *,
                     record_id: int = 0, timeout: float = 30.0,
                     sync_timeout: float | None = None,
                     progress: Callable[[str], None] = lambda phase: None,
                     records: Callable[[str], Any] | None = None,
                     clock: TimeBase | None = None) -> MigrationRecord:
    """Move `operator`'s instance from agent `source` to agent `target` by the agents'
    protocol (emu.features.moves.dispatch.migrate says what the arguments mean). `records` is not
    used: the instance's state crosses ZooKeeper, not the nodes' records folders."""
    clock = clock or clock_of(control)
    if strategy not in STRATEGIES:
        raise MigrationError(f"unknown strategy {strategy!r}; on emu: {', '.join(STRATEGIES)}")
    if source == target:
        raise MigrationError(f"operator {operator!r}: source and target are both {source}")
    if isinstance(control, str):
        from emu.control.commands import Controller

        with Controller(control, clock=clock) as connected:
            return migrate_instance(connected, operator, source, target, strategy, settings,
                                    record_id=record_id, timeout=timeout,
                                    sync_timeout=sync_timeout, progress=progress, clock=clock)
    chunk = int(getattr(settings, "chunk", 0) or 1024 * 1024)
    record = MigrationRecord(record_id, operator, strategy, source, target, clock.now())
    if strategy == "parallel":
        sync = getattr(settings, "sync", 2)
        return _Parallel(control, record, chunk, timeout, progress, sync, sync_timeout,
                         clock).run()
    return _Migration(control, record, chunk, timeout, progress, clock).run()


class _Failed(Exception):
    pass


def clock_of(control) -> TimeBase:
    """The run's time base as the controller has it (emu.control.commands.Controller.clock)."""
    clock = getattr(control, "clock", None)
    return clock if isinstance(clock, TimeBase) else UNDILATED


class _Migration:
    def __init__(self, control, record: MigrationRecord, chunk: int, timeout: float,
                 progress: Callable[[str], None], clock: TimeBase = UNDILATED) -> None:
        self.control = control
        self.record = record
        self.chunk = chunk
        self.timeout = timeout
        self.progress = progress
        self.now = clock.now
        self.transfer = record.strategy == "pause_transfer"
        self.path = (f"{STATE_ROOT}/{record.operator}-{record.id}-{secrets.token_hex(3)}"
                     if self.transfer else None)

    def _phase(self, name: str) -> None:
        self.record.phases[name] = self.now()
        self.progress(name)

    def _step(self, node: str, command: str, args: dict[str, Any],
              timeout: float | None = None) -> dict[str, Any]:
        result = self.control.send([node], command, {"operator": self.record.operator, **args},
                                   timeout=timeout or self.timeout)
        from emu.control.commands import NotAnswered

        try:
            return result.answer(node) or {}
        except NotAnswered as failure:
            raise _Failed(str(failure)) from None

    def run(self) -> MigrationRecord:
        record = self.record
        source, target = record.source, record.target
        paused = False
        try:
            self._phase("prepare")
            described = self._step(source, "migrate.prepare", {"role": "source"})
            if described.get("stateful") and not self.transfer:
                raise _Failed(f"operator {record.operator!r} on {source} holds state (a window "
                              "or a stateful task): pause_drain would lose it; use "
                              "pause_transfer")
            self._step(target, "migrate.prepare", {
                "role": "target", "config": described["config"], "path": self.path,
                "timeout": self.timeout})
            self._phase("pause")
            # The transfer answers after its last chunk: allow each chunk its timeout.
            paused = True
            pause = self._step(source, "migrate.pause", {
                "path": self.path, "chunk": self.chunk, "timeout": self.timeout},
                timeout=self.timeout * 4 + 600 if self.transfer else self.timeout)
            record.paused = pause["t_pause"]
            if self.transfer:
                record.state_bytes, record.chunks = pause["state_bytes"], pause["chunks"]
            self._phase("resume")
            resume = self._step(target, "migrate.resume",
                                {} if self.transfer else {"state": pause["state"]})
            record.resumed = resume["t_connected"]
            record.held = resume["held"]
            back = resume["t_first"] if record.held else resume["t_connected"]
            record.downtime = back - record.paused
            self._consistency(pause.get("last", []), resume.get("first", []))
            self._phase("release")
            paused = False
            self._step(source, "migrate.release", {})
        except _Failed as failure:
            record.status, record.error = "failed", str(failure)
            self._roll_back(paused)
        record.end = self.now()
        self._phase("done" if record.status == "done" else "rolled back")
        return record

    def _roll_back(self, paused: bool) -> None:
        record = self.record
        self._phase("rolling back")
        notes = []
        for node, command, args in ((record.target, "migrate.release", {"abort": True}),
                                    (record.source, "migrate.rollback", {})):
            if command == "migrate.rollback" and not paused:
                continue
            try:
                self._step(node, command, args)
            except _Failed as failure:
                notes.append(str(failure))
        if notes:
            record.error += "; rolling back: " + "; ".join(notes)

    def _consistency(self, last: list, first: list) -> None:
        """Duplicates, reorderings and (with serial numbers) losses where the source stopped
        and the target began: `last` the source's last keys (topic, id, sn), `first` the
        target's first (id, sn)."""
        record = self.record
        done = {(key[1], key[2]) for key in last}
        newest: dict[int, int] = {}  # publisher (the id's node index) -> its last id processed
        for _, message_id, _ in last:
            publisher = message_id >> 40
            newest[publisher] = max(newest.get(publisher, -1), message_id)
        for message_id, sn in first:
            if (message_id, sn) in done:
                record.duplicates += 1
            elif message_id < newest.get(message_id >> 40, -1):
                record.reordered += 1
        sns_before = [key[2] for key in last if key[2] is not None]
        sns_after = [sn for _, sn in first if sn is not None]
        if sns_before and sns_after:
            record.lost = max(0, min(sns_after) - max(sns_before) - 1)


class _Parallel(_Migration):
    """The steps of a parallel migration (see the module docstring)."""

    def __init__(self, control, record: MigrationRecord, chunk: int, timeout: float,
                 progress: Callable[[str], None], sync: int,
                 sync_timeout: float | None, clock: TimeBase = UNDILATED) -> None:
        super().__init__(control, record, chunk, timeout, progress, clock)
        self.sync = int(sync)
        self.sync_timeout = sync_timeout
        self.tag = f"{record.operator}-{record.id}-{secrets.token_hex(3)}"
        self.results: dict[str, dict[str, Any]] = {}  # each step's answer, for the curious

    def _step(self, node: str, command: str, args: dict[str, Any],
              timeout: float | None = None) -> dict[str, Any]:
        result = super()._step(node, command, args, timeout)
        self.results[command if node == self.record.source else f"{command} (target)"] = result
        return result

    def run(self) -> MigrationRecord:
        record = self.record
        source, target = record.source, record.target
        diverted = paused = moved = False
        try:
            self._phase("prepare")
            described = self._step(source, "migrate.prepare", {"role": "source"})
            if not described.get("window"):
                raise _Failed(f"operator {record.operator!r} on {source} has no window: "
                              "parallel migration synchronises window outputs; move it "
                              "with pause_drain or pause_transfer")
            self._step(target, "migrate.prepare", {
                "role": "target", "config": described["config"], "parallel": {
                    "tag": self.tag, "source": source, "sync": self.sync, "migration": record.id,
                    "epoch": described.get("epoch")}})
            self._phase("divert")
            diverted = True
            self._step(source, "migrate.divert", {"tag": self.tag, "migration": record.id,
                                                  "target": target})
            self._phase("sync")
            synced = self._step(target, "migrate.sync", {},
                                timeout=self._sync_timeout(described["config"]))
            record.synchronised = synced["mode"]
            self._phase("handover")
            paused = True
            pause = self._step(source, "migrate.pause", {"parallel": True})
            record.paused = pause["t_pause"]
            self._phase("resume")
            resume = self._step(target, "migrate.resume", {"parallel": {
                "last_sn": pause["last_sn"], "seen": pause["seen"],
                "timeout": self.timeout}})
            moved = True
            record.resumed = resume["t_connected"]
            record.held = resume["held"]
            record.downtime = 0.0  # the target processed every event before the source stopped
            self._consistency(pause.get("last", []), resume.get("first", []))
            self._phase("release")
            self._step(source, "migrate.release", {})
            self._step(target, "migrate.release", {"parallel": True})
        except _Failed as failure:
            if moved:  # the target has the input: the move stands, the clean-up failed
                record.error = f"release: {failure}"
            else:
                record.status, record.error = "failed", str(failure)
                self._roll_back_parallel(diverted, paused)
        record.end = self.now()
        self._phase("done" if record.status == "done" else "rolled back")
        return record

    def _sync_timeout(self, config: dict[str, Any]) -> float:
        if self.sync_timeout is not None:
            return self.sync_timeout
        window = config.get("window")
        size = window.get("size", 0) if isinstance(window, dict) else window or 0
        return self.timeout + SYNC_WINDOWS * float(size)

    def _roll_back_parallel(self, diverted: bool, paused: bool) -> None:
        """The target's instance and checker go, then the source takes back its outputs
        (and its session, if it had left it)."""
        record = self.record
        self._phase("rolling back")
        notes = []
        covered = None
        try:
            covered = self._step(record.target, "migrate.release", {"abort": True}).get(
                "covered")
        except _Failed as failure:
            notes.append(str(failure))
        if diverted or paused:
            try:
                self._step(record.source, "migrate.rollback", {"covered": covered})
            except _Failed as failure:
                notes.append(str(failure))
        if notes:
            record.error += "; rolling back: " + "; ".join(notes)
