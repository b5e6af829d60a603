"""The Spark operators' jobs during an emulated run: waiting until each query runs, until
each has read what reached its node after the run, and their micro-batches' progress."""

from __future__ import annotations

import json
import time
from pathlib import Path

from emu.agent.records import read_record
from emu.errors import EmuError
from workloads.operator_engines import operator_engine

# A Spark job's JVM and first query plan take tens of seconds, minutes on a busy host.
SPARK_START_TIMEOUT_S = 300.0
SPARK_DRAIN_TIMEOUT_S = 300.0


def wait_spark_jobs(cluster, standbys: list[Path] = ()) -> None:
    """Wait until each Spark operator's query runs (its job touches `started`), and until the
    `standbys` are warm: one that is not by the deadline is left to its move (which waits for
    it, or fails and rolls back)."""
    jobs = [cluster.records_dir(node) / operator / "started"
            for node, operator in spark_jobs(cluster)]
    deadline = time.monotonic() + SPARK_START_TIMEOUT_S
    while not all(path.exists() for path in [*jobs, *standbys]):
        if time.monotonic() > deadline:
            late = [p for p in jobs if not p.exists()]
            if not late:
                return
            log = late[0].parent / "job.log"
            tail = _text(log).splitlines()[-10:]
            raise EmuError("Spark operators " + ", ".join(
                f"{p.parent.parent.name}/{p.parent.name}" for p in late) + " did not start "
                f"within {SPARK_START_TIMEOUT_S:.0f} s; the first one's log ends:\n"
                + "\n".join(tail))
        time.sleep(0.5)


def spark_jobs(cluster) -> list[tuple[str, str]]:
    """(node, operator) of every Spark operator of the cluster's agents: each a job beside the
    agent (OperatorEngine.in_agent false)."""
    return [(c.node, op.name) for c in cluster.plan.agents() for op in c.agent.operators
            if not operator_engine(op.engine).in_agent]


def drain_spark_jobs(cluster, end: float, dead: set[str], moved: list = (),
                     now=time.time) -> dict[str, float | None]:
    """Wait until each Spark operator's source has handed Spark every message that reached
    its node (its micro-batches' `read` offset); per operator, the seconds after the run's
    end that took, or None if it did not catch up within SPARK_DRAIN_TIMEOUT_S or its node
    is dead. The messages table measures delivery to the node; this measures Spark's lag
    behind it. A query `moved` (emu.features.moves.spark_query) is followed: its last job's offset
    counts the messages of every node it read on (its journal went with it). `end` and `now`
    (a clock) are the run's time (emulated at a dilation)."""
    from emu.features.moves.spark_query import places

    where = places(list(moved))
    chains = {(n, o): where.get(o, [(n, o)]) for n, o in spark_jobs(cluster)}
    pending = {job: chain for job, chain in chains.items() if chain[-1][0] not in dead}
    caught_up: dict[str, float | None] = {f"{n}/{o}": None for n, o in chains}
    deadline = time.monotonic() + SPARK_DRAIN_TIMEOUT_S
    while pending and time.monotonic() < deadline:
        for (node, operator), chain in list(pending.items()):
            last, work = chain[-1]
            if _last_read(cluster.records_dir(last) / work / "progress.jsonl") >= _distinct_ids(
                    *{cluster.records_dir(n) / "received.csv" for n, _ in chain}):
                caught_up[f"{node}/{operator}"] = round(now() - end, 2)
                del pending[node, operator]
        time.sleep(0.5)
    return caught_up


def _text(path: Path) -> str:
    """A file of a node's records, never through a link planted there (emu.agent.records:
    skipped with a warning, as a missing file): `path` is the node's folder, then its own."""
    node = _node_folder(path)
    found = read_record(node, path.relative_to(node))
    if found is None:
        return ""
    with found:
        return found.read().decode(errors="replace")


def _node_folder(path: Path) -> Path:
    """The node's records folder a Spark file lies in: its operator's work folder's parent
    (`<node>/<work>/progress.jsonl`), or the file's own (`<node>/received.csv`)."""
    return path.parent.parent if path.suffix == ".jsonl" or path.name == "job.log" else path.parent


def _last_read(path: Path) -> int:
    lines = _text(path).splitlines()
    reads = [json.loads(line).get("read") for line in lines if line.strip()]
    return max((r for r in reads if r is not None), default=0)


def _distinct_ids(*paths: Path) -> int:
    """Distinct message ids (the first column) of CSVs with a header (the agent flushes them
    every second). Distinct: QoS 1 is at least once, and the node's session and the Spark
    source's each get their own copies again after a reconnection (the source's journal
    drops most of its own), so rows would count copies Spark never reads."""
    ids: set[bytes] = set()
    for path in paths:
        found = read_record(path.parent, path.name)  # never a planted link: emu.agent.records
        if found is not None:
            with found as rows:
                next(rows, None)
                ids.update(row.split(b",", 1)[0] for row in rows if row.strip())
    return len(ids)


def spark_progress(root: Path) -> dict[str, list]:
    """Each Spark operator's micro-batch progress, by node and operator."""
    found = {}
    for path in sorted(root.glob("*/*/progress.jsonl")):
        lines = _text(path).splitlines()
        found[f"{path.parent.parent.name}/{path.parent.name}"] = [
            json.loads(line) for line in lines if line.strip()]
    return found
