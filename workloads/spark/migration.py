"""Moving a running stateful Spark query (STATS) from one job process to another, two ways.

A job is `python -m workloads.spark.job` (a cloud VM's Spark job). The move, as a host-side
orchestrator drives it between two jobs' work directories (`move`):

1. The target is a standby (`--standby`): its Spark session is up and its app has run once on
   synthetic input (its own journal, topic, broker session and checkpoint), so the plan's
   analysis, Python workers and JVM code paths are warm; it waits for `<work>/handover`.
   Given the source's session (`--client-id`), it also builds and analyses the query for a
   checkpoint handover on the paths the handover will have, so the move only starts it (on
   two cores, building STATS took 5 s, starting the built query 0.3 s).
2. `request_stop` writes the source's `<work>/stop` ("export" or "checkpoint"). At the start of
   its next trigger, after the previous batch committed and before another is planned, the
   source's MQTT reader pauses: it stops its client (every message it journaled has its
   acknowledgement sent first), seals and closes its journal, records the pause and fails the
   query (`mqtt_source.StoppedForMove`): a stop at a batch boundary, with nothing planned, so
   no batch is half published. Spark's own `StreamingQuery.stop()` interrupts a running batch.
3. The source job then writes `stopped.json` (the committed offset, the journal's end, the
   broker session's client id) and, for "export", the per-sensor state read back by the
   `statestore` reader (`workloads.spark.state.read_state`) as Parquet.
4. `hand_over` copies into the target's `handover` (renamed into place whole): the journal, the
   record, and either the state (export) or the whole checkpoint (`copy_checkpoint`) and, for a
   Parquet sink, its log (`SINK_LOG`). Between machines (the emulation's cloud VMs,
   `emu.features.moves.spark_query`), the paths the source's record names are its own: `path_of`
   says where they are seen from the copier.
5. The target starts its query: (a) export: a new checkpoint seeded with the state as
   `initialState`, its source starting at the committed offset of the copied journal; (b)
   checkpoint: on the copied checkpoint, whose offsets and state (windows too) carry on; the
   copy is made its own first (`job.relocate`: transformWithState's state metadata names its
   schema files by the source checkpoint's absolute path, which another machine lacks).

Input across the move: session taken over *and* journal handed over. Both are needed, because
the replayable source splits its unprocessed input in two: messages it journaled (and so
acknowledged: the broker no longer has them) but the query has not committed, and messages the
broker still holds in the persistent session (queued while the reader is paused, or sent but
not acknowledged). The target's reader uses the source's client id (`--client-id` from the
record), so the broker delivers the session's queue to it, and reads the copied journal from the
committed offset, so the journaled tail is processed once. The journal also carries its digests:
a message the broker resends because its acknowledgement did not leave in time (QoS 1, DUP
flag) is recognised and journaled once. Handing over the journal alone would lose what the broker
queued for the old session; taking the session alone would lose the journaled tail. The source
stops at a batch boundary, so its sink has published exactly the committed batches, and the
target's first batch starts at the committed offset: nothing is lost or duplicated.

What moves with each way: by checkpoint, everything (the windows' built-in aggregation state,
the watermark, the Python operator's per-sensor state, the source's offsets). By export, only the
per-sensor `transformWithState(InPandas)` snapshots: STATS' sliding windows start empty in the
target, so a window open at the move is emitted with the target's input only, or not at all.
A Parquet sink's log lives in its output directory, not in the checkpoint: by checkpoint, the
target must write to the source's output or a copy of its `_spark_metadata` (the handover
carries one, which the target puts in its own output directory); by export, to a new one (a
new query numbers its batches from 0). The emulation's MQTT sink has no such log.

Downtime, as for sim migrations: from the pause (the reader stops taking input) until the target
has processed its first batch after the move (that batch's end, from its query progress): the
held input waits that long at least.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from workloads.spark.job import (
    HANDOVER,
    PAUSED,
    SINK_LOG,
    STANDBY,
    STATE,
    STOP_REQUEST,
    STOPPED,
    WAYS,
    batch_end,
)
from workloads.spark.state import copy_checkpoint

POLL_S = 0.01
STOP_WAIT_S = 120.0
START_WAIT_S = 600.0
FIRST_BATCH_WAIT_S = 300.0


def progress_of(work: Path) -> list[dict]:
    """The batches the job in `work` has recorded (`progress.jsonl`), oldest first."""
    path = Path(work) / "progress.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def await_file(work: Path, name: str, timeout: float,
               gone: Callable[[], str | None] = lambda: None) -> Path:
    """`<work>/<name>` once it exists; fails when `gone()` says why the job will not write it
    (it exited), or at `timeout`."""
    path = Path(work) / name
    deadline = time.monotonic() + timeout
    while not path.exists():
        reason = gone()
        if reason is not None and not path.exists():
            raise RuntimeError(f"{reason} before writing {name}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"job in {work} wrote no {name} in {timeout:.0f} s")
        time.sleep(POLL_S)
    return path


def await_batch_after(work: Path, offset: int, timeout: float = FIRST_BATCH_WAIT_S,
                      gone: Callable[[], str | None] = lambda: None,
                      poll: float = 0.05) -> dict:
    """The progress of the first batch of the job in `work` that read beyond `offset`."""
    deadline = time.monotonic() + timeout
    while True:
        for progress in progress_of(work):
            if (progress["read"] or 0) > offset:
                return progress
        reason = gone()
        if reason is not None:
            raise RuntimeError(f"{reason} before a batch after offset {offset}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"job in {work} ran no batch after offset {offset} in "
                               f"{timeout:.0f} s")
        time.sleep(poll)


class JobProcess:
    """`python -m workloads.spark.job` as a child process, with its log in `<work>/job.log`."""

    def __init__(self, work: Path, arguments: Sequence[str], env: dict[str, str] | None = None
                 ) -> None:
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "workloads.spark.job", "--work", str(self.work),
                   *arguments]
        with (self.work / "job.log").open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            env=env or os.environ.copy())

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.work / "job.log", lines)

    def gone(self) -> str | None:
        """Why the job will write nothing more (it exited), None while it runs."""
        if self.alive():
            return None
        return f"job in {self.work} exited ({self.process.returncode}):\n{self.log_tail()}"

    def wait_for(self, name: str, timeout: float) -> Path:
        """`<work>/<name>` once it exists; fails when the job exits first or at `timeout`."""
        return await_file(self.work, name, timeout, self.gone)

    def progress(self) -> list[dict]:
        return progress_of(self.work)

    def read(self) -> int:
        """The journal offset the job's query has processed up to (0 before its first batch)."""
        return max((p["read"] or 0 for p in self.progress()), default=0)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (the job stops its query), then SIGKILL after `timeout`; the exit code."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def log_tail(path: Path, lines: int = 30) -> str:
    """A job log's first error lines (a Spark error ends in pages of plan), then its end."""
    if not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()
    errors = [line[:300] for line in text if "Error" in line or "Exception:" in line]
    return "\n".join([*errors[:10], "...", *(line[:300] for line in text[-lines:])])


def request_stop(work: Path, way: str) -> None:
    """Ask the job in `work` to stop at its next batch boundary for a move `way`."""
    if way not in WAYS:
        raise ValueError(f"a move is one of {WAYS}, not {way!r}")
    partial = Path(work) / (STOP_REQUEST + ".part")
    partial.write_text(way)
    partial.rename(Path(work) / STOP_REQUEST)


def hand_over(source: Path, target: Path,
              path_of: Callable[[str], Path] = Path) -> Path:
    """Copy a stopped source's journal, record, and state or checkpoint (and a Parquet sink's
    log) into the target's handover directory, which appears whole (renamed into place).
    `path_of` turns a path the source's record names into one the copier sees."""
    record = json.loads((Path(source) / STOPPED).read_text())
    staging = Path(target) / (HANDOVER + ".part")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copytree(path_of(record["journal"]), staging / "journal",
                    ignore=shutil.ignore_patterns("lock"))
    if record["way"] == "checkpoint":
        copy_checkpoint(path_of(record["checkpoint"]), staging / "checkpoint")
        log = path_of(record["output"]) / "_spark_metadata" if record.get("output") else None
        if log is not None and log.is_dir():
            shutil.copytree(log, staging / SINK_LOG)
    else:
        shutil.copytree(Path(source) / STATE, staging / STATE)
    (staging / STOPPED).write_text(json.dumps(record))
    return staging.rename(Path(target) / HANDOVER)


@dataclass(frozen=True)
class Move:
    """The times of one move, in seconds since the epoch, and what it handed over."""

    way: str
    requested: float
    paused: float  # the source's reader stopped taking input
    stopped: float  # the source's query had ended
    exported: float  # its state was written (export), else = stopped
    handed_over: float  # the target's handover directory was complete
    first_batch: float  # the target's first batch after the move had finished
    committed: int  # the journal offset the source had processed
    held_in_journal: int  # journaled by the source, not yet processed: handed over
    handover_bytes: int
    resumed_from: int = -1  # the journal offset the target's first batch started at
    read: int = -1  # the journal offset the target's first batch read up to
    state_bytes: int = 0  # of the handover, the state (export) or the checkpoint

    @property
    def downtime(self) -> float:
        return self.first_batch - self.paused

    @property
    def held(self) -> int:
        """Messages the target's first batch read: the journaled tail and what the broker
        held meanwhile (as much of it as that batch took)."""
        return self.read - self.committed

    def phases(self) -> dict[str, float]:
        """Where the downtime went."""
        return {"stop_s": self.stopped - self.paused,
                "export_s": self.exported - self.stopped,
                "copy_s": self.handed_over - self.exported,
                "first_batch_s": self.first_batch - self.handed_over}

    @classmethod
    def of(cls, source: Path, handover: Path, requested: float, handed_over: float,
           first: dict) -> Move:
        """The move from the source's work directory, the target's handover and the
        target's first batch after it (`await_batch_after`)."""
        record = json.loads((Path(source) / STOPPED).read_text())
        paused = json.loads((Path(source) / PAUSED).read_text())["paused_at"]
        state = handover / ("checkpoint" if record["way"] == "checkpoint" else STATE)
        return cls(record["way"], requested, paused, record["stopped_at"],
                   record.get("exported_at", record["stopped_at"]), handed_over,
                   batch_end(first), record["committed"],
                   record["journal_end"] - record["committed"], _size(handover),
                   -1 if first.get("from") is None else first["from"], first["read"] or 0,
                   _size(state))


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def first_batch_after(job: JobProcess, offset: int, timeout: float = FIRST_BATCH_WAIT_S) -> dict:
    """The progress of the job's first batch that read beyond `offset`."""
    return await_batch_after(job.work, offset, timeout, job.gone)


def move(source: JobProcess, target: JobProcess, way: str,
         stop_wait: float = STOP_WAIT_S) -> Move:
    """Move the query of `source` (running) to `target` (a standby): stop at a batch
    boundary, hand over, and wait for the target's first batch after the move."""
    target.wait_for(STANDBY, START_WAIT_S)
    requested = time.time()
    request_stop(source.work, way)
    source.wait_for(STOPPED, stop_wait)
    handover = hand_over(source.work, target.work)
    handed_over = time.time()
    record = json.loads((source.work / STOPPED).read_text())
    first = first_batch_after(target, record["committed"])
    source.process.wait(60)
    return Move.of(source.work, handover, requested, handed_over, first)
