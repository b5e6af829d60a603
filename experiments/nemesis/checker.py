"""Checks one nemesis run's history against its scenario's promise.

What each check reads:

- readings (lost, duplicated, reordered): the nodes' own records, kept by the nemesis from
  the run's records folder before the cluster is removed (experiments.nemesis.run): every
  node's `sent.csv` (each reading its devices emitted; `dropped` when the emulated radio
  lost it), `received.csv` (every arrival at a sink operator, one row per arrival: a
  second copy of a reading is a second row) and `filtered.csv` (inputs an operator passed
  nothing on for), read with emu.run.tables' readers. The run's `messages` table is not enough:
  it keeps each reading's first arrival per sink (emu.run.tables.messages_table) and leaves
  duplicates to a count in the manifest (`facts.messages.duplicated`). A reading of a
  promised stream, sent within the run's duration (the manifest's epoch and
  `config.run.duration`) and not dropped by its radio nor filtered, is `lost` if no sink
  recorded it, `duplicated` once for each arrival after its first; `reordered` counts first
  arrivals of a device's readings that came after a reading that device sent later (by
  `t_received`, ties in the records' order). Order is a move's promise (the broker holds
  the paused input in order): a reordering breaks it when its reading was sent during a
  migration (its start to end from `migrations.parquet`, 0.25 s wider); elsewhere (a
  publisher's QoS 1 resend after a broker restart) it is counted and noted. Without the
  kept records (a run that failed before its records were read) the messages table and the
  facts' duplicated count stand in, and the detail says so.
- migrations: `migrations.parquet`: each row's `status` among the promised ones and its
  `lost`, `duplicates`, `reordered` 0 (emu.features.moves.by_agents measures them from the agents'
  keys, emu.features.migrations from the window outputs).
- windows: `windows.parquet`, the promised operators' outputs in the order they went
  downstream: workloads.migration.measures.coverage (gaps, overlaps and steps back of their
  serial numbers) and the first output's first serial number (0: nothing lost before it).
- recovery: `recoveries.parquet`: a row for every crash the feature promises to recover,
  each with a target and `lost` 0.
- the run: the manifest's `status` (a failed run breaks every promise) and `error`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from experiments.nemesis.scenarios import Promise

SHOWN = 8  # ids named in a detail line


@dataclass
class Verdict:
    ok: bool
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict = field(default_factory=dict)

    @property
    def word(self) -> str:
        return "ok" if self.ok else "violated"

    @property
    def detail(self) -> str:
        return "; ".join(self.problems + self.notes)


def check(folder: Path, promise: Promise, records: Path | None = None,
          crashed: bool = False) -> Verdict:
    """The verdict on the run in `folder` (a run folder: manifest and tables), with the
    nodes' records kept in `records` (one folder per node); `crashed`: the schedule crashed
    a node whose operator the promise says is recovered."""
    folder = Path(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    verdict = Verdict(ok=True)
    if manifest.get("status") not in ("ok", "degraded"):
        verdict.problems.append(f"run {manifest.get('status')}: {manifest.get('error')}")
    facts = manifest.get("facts") or {}
    epoch = facts.get("epoch")
    duration = float(manifest["config"]["run"]["duration"])
    if epoch is not None:
        if records is not None and any(Path(records).glob("*/sent.csv")):
            readings = check_records(Path(records), promise, float(epoch), duration)
        else:
            readings = check_messages(folder, promise, facts)
            verdict.notes.append("records not kept: duplicates from the facts' count")
        verdict.lost, verdict.duplicated, verdict.reordered = (
            readings.lost, readings.duplicated, readings.reordered)
        verdict.counts.update(readings.counts)
        if readings.lost:
            verdict.problems.append(readings.lost_text)
        if readings.duplicated and promise.duplicated:
            verdict.problems.append(readings.duplicated_text)
        elif readings.duplicated:
            verdict.notes.append(readings.duplicated_text + " (allowed: QoS 1, at least once)")
        spans = migration_spans(folder) if promise.ordered else []
        during = readings.reordered_in(spans)
        if during:
            verdict.problems.append(f"{during} of them during a move: " + readings.reordered_text)
        elif readings.reordered:
            verdict.notes.append(readings.reordered_text + " (order not promised)")
    if promise.migrations:
        verdict.problems += check_migrations(folder, promise.migrations)
    for operator in promise.windows:
        problem = check_windows(folder, operator)
        if problem:
            verdict.problems.append(problem)
    if promise.recovered and crashed:
        verdict.problems += check_recoveries(folder)
    verdict.ok = not verdict.problems
    return verdict


@dataclass
class Readings:
    lost: int
    duplicated: int
    reordered: int
    lost_text: str = ""
    duplicated_text: str = ""
    reordered_text: str = ""
    counts: dict = field(default_factory=dict)
    reordered_sent: tuple[float, ...] = ()  # each reordered reading's t_sent from the epoch

    def reordered_in(self, spans: list[tuple[float, float]]) -> int:
        """Reordered readings sent within one of `spans` (s from the epoch)."""
        return sum(1 for t in self.reordered_sent if any(a <= t <= b for a, b in spans))


def migration_spans(folder: Path, margin: float = 0.25) -> list[tuple[float, float]]:
    """Each migration's start to end (to the run's end if it has none), `margin` s wider
    (the records' times and the controller's differ by a request's trip): the span in
    which a move's promise of order holds."""
    path = folder / "migrations.parquet"
    if not path.exists():
        return []
    spans = []
    for row in pd.read_parquet(path).to_dict("records"):
        end = row["end"] if _number(row["end"]) is not None else math.inf
        spans.append((row["start"] - margin, end + margin))
    return spans


def check_records(records: Path, promise: Promise, epoch: float,
                  duration: float) -> Readings:
    """Lost, duplicated and reordered readings of the promised streams, from the nodes'
    sent, received and filtered records (absolute host times; `epoch` the run's)."""
    from emu.run.tables import read_filtered, read_records

    sent, received = read_records(records)
    filtered = read_filtered(records)
    sent = sent[sent["stream"].isin(promise.streams)
                & ((sent["t_sent"] - epoch) < duration)].drop_duplicates("id")
    expected = sent[(sent["dropped"] == 0) & ~sent["id"].isin(filtered["id"])]
    received = received.reset_index(drop=True)
    received["row"] = received.index
    received = received[received["id"].isin(sent["id"])]
    arrivals = received.groupby("id").size()
    lost = expected[~expected["id"].isin(arrivals.index)]
    doubled = arrivals[arrivals > 1]
    first = received.sort_values(["t_received", "row"], kind="stable").drop_duplicates("id")
    first = first.sort_values(["t_received", "row"], kind="stable")
    late = []
    for _, rows in first.groupby("source", sort=True):
        newest = rows["t_sent"].cummax().shift(1)
        late.append(rows[rows["t_sent"] < newest])
    reordered = pd.concat(late) if late else first.iloc[:0]
    dup_rows = received[received["id"].isin(doubled.index)].drop_duplicates("id")
    return Readings(
        lost=len(lost), duplicated=int((doubled - 1).sum()), reordered=len(reordered),
        lost_text=_text("lost", lost, epoch),
        duplicated_text=_text("duplicated", dup_rows, epoch, doubled),
        reordered_text=_text("reordered", reordered, epoch),
        reordered_sent=tuple(reordered["t_sent"] - epoch),
        counts={"sent": len(sent), "expected": len(expected),
                "received": int(arrivals.size), "arrivals": int(arrivals.sum())})


def check_messages(folder: Path, promise: Promise, facts: dict) -> Readings:
    """The same from the messages table (first arrivals only) and the facts' duplicated."""
    messages = pd.read_parquet(folder / "messages.parquet")
    messages = messages[messages["stream"].isin(promise.streams)]
    lost = messages[messages["lost"] & (messages["hops"] > 0)]
    delivered = messages[~messages["lost"]].sort_values("t_received", kind="stable")
    late = [rows[rows["t_sent"] < rows["t_sent"].cummax().shift(1)]
            for _, rows in delivered.groupby("source", sort=True)]
    reordered = pd.concat(late) if late else delivered.iloc[:0]
    duplicated = int((facts.get("messages") or {}).get("duplicated", 0))
    return Readings(lost=len(lost), duplicated=duplicated, reordered=len(reordered),
                    lost_text=_text("lost", lost, 0.0),
                    duplicated_text=f"duplicated {duplicated} (the facts' count: no ids)",
                    reordered_text=_text("reordered", reordered, 0.0),
                    reordered_sent=tuple(reordered["t_sent"]),
                    counts={"expected": int(len(messages)), "received": len(delivered)})


def _text(what: str, rows: pd.DataFrame, epoch: float,
          arrivals: pd.Series | None = None) -> str:
    """`what N of STREAM (ids ...; devices ...; sent A-B s)`."""
    if rows.empty:
        return ""
    count = int((arrivals - 1).sum()) if arrivals is not None else len(rows)
    ids = [str(i) for i in rows["id"].head(SHOWN)]
    more = f" and {len(rows) - SHOWN} more" if len(rows) > SHOWN else ""
    times = rows["t_sent"] - epoch
    streams = ",".join(sorted(set(rows["stream"])))
    devices = ",".join(sorted(set(rows["source"]))[:SHOWN])
    return (f"{what} {count} of {streams} (ids {','.join(ids)}{more}; devices {devices}; "
            f"sent {times.min():.2f}-{times.max():.2f} s)")


def check_migrations(folder: Path, allowed: tuple[str, ...]) -> list[str]:
    path = folder / "migrations.parquet"
    rows = pd.read_parquet(path).to_dict("records") if path.exists() else []
    if not rows:
        return ["no migration recorded"]
    problems = []
    for row in rows:
        name = f"migration {row['id']} ({row['strategy']} {row['source']}->{row['target']})"
        if row["status"] not in allowed:
            problems.append(f"{name} {row['status']}, promised {' or '.join(allowed)}")
        bad = {k: row[k] for k in ("lost", "duplicates", "reordered")
               if _number(row[k]) not in (0, None)}
        if bad:
            problems.append(f"{name}: " + ", ".join(f"{k} {v}" for k, v in bad.items()))
    return problems


def check_windows(folder: Path, operator: str) -> str | None:
    from workloads.migration.measures import coverage

    path = folder / "windows.parquet"
    windows = pd.read_parquet(path) if path.exists() else pd.DataFrame()
    if windows.empty or operator not in set(windows["operator"]):
        return f"windows of {operator}: none went downstream"
    rows = windows[windows["operator"] == operator].sort_values("t", kind="stable")
    found = coverage(zip(rows["last_sn"], rows["count"], strict=True))
    head = int(rows["last_sn"].iloc[0] - rows["count"].iloc[0])
    lost = found.lost + max(head, 0)
    if lost or found.duplicates or found.reordered:
        return (f"windows of {operator} ({len(rows)} outputs): lost {lost} events, "
                f"duplicated {found.duplicates}, reordered {found.reordered}")
    return None


def check_recoveries(folder: Path) -> list[str]:
    path = folder / "recoveries.parquet"
    rows = pd.read_parquet(path).to_dict("records") if path.exists() else []
    if not rows:
        return ["no recovery recorded after the crash"]
    problems = []
    for row in rows:
        if not row["target"]:
            problems.append(f"{row['operator']} of {row['node']} not re-placed")
        if _number(row["lost"]) not in (0, None):
            problems.append(f"recovery of {row['operator']} from {row['node']}: lost "
                            f"{row['lost']} inputs")
    return problems


def _number(value) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)
