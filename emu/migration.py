"""Moving an operator instance between two agents of a running cluster: migrate() -> record.

The host is the thesis's coordinator (chapter 5, Fig. 5.4): it sends each step as a request
over the management protocol (emu.control.Controller) and the agents carry it out
(emu.agent.migration, which says how the input is held and how exactly-once holds):
role assignment to both (`migrate.prepare`; the target starts retrieving at once), the pause
and state transfer to the source (`migrate.pause`), the resume to the target
(`migrate.resume`), and housekeeping (`migrate.release`). A step that fails or times out rolls
back: the source starts again from where it stopped, on the session that held its input
meanwhile (`migrate.rollback`), the target drops what it prepared, and the record says
`failed` with the error. Nothing is lost either way.

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
the run fills it in (emu.run). Times are the host's clock (time.time()); a run turns them
into seconds since its epoch.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from workloads.migration.record import MigrationRecord

STRATEGIES = ("pause_drain", "pause_transfer")
STATE_ROOT = "/foglab/migration"
class MigrationError(RuntimeError):
    """A migration that cannot start: a strategy emu does not run, an unknown operator."""


def migrate(control, operator: str, source: str, target: str,
            strategy: str = "pause_transfer", settings: Any = None, *, record_id: int = 0,
            timeout: float = 30.0,
            progress: Callable[[str], None] = lambda phase: None) -> MigrationRecord:
    """Move `operator`'s instance from agent `source` to agent `target`.

    `control`: a connected emu.control.Controller, or a broker's "host:port" (a controller
    is connected for the migration). `settings`: a workloads.scenario.MigrationSettings (its
    `chunk`), or None. `timeout`: how long one step, or one chunk, may take. `progress(phase)`
    hears each phase as it begins. A failed migration is a record with status `failed`;
    a MigrationError only for a migration refused before anything happened.
    """
    if strategy == "parallel":
        raise MigrationError("strategy 'parallel' (thesis chapter 6) is not on emu yet: "
                             "move the operator with pause_drain or pause_transfer")
    if strategy not in STRATEGIES:
        raise MigrationError(f"unknown strategy {strategy!r}; on emu: {', '.join(STRATEGIES)}")
    if source == target:
        raise MigrationError(f"operator {operator!r}: source and target are both {source}")
    if isinstance(control, str):
        from emu.control import Controller

        with Controller(control) as connected:
            return migrate(connected, operator, source, target, strategy, settings,
                           record_id=record_id, timeout=timeout, progress=progress)
    chunk = int(getattr(settings, "chunk", 0) or 1024 * 1024)
    record = MigrationRecord(record_id, operator, strategy, source, target, time.time())
    return _Migration(control, record, chunk, timeout, progress).run()


class _Failed(Exception):
    pass


class _Migration:
    def __init__(self, control, record: MigrationRecord, chunk: int, timeout: float,
                 progress: Callable[[str], None]) -> None:
        self.control = control
        self.record = record
        self.chunk = chunk
        self.timeout = timeout
        self.progress = progress
        self.transfer = record.strategy == "pause_transfer"
        self.path = (f"{STATE_ROOT}/{record.operator}-{record.id}-{secrets.token_hex(3)}"
                     if self.transfer else None)

    def _phase(self, name: str) -> None:
        self.record.phases[name] = time.time()
        self.progress(name)

    def _step(self, node: str, command: str, args: dict[str, Any],
              timeout: float | None = None) -> dict[str, Any]:
        result = self.control.send([node], command, {"operator": self.record.operator, **args},
                                   timeout=timeout or self.timeout)
        reply = result.replies.get(node)
        if reply is None:
            raise _Failed(f"{command}: {node} did not answer within "
                          f"{timeout or self.timeout:g} s")
        if not reply.ok:
            raise _Failed(f"{node}: {reply.error}")
        return reply.result or {}

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
        record.end = time.time()
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
