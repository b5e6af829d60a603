"""Moving a running Spark query between two cloud VMs' containers: migrate_query() -> record.

The query (an `engine: spark` operator: STATS, ETL or PRED with per-sensor state) runs as a job
in the source VM's container (emu.agent.spark); it moves as workloads.spark.migration moves it
between two job processes, by one of two ways (`scenario.migration.spark`):

- `checkpoint` (the default): the source stops at a batch boundary, its checkpoint (offsets,
  the windows' and the per-sensor state) is copied into a warm standby on the target, which
  starts the query it built ahead on the copy;
- `export`: the source stops, writes its per-sensor state (the `statestore` reader) as Parquet,
  and the target starts a new query with it as `initialState` (STATS' windows start empty).

Either way the source's journal (what it acknowledged and not yet processed) goes with the
state, and the target takes over the source's persistent broker session (what the broker held
meanwhile), so nothing is lost or processed twice.

The steps, from the host (the coordinator), over the management protocol where an agent acts
and on the nodes' records folders (mounted on the host at `records(node)`) where files move:

1. `prepare`: the source's job, its broker session and the operator's config
   (`migrate.spark.status`);
2. `standby`: the target starts a standby job for that config and session
   (`migrate.spark.standby`; a run asks before its epoch, `standbys_ahead`, so that it is warm
   by the move), and the host waits for its `standby` file (Spark up, the app run once);
3. `pause`: the host writes the source's stop request and waits for its `stopped.json`;
4. `handover`: the host copies journal, record and checkpoint or state from the source's work
   directory into the target's (`workloads.spark.migration.hand_over`). Between real VMs this is
   a copy from one VM to the other (scp, a shared volume); here both are host folders;
5. `resume`: the target's standby sees the handover and starts the query; the host waits for
   its first batch after the move;
6. `release`: the target's job now runs the operator's query, the source's no longer; the
   node's arrival recorder moves along (pause_drain, emu.features.moves.by_agents) when it reads
   through an input session of its own.

A step that fails or times out (a target that dies, a source that does not stop) rolls back:
the target drops its standby and the handover, and the source starts its job again in its own
work directory, on its checkpoint, journal and broker session, which held the input meanwhile:
nothing is lost, and the record says `failed` with the error.

The record (workloads.migration.record, the model's) has the migrations table's columns with
their meanings: `strategy` is the scenario's (pause_transfer: the state moves), `spark_way` how;
`downtime` runs from the source's reader pausing (the broker holds the input from then) until
the target's first batch after the move has finished (workloads.spark.migration.Move);
`held` counts the messages that batch read (the journaled tail and what the broker held, as
much as one batch took); `state_bytes` the checkpoint or state copied (the journal aside);
`chunks` 0 (no ZooKeeper); `lost` and `duplicates` the journal offsets the target's first batch
skipped or read again against the source's committed offset, where its progress gives its start
(by checkpoint; a new query's first batch, by export, reports none, and starts at that offset
by construction). `output_gap` stays NaN: a Spark
query has no window outputs in the windows table. The phases' times are in `phases`.

Times and timeouts are the run's (emu.agent.timebase, the `clock` given or the controller's):
the record's are emulated, and so are the waits' limits (K times longer on the host). The
Spark job's own files (workloads.spark.job) stamp the host's clock (time.time()): their times
are converted to emulated ones as the record takes them.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emu.agent.config import RECORDS_DIR
from emu.agent.timebase import TimeBase
from emu.features.moves.by_agents import MigrationError, clock_of, migrate_instance
from workloads.migration.record import MigrationRecord
from workloads.operator_engines import Move, operator_engine

STRATEGY = "pause_transfer"
# A standby's JVM and warm-up, minutes on a busy two-core host.
STANDBY_WAIT_S = 900.0
# A batch boundary, or, right after a rollback, the restarted source's cold start.
STOP_WAIT_S = 300.0
FIRST_BATCH_WAIT_S = 300.0
# How often a wait asks the agent whether the job it waits for is still alive, and how long
# an agent may take to answer that (or a target's abort) before it counts as gone.
ALIVE_POLL_S = 1.0
ALIVE_TIMEOUT_S = 5.0
# An agent's rollback waits for the stopped job to exit (emu.agent.spark.EXIT_WAIT_S).
ROLLBACK_WAIT_S = 90.0


@dataclass
class SparkMigrationRecord(MigrationRecord):
    """The shared record, and the work directories of the query's job on either node."""

    source_work: str = ""
    target_work: str = ""


def migrate_query(control, operator: str, source: str, target: str,
                  strategy: str = STRATEGY, settings: Any = None, *,
                  records: Callable[[str], Path] | None, record_id: int = 0,
                  timeout: float = 30.0,
                  progress: Callable[[str], None] = lambda phase: None,
                  way: str | None = None,
                  clock: TimeBase | None = None,
                  sync_timeout: float | None = None) -> SparkMigrationRecord:
    """Move the Spark query `operator` from cloud VM `source` to cloud VM `target`.

    `control`: a connected emu.control.commands.Controller, or a broker's "host:port".
    `records(node)`: the host folder mounted at /records in that node's container. `settings`: a
    workloads.scenario.MigrationSettings (its `spark` way), or None; `way` overrides it.
    `timeout`: how long one request may take. A failed move is a record with status `failed`;
    a MigrationError only for a move refused before anything happened. `sync_timeout` is not
    used: a query does not move in parallel (emu.features.moves.dispatch.migrate hands every mover
    it).
    """
    from workloads.spark.job import WAYS

    way = way or getattr(settings, "spark", None) or "checkpoint"
    if strategy != STRATEGY:
        raise MigrationError(f"a Spark query moves with its state: strategy {STRATEGY}, not "
                             f"{strategy!r} (scenario.migration.spark says how: "
                             f"{' or '.join(WAYS)})")
    if way not in WAYS:
        raise MigrationError(f"a Spark query moves by {' or '.join(WAYS)}, not {way!r}")
    if source == target:
        raise MigrationError(f"operator {operator!r}: source and target are both {source}")
    if records is None:
        raise MigrationError("a Spark query's move copies between the nodes' records folders: "
                             "give records(node), the host folder mounted at /records there")
    clock = clock or clock_of(control)
    if isinstance(control, str):
        from emu.control.commands import Controller

        with Controller(control, clock=clock) as connected:
            return migrate_query(connected, operator, source, target, strategy, settings,
                                 records=records, record_id=record_id, timeout=timeout,
                                 progress=progress, way=way, clock=clock)
    record = SparkMigrationRecord(record_id, operator, strategy, source, target, clock.now(),
                                  spark_way=way)
    return _QueryMove(control, record, records, timeout, progress, clock).run()


def request_standby(control, operator: str, source: str, target: str,
                    timeout: float = 30.0) -> str:
    """Ask `target` for a standby of the query `operator` runs on `source` (its config, its
    broker session), without waiting for it to be warm; its work directory's name. A standby
    there already for that session is kept."""
    status = _step(control, source, "migrate.spark.status", {"operator": operator}, timeout)
    job = _running(status, operator, source)
    started = _step(control, target, "migrate.spark.standby", {
        "operator": operator, "config": status["config"], "client_id": job["client_id"]},
        timeout)
    return started["work"]


def standbys_ahead(control, plans: list, configs: dict, records_dir: Callable[[str], Path],
                   timeout: float = 30.0) -> list[Path]:
    """Before a run's epoch: the target of each scheduled move of a Spark query (`plans`:
    workloads.scenario.ScheduledMigration) starts its standby, to be warm by the move;
    `configs` are the agents' (emu.agent.config.AgentConfig by node). The files that appear
    once each is warm. A standby that cannot start is the move's to ask for again and
    record."""
    from workloads.spark.job import STANDBY

    warm = []
    for plan in plans:
        nodes = [node for node, config in configs.items() for op in config.operators
                 if op.name == plan.operator
                 and operator_engine(op.engine).moves_by is Move.STANDBY]
        source = plan.source or (nodes[0] if len(nodes) == 1 else None)
        if source is None or source == plan.target:
            continue
        try:
            work = request_standby(control, plan.operator, source, plan.target, timeout)
        except _Failed:
            continue
        warm.append(Path(records_dir(plan.target)) / work / STANDBY)
    return warm


def places(records: list[MigrationRecord]) -> dict[str, list[tuple[str, str]]]:
    """Where each moved Spark query ran: operator -> (node, work directory) in turn, the last
    where it runs now, from the records of its moves (failed ones moved nothing)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for record in records:
        if isinstance(record, SparkMigrationRecord) and record.status == "done":
            chain = found.setdefault(record.operator, [(record.source, record.source_work)])
            chain.append((record.target, record.target_work))
    return found


class _Failed(Exception):
    pass


def _step(control, node: str, command: str, args: dict[str, Any],
          timeout: float) -> dict[str, Any]:
    from emu.control.commands import NotAnswered

    result = control.send([node], command, args, timeout=timeout)
    try:
        return result.answer(node) or {}
    except NotAnswered as failure:
        raise _Failed(str(failure)) from None


def _running(status: dict[str, Any], operator: str, node: str) -> dict[str, Any]:
    jobs = [job for job in status.get("jobs", []) if job["active"] and job["alive"]]
    if len(jobs) != 1:
        raise _Failed(f"{node} runs {len(jobs)} Spark queries of {operator!r} (its jobs: "
                      f"{status.get('jobs')}); a move needs the one running")
    return jobs[0]


class _QueryMove:
    def __init__(self, control, record: SparkMigrationRecord, records: Callable[[str], Path],
                 timeout: float, progress: Callable[[str], None], clock: TimeBase) -> None:
        self.control = control
        self.record = record
        self.records = records
        self.timeout = timeout
        self.progress = progress
        self.clock = clock

    def _waits(self, emulated_s: float) -> float:
        """A wait's limit on the host's clock (the job's files are waited for there)."""
        return self.clock.host_seconds(emulated_s)

    def _phase(self, name: str, when: float | None = None) -> None:
        """A phase begun now, or at `when` (a host time from the job's files)."""
        self.record.phases[name] = (self.clock.now() if when is None
                                    else self.clock.emulated(when))
        if when is None:
            self.progress(name)

    def _step(self, node: str, command: str, args: dict[str, Any] | None = None,
              timeout: float | None = None) -> dict[str, Any]:
        return _step(self.control, node, command, {"operator": self.record.operator,
                                                   **(args or {})}, timeout or self.timeout)

    def _work(self, node: str, work: str) -> Path:
        return Path(self.records(node)) / work

    def _host_path(self, node: str) -> Callable[[str], Path]:
        """A path in the node's container (under /records) as the host sees it."""
        root = Path(self.records(node))
        return lambda path: root / Path(path).relative_to(RECORDS_DIR)

    def _gone(self, node: str, work: str) -> Callable[[], str | None]:
        """Why the job in `work` on `node` will write nothing more (its agent says it exited,
        or does not answer), asked at most every ALIVE_POLL_S; None while it runs."""
        asked = [-ALIVE_POLL_S]

        def gone() -> str | None:
            if time.monotonic() - asked[0] < ALIVE_POLL_S:
                return None
            asked[0] = time.monotonic()
            try:
                status = self._step(node, "migrate.spark.status",
                                    timeout=min(self.timeout, ALIVE_TIMEOUT_S))
            except _Failed as failure:
                return f"the Spark job {work} on {node} is out of reach ({failure})"
            for job in status["jobs"]:
                if job["work"] == work:
                    if job["alive"]:
                        return None
                    log = self._work(node, work) / "job.log"
                    from workloads.spark.migration import log_tail

                    return (f"the Spark job {work} on {node} exited ({job['returncode']}); "
                            f"its log:\n{log_tail(log, 10)}")
            return f"{node} has no Spark job {work}"

        return gone

    def run(self) -> SparkMigrationRecord:
        from workloads.spark.job import RESUMED, STANDBY, STOPPED
        from workloads.spark.migration import (
            Move,
            await_batch_after,
            await_file,
            hand_over,
            request_stop,
        )

        record = self.record
        source, target = record.source, record.target
        stopping = False
        try:
            self._phase("prepare")
            status = self._step(source, "migrate.spark.status")
            record.source_work = _running(status, record.operator, source)["work"]
            self._phase("standby")
            record.target_work = request_standby(self.control, record.operator, source, target,
                                                 self.timeout)
            src = self._work(source, record.source_work)
            dst = self._work(target, record.target_work)
            await_file(dst, STANDBY, self._waits(STANDBY_WAIT_S),
                       self._gone(target, record.target_work))
            self._phase("pause")
            requested = time.time()
            stopping = True
            request_stop(src, record.spark_way)
            await_file(src, STOPPED, self._waits(STOP_WAIT_S),
                       self._gone(source, record.source_work))
            gone = self._gone(target, record.target_work)()  # before the copy: still there?
            if gone is not None:
                raise _Failed(gone)
            self._phase("handover")
            handover = hand_over(src, dst, self._host_path(source))
            handed_over = time.time()
            committed = json.loads((src / STOPPED).read_text())["committed"]
            self._phase("resume")
            first = await_batch_after(dst, committed, self._waits(FIRST_BATCH_WAIT_S),
                                      self._gone(target, record.target_work))
            self._record(Move.of(src, handover, requested, handed_over, first), dst / RESUMED)
        except (_Failed, RuntimeError, TimeoutError, OSError) as failure:
            record.status, record.error = "failed", str(failure)
            self._roll_back(stopping)
        else:
            self._release(status.get("recorder_session"))
        record.end = self.clock.now()
        self._phase("done" if record.status == "done" else "rolled back")
        return record

    def _record(self, move, resumed: Path) -> None:
        record, clock = self.record, self.clock
        # The job's and this host's times (time.time()) on the run's clock.
        record.paused = clock.emulated(move.paused)
        record.resumed = clock.emulated(json.loads(resumed.read_text())["query_started"]
                                        if resumed.exists() else move.handed_over)
        record.downtime = clock.emulated_seconds(move.downtime)
        record.held = move.held
        record.state_bytes = move.state_bytes
        if move.resumed_from >= 0:
            record.lost = max(0, move.resumed_from - move.committed)
            record.duplicates = max(0, move.committed - move.resumed_from)
        for name, when in (("source paused", move.paused), ("source stopped", move.stopped),
                           ("state exported", move.exported),
                           ("handed over", move.handed_over),
                           ("first batch", move.first_batch)):
            self._phase(name, when)

    def _release(self, recorder_session: str | None) -> None:
        """After the target's first batch: the query runs there. The target's job becomes the
        operator's, the source's no longer, and the node's record of arrivals follows the query
        through its own input session (pause_drain: none lost or counted twice). What fails
        here is noted: the move itself is done."""
        record = self.record
        self._phase("release")
        notes = []
        for node, role, work in ((record.target, "target", record.target_work),
                                 (record.source, "source", record.source_work)):
            try:
                self._step(node, "migrate.spark.release", {"role": role, "work": work})
            except _Failed as failure:
                notes.append(str(failure))
        if recorder_session:
            self._phase("recorder")
            moved = migrate_instance(self.control, record.operator, record.source,
                                     record.target, "pause_drain", timeout=self.timeout,
                                     clock=self.clock)
            if moved.status != "done":
                notes.append(f"arrivals are still recorded on {record.source}: {moved.error}")
        if notes:
            record.error = "the query moved; " + "; ".join(notes)

    def _roll_back(self, stopping: bool) -> None:
        """The target drops its standby and the handover; the source, if it was told to stop,
        starts its job again on its own checkpoint, journal and session."""
        from workloads.spark.job import HANDOVER, PAUSED, STOP_REQUEST, STOPPED

        record = self.record
        self._phase("rolling back")
        notes = []
        if record.target_work:
            try:
                self._step(record.target, "migrate.spark.release",
                           {"abort": True, "work": record.target_work},
                           timeout=min(self.timeout, ALIVE_TIMEOUT_S))
            except _Failed as failure:
                notes.append(str(failure))
            for name in (HANDOVER, HANDOVER + ".part"):
                shutil.rmtree(self._work(record.target, record.target_work) / name,
                              ignore_errors=True)
        if stopping:
            try:
                # The old stop request and records go before the job starts again: a later
                # move's stop request must not be taken for this one's, nor this one's for it.
                self._step(record.source, "migrate.spark.rollback",
                           {"work": record.source_work,
                            "clear": [STOP_REQUEST, PAUSED, STOPPED]}, timeout=ROLLBACK_WAIT_S)
            except _Failed as failure:
                notes.append(str(failure))
        if notes:
            record.error += "; rolling back: " + "; ".join(notes)
