"""Each scenario feature's own figures in a run's summary, read from the tables every backend
writes alike (experiments.schema), so sim and emu report them by one function."""

from __future__ import annotations

import math

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
    return {"migrations": len(rows),
            "downtime max s": _max(r["downtime"] for r in rows),
            "execution max s": _max((r["end"] - r["start"]) for r in rows
                                    if r["end"] is not None and r["start"] is not None),
            "state bytes": sum(r["state_bytes"] or 0 for r in rows),
            "lost": sum(r["lost"] or 0 for r in rows),
            "duplicates": sum(r["duplicates"] or 0 for r in rows)}


def faults(tables: dict, facts: dict) -> dict:
    """The faults injected (by kind) and the readings sent while one was in force that were
    lost."""
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
        lost = messages.column("lost").to_numpy(zero_copy_only=False).astype(bool)
        sent = messages.column("t_sent").to_numpy(zero_copy_only=False)
        during = sum(int((lost & (sent >= r["t_start"]) & (
            sent <= (r["t_end"] if r["t_end"] is not None else math.inf))).sum())
                     for r in rows)
        figures["lost while in force"] = during
    return figures


def recovery(tables: dict, facts: dict) -> dict:
    """Operators re-placed after a crash: how long noticing and recovering took, and the
    inputs held, rolled back and lost."""
    rows = _rows(tables, "recoveries")
    if not rows:
        return {}
    return {"recoveries": len(rows),
            "detect mean s": _mean(r["detect"] for r in rows),
            "recover mean s": _mean(r["recover"] for r in rows),
            "recover max s": _max(r["recover"] for r in rows),
            "held": sum(r["held"] or 0 for r in rows),
            "rolled back": sum(r["rolled_back"] or 0 for r in rows),
            "lost": sum(r["lost"] or 0 for r in rows)}


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


def broadcasts(tables: dict, facts: dict) -> dict:
    """Broadcasts sent, workers reached, and the completion (the last worker's latency) of
    the slowest; a broadcast some worker never had is counted incomplete."""
    rows = _rows(tables, "broadcasts")
    planned = facts.get("broadcasts") if isinstance(facts.get("broadcasts"), list) else None
    if not rows and not planned:
        return {}
    figures = {"broadcasts": len(planned) if planned else len({r["broadcast"] for r in rows}),
               "workers reached": len(rows),
               "latency max s": _max(r["latency"] for r in rows)}
    if planned:
        done = [b["completion"] for b in planned if b.get("completion") is not None]
        figures["complete"] = len(done)
        figures["completion max s"] = max(done) if done else None
    else:  # the facts were not at hand: each broadcast's last worker reached
        last: dict[int, float] = {}
        for r in rows:
            last[r["broadcast"]] = max(last.get(r["broadcast"], 0.0), r["latency"])
        figures["completion max s"] = max(last.values()) if last else None
    return figures
