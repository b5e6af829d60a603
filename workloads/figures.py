"""Each scenario feature's own figures in a run's summary, read from the tables every backend
writes alike (experiments.schema), so sim and emu report them by one function."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from workloads.broker_scaling import ACTION as BROKER_JOIN


def _rows(tables: dict, name: str) -> list[dict]:
    table = tables.get(name)
    return table.to_pylist() if isinstance(table, pa.Table) else []


def _finite(values) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def _mean(values) -> float | None:
    values = _finite(values)
    return sum(values) / len(values) if values else None


def _max(values) -> float | None:
    values = _finite(values)
    return max(values) if values else None


def migrations(tables: dict, facts: dict) -> dict:
    """How many moved, their downtime and execution, the state moved, and what the
    consistency check found lost or kept twice."""
    rows = _rows(tables, "migrations")
    if not rows:
        return {}
    # Downtime and execution are measured on the moves that finished: the count says so.
    statuses: dict[str, int] = {}
    for row in rows:
        status = row.get("status") or ("unfinished" if row["end"] is None else "done")
        statuses[status] = statuses.get(status, 0) + 1
    return {"migrations": len(rows),
            "finished": statuses.get("done", 0),
            **{status: n for status, n in sorted(statuses.items()) if status != "done"},
            "downtime max s": _max(r["downtime"] for r in rows),
            "execution max s": _max((r["end"] - r["start"]) for r in rows
                                    if r["end"] is not None and r["start"] is not None),
            "state bytes": sum(r["state_bytes"] or 0 for r in rows),
            "lost": sum(r["lost"] or 0 for r in rows),
            "duplicates": sum(r["duplicates"] or 0 for r in rows)}


def faults(tables: dict, facts: dict) -> dict:
    """The faults injected (by kind) and the readings lost that were sent while one was in
    force (`lost_in_spans`): each lost reading once, however many faults overlapped it, so
    never more than the summary's `lost`."""
    rows = _rows(tables, "faults")
    if not rows:
        return {}
    kinds: dict[str, int] = {}
    for row in rows:
        kinds[str(row["kind"])] = kinds.get(str(row["kind"]), 0) + 1
    figures = {"faults": len(rows),
               "kinds": ", ".join(f"{kind} x{n}" for kind, n in sorted(kinds.items()))}
    messages = tables.get("messages")
    if isinstance(messages, pa.Table) and messages.num_rows:
        figures["lost while in force"] = lost_in_spans(
            messages, [(r["t_start"], r["t_end"]) for r in rows])
    return figures


def merged_spans(spans) -> tuple[np.ndarray, np.ndarray]:
    """The union of closed spans [start, end] as disjoint ones, in order (starts, ends); an end
    that is None or NaN lasts for good. Spans that touch are one."""
    starts = np.array([math.nan if a is None else a for a, _ in spans], dtype=float)
    ends = np.array([math.inf if b is None else b for _, b in spans], dtype=float)
    ends[np.isnan(ends)] = math.inf
    keep = ~np.isnan(starts)
    starts, ends = starts[keep], ends[keep]
    if not starts.size:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    # A span begins a new piece where it starts after every earlier one has ended.
    new = np.ones(starts.shape, dtype=bool)
    new[1:] = starts[1:] > ends[:-1]
    last = np.r_[np.flatnonzero(new)[1:] - 1, starts.size - 1]
    return starts[new], ends[last]


def lost_readings(messages: pa.Table) -> np.ndarray:
    """When each lost reading was sent (a reading is lost when every copy of it is: the
    summary's `lost`, experiments.summary), one time per reading."""
    ids = messages.column("id").to_numpy(zero_copy_only=False)
    lost = messages.column("lost").to_numpy(zero_copy_only=False).astype(bool)
    sent = messages.column("t_sent").to_numpy(zero_copy_only=False).astype(float)
    order = np.argsort(ids, kind="stable")
    ids, lost, sent = ids[order], lost[order], sent[order]
    first = np.ones(ids.shape, dtype=bool)
    first[1:] = ids[1:] != ids[:-1]
    group = np.cumsum(first) - 1
    kept = np.bincount(group, weights=~lost, minlength=int(first.sum())) > 0  # a copy not lost
    return sent[first][~kept]


def lost_in_spans(messages: pa.Table, spans) -> int:
    """How many lost readings were sent within the union of `spans` (start, end: None or NaN
    for good), each once: the spans merged, then the sorted send times counted in each."""
    starts, ends = merged_spans(spans)
    sent = np.sort(lost_readings(messages))
    if not starts.size or not sent.size:
        return 0
    inside = (np.searchsorted(sent, ends, side="right")
              - np.searchsorted(sent, starts, side="left"))
    return int(inside.sum())


def recovery(tables: dict, facts: dict) -> dict:
    """Operators re-placed after a crash: how long noticing and recovering took, and the
    operators' inputs held, rolled back and lost. Inputs, not readings: a reading two
    re-placed operators read counts for each, and one an operator lost may have reached its
    sink by another way, so `inputs lost` is no part of the summary's `lost`."""
    rows = _rows(tables, "recoveries")
    if not rows:
        return {}
    return {"recoveries": len(rows),
            "detect mean s": _mean(r["detect"] for r in rows),
            "recover mean s": _mean(r["recover"] for r in rows),
            "recover max s": _max(r["recover"] for r in rows),
            "inputs held": sum(r["held"] or 0 for r in rows),
            "inputs rolled back": sum(r["rolled_back"] or 0 for r in rows),
            "inputs lost": sum(r["lost"] or 0 for r in rows)}


def replication(tables: dict, facts: dict) -> dict:
    """Replicas started and retired, and the most instances an operator had."""
    rows = [r for r in _rows(tables, "replicas") if r["action"] != BROKER_JOIN]
    if not rows:
        return {}
    return {"started": sum(r["action"] == "start" for r in rows),
            "retired": sum(r["action"] == "retire" for r in rows),
            "instances max": max(r["instances"] for r in rows),
            "latency max s": _max(r["latency"] for r in rows)}


def broker_scaling(tables: dict, facts: dict) -> dict:
    """Spare brokers that joined, when the first did, and the brokers serving at most."""
    rows = [r for r in _rows(tables, "replicas") if r["action"] == BROKER_JOIN]
    if not rows:
        return {}
    return {"broker joins": len(rows), "first join s": min(r["t"] for r in rows),
            "brokers serving max": max(r["instances"] for r in rows)}


def strategy(mode: str, fanout: int) -> str:
    """A broadcast's strategy as its figures name it: naive, or tree fanout 2."""
    return "naive" if mode == "naive" else f"{mode} fanout {fanout}"


def broadcasts(tables: dict, facts: dict) -> dict:
    """Broadcasts sent, how many every worker had (complete), and per strategy (naive, tree
    fanout k) its completion in ms: the last worker's latency, of the slowest of that
    strategy's broadcasts where there are several; None where one of them some worker never
    had. Without the facts, each broadcast's last worker reached (whether every worker had it
    is unknown)."""
    rows = _rows(tables, "broadcasts")
    planned = facts.get("broadcasts") if isinstance(facts.get("broadcasts"), list) else None
    if not rows and not planned:
        return {}
    completions: dict[str, list[float | None]] = {}
    if planned:
        figures = {"broadcasts": len(planned),
                   "complete": sum(b.get("completion") is not None for b in planned)}
        for b in planned:
            completions.setdefault(strategy(b["mode"], b["fanout"]), []).append(
                b.get("completion"))
    else:
        last: dict[int, tuple[str, float]] = {}
        for r in rows:
            seen = last.get(r["broadcast"], (None, 0.0))[1]
            last[r["broadcast"]] = (strategy(str(r["mode"]), r["fanout"]),
                                    max(seen, r["latency"]))
        figures = {"broadcasts": len(last)}
        for name, latency in last.values():
            completions.setdefault(name, []).append(latency)
    for name, done in completions.items():
        figures[f"{name} completion ms"] = None if None in done else max(done) * 1000
    return figures
