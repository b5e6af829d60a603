"""The figures a person reads first, computed from the tables the same way for every backend."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa


def summarise(tables: dict[str, pa.Table], duration: float, sample: float,
              facts: dict | None = None) -> dict:
    """The headline figures. Each reading counts once, in the state its best copy ended in
    (delivered, else in flight, else filtered, else lost): delivered + filtered + lost +
    in_flight = emitted. `deliveries` counts every copy a sink took (a reading two sinks read
    counts twice there), and latency is over those. Throughput (`throughput_per_s`) is of
    readings delivered a second, `deliveries_per_s` of the sinks' copies. `facts`: the run's,
    for the features' figures that need them (workloads.features: each feature's
    `summary`)."""
    messages = tables["messages"]
    state = message_states(messages)
    delivered_rows = state == "delivered"
    latency = messages.column("latency").to_numpy(zero_copy_only=False)[delivered_rows]
    received = messages.column("t_received").to_numpy(zero_copy_only=False)[delivered_rows]
    counts = reading_counts(messages.column("id").to_numpy(zero_copy_only=False), state)
    emitted = sum(counts.values())
    return {
        "emitted": emitted,
        **counts,
        "deliveries": int(delivered_rows.sum()),
        "loss_rate": counts["lost"] / emitted if emitted else 0.0,
        "throughput_per_s": counts["delivered"] / duration if duration else 0.0,
        "deliveries_per_s": int(delivered_rows.sum()) / duration if duration else 0.0,
        "latency_s": _percentiles(latency),
        "jitter": _jitter(received, duration, sample),
        "nodes": _nodes(tables["nodes"]),
        "migrations": (migrations := _migrations(tables.get("migrations"))),
        "features": feature_figures(tables, facts or {}),
        # What the figures above do not cover, said where they are read (the run stays
        # `ok`: docs/results.md, warnings).
        "warnings": migration_warnings(migrations)
        + suspicion_warnings(tables.get("recoveries")),
    }


def throughputs(summary: dict) -> tuple[float | None, float | None]:
    """Readings delivered a second and the sinks' copies a second, from a summary. One written
    before `deliveries_per_s` had the copies under `throughput_per_s`; its readings a second
    are those scaled by delivered / deliveries (before `deliveries`, `delivered` counted the
    copies too)."""
    throughput = summary.get("throughput_per_s")
    if throughput is None or "deliveries_per_s" in summary:
        return throughput, summary.get("deliveries_per_s")
    delivered, deliveries = summary.get("delivered"), summary.get("deliveries")
    if deliveries and delivered is not None:
        return throughput * delivered / deliveries, throughput
    return throughput, throughput


# A reading's state is its best copy's: the first of these its copies reached.
_ORDER = ("delivered", "in_flight", "filtered", "lost")


def message_states(messages: pa.Table) -> np.ndarray:
    """Each row's state; a table written before states were (no `state` column, or null):
    delivered unless lost."""
    lost = messages.column("lost").to_numpy(zero_copy_only=False).astype(bool)
    legacy = np.where(lost, "lost", "delivered").astype(object)
    if "state" not in messages.column_names:
        return legacy
    state = messages.column("state").cast(pa.string()).to_numpy(zero_copy_only=False)
    missing = np.array([value is None for value in state], dtype=bool)
    return np.where(missing, legacy, state).astype(object) if missing.any() else state


def reading_counts(ids: np.ndarray, state: np.ndarray) -> dict[str, int]:
    """How many distinct messages (by id) ended in each state, each by its best copy."""
    rank = np.full(state.shape, len(_ORDER), dtype=np.int8)
    for i, name in enumerate(_ORDER):
        rank[state == name] = i
    if ids.size:
        order = np.lexsort((rank, ids))
        ids, rank = ids[order], rank[order]
        first = np.ones(ids.shape, dtype=bool)
        first[1:] = ids[1:] != ids[:-1]
        rank = rank[first]
    found = np.bincount(rank, minlength=len(_ORDER) + 1)
    return {name: int(found[i]) for i, name in enumerate(_ORDER)}


def feature_figures(tables: dict[str, pa.Table], facts: dict) -> dict[str, dict]:
    """Each scenario feature's own figures (workloads.features' `summary`), for the features
    whose tables say they ran."""
    from experiments.hybrid.figures import summary as hybrid
    from workloads.features import FEATURES

    found = {}
    for feature in FEATURES:
        if feature.summary is not None:
            figures = feature.summary(tables, facts)
            if figures:
                found[feature.key] = figures
    figures = hybrid(tables, facts)  # the hybrid backend's couplings, where it ran
    if figures:
        found["hybrid"] = figures
    return found


def _percentiles(latency: np.ndarray) -> dict:
    if latency.size == 0:
        return {"mean": None, "p50": None, "p95": None, "p99": None, "max": None}
    p50, p95, p99 = np.percentile(latency, [50, 95, 99])
    return {"mean": float(latency.mean()), "p50": float(p50), "p95": float(p95),
            "p99": float(p99), "max": float(latency.max())}


def _jitter(received: np.ndarray, duration: float, interval: float) -> dict:
    """RIoTBench's jitter: per interval, (observed - expected output rate) / expected, where
    the expected rate is the run's long-term average; reported as mean and max of |jitter|."""
    bins = max(1, int(math.floor(duration / interval)))
    counts, _ = np.histogram(received, bins=bins, range=(0.0, bins * interval))
    expected = counts.mean() if counts.size else 0.0
    if expected == 0:
        return {"interval_s": interval, "mean_abs": None, "max_abs": None}
    jitter = np.abs(counts - expected) / expected
    return {"interval_s": interval, "mean_abs": float(jitter.mean()),
            "max_abs": float(jitter.max())}


def _nodes(nodes: pa.Table) -> dict:
    if nodes.num_rows == 0:
        return {}
    grouped = nodes.group_by("node").aggregate([("cpu", "mean"), ("cpu", "max"),
                                                ("memory", "mean"), ("queue", "max")])
    result = {}
    for row in grouped.to_pylist():
        result[str(row["node"])] = {"cpu_mean": row["cpu_mean"], "cpu_max": row["cpu_max"],
                                    "memory_mean": row["memory_mean"],
                                    "queue_max": row["queue_max"]}
    return dict(sorted(result.items()))



def _migrations(migrations: pa.Table | None) -> list[dict]:
    """Each migration's headline figures (the full rows are in migrations.parquet)."""
    if migrations is None:
        return []
    keep = ("operator", "strategy", "source", "target", "start", "end", "downtime",
            "state_bytes", "lost", "duplicates", "status")
    rows = migrations.select([k for k in keep if k in migrations.column_names]).to_pylist()
    for row in rows:
        row["status"] = migration_status(row)
        # A migration still under way when the run ended has no end (nor execution).
        row["execution"] = (row["end"] - row["start"] if row["end"] is not None
                            and row["start"] is not None else None)
        row["operator"], row["strategy"] = str(row["operator"]), str(row["strategy"])
        row["source"], row["target"] = str(row["source"]), str(row["target"])
    return rows


def migration_status(row: dict) -> str:
    """A migration's status (workloads.migration.record.STATUSES); a row written before the
    table had one: unfinished where its end is null, else done."""
    status = row.get("status")
    if status:
        return str(status)
    return "unfinished" if "end" in row and row["end"] is None else "done"


_HOW = {"unfinished": "was still under way when the run ended (no end, downtime or execution)",
        "failed": "failed (rolled back to its source, or it could not begin)",
        "refused": "was refused: its turn came after the run's end"}


def migration_warnings(rows: list[dict], shown: int = 3) -> list[str]:
    """A line for the migrations that did not finish (the summary's `migrations` rows): how
    many of all, and the first `shown` of them; none when every one finished."""
    missed = [row for row in rows if migration_status(row) != "done"]
    if not missed:
        return []
    said = []
    for row in missed[:shown]:
        status = migration_status(row)
        when = "decided at" if status == "refused" else "from"
        start = row.get("start")
        said.append(f"{row.get('operator')} {row.get('source')} -> {row.get('target')} "
                    f"({row.get('strategy')}) {when} "
                    + (f"{start:.2f} s" if start is not None else "?")
                    + f" {_HOW.get(status, status)}")
    more = f"; and {len(missed) - shown} more" if len(missed) > shown else ""
    return [f"{len(missed)} of {len(rows)} migrations did not finish: " + "; ".join(said)
            + more + " (migrations.parquet's status)"]


def suspicion_warnings(recoveries: pa.Table | None) -> list[str]:
    """A line for each node recovery took for dead with no crash of it in the fault schedule
    (its `t_crash` is NaN): on a loaded host a ZooKeeper session shorter than the host's
    stalls expires while the agent runs. Its instances were fenced and re-placed (the
    figures stand), at the cost of what they had processed since their checkpoint."""
    if recoveries is None or recoveries.num_rows == 0:
        return []
    said = {}
    for row in recoveries.to_pylist():
        crash = row.get("t_crash")
        if crash is None or (isinstance(crash, float) and math.isnan(crash)):
            said.setdefault(row["node"], row.get("t_detected"))
    return [f"{node} was taken for dead at {when:.2f} s with no crash scheduled: its "
            "ZooKeeper session expired while it ran (a host too loaded for "
            "scenario.recovery.session_timeout); its instances were fenced and re-placed from "
            "their checkpoints (recoveries.parquet)" for node, when in said.items()]


def lost_workload(manifest: dict, summary: dict | None = None) -> str | None:
    """What part of the workload a run that is not `ok` lost, in one line: its status, the
    nodes that failed, the devices that emitted nothing (by the manifest's per-device counts:
    facts.emitted_by_device, or facts.messages.emitted_by_device as emu.run.tables writes them)
    and the share of the readings missing (theirs, at the mean count of the devices that did
    emit); None for an `ok` run."""
    status = manifest.get("status", "?")
    if status == "ok":
        return None
    facts = manifest.get("facts") or {}
    failed = manifest.get("failed_nodes") or {}
    parts = [f"{status}:"]
    if manifest.get("error"):
        parts.append(str(manifest["error"]).splitlines()[0] + ";")
    if failed:
        parts.append(f"{len(failed)} node{'s' if len(failed) != 1 else ''} failed "
                     f"({', '.join(sorted(failed))});")
    by_device = (facts.get("emitted_by_device")
                 or (facts.get("messages") or {}).get("emitted_by_device") or {})
    if by_device:
        silent = sorted(device for device, count in by_device.items() if not count)
        heard = [count for count in by_device.values() if count]
        mean = sum(heard) / len(heard) if heard else 0.0
        expected = sum(heard) + mean * len(silent)
        share = mean * len(silent) / expected if expected else 1.0
        parts.append(f"{len(silent)} of {len(by_device)} devices emitted nothing"
                     + (f" ({', '.join(silent[:5])}{', ...' if len(silent) > 5 else ''})"
                        if silent else "")
                     + f"; about {share:.0%} of the readings missing")
    elif summary is not None and summary.get("delivered") is not None:
        parts.append(f"{summary['delivered']:,} readings delivered; what the failed nodes "
                     "would have carried is unknown (no per-device counts)")
    return " ".join(parts).rstrip(";")

