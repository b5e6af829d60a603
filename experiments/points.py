"""A sweep's points: per point, each measure's mean and 95 % confidence interval over the
repetitions (Student t), from the runs' folders; written as `points.parquet` in the sweep's
folder and shown as rows by `foglab run`.

A swept value is typed as the experiment's schema reads it, from the run's resolved config:
`1000/s` is the number 1000.0 (per second), `10ms` is 0.01 (seconds), `50KB` is 50000 (bytes);
a column is headed by the key as swept. A point with one usable repetition has NaN bounds: one
sample has no spread. Runs that are not `ok` (failed, degraded, interrupted) are left out of the
figures, as their figures are of part of the workload, and counted in the `broken` column.

A sweep whose runs migrate has the thesis tables' two measures of a migration: `downtime` (the
operator's output halted) and `execution` (from the migration's start to its end), each the
mean of a run's finished migrations'. Each measure says how many runs it covers
(`<measure>_runs`: those with a figure), and downtime and execution how many migrations
(`migrations` in the point's runs, `migrations_done` of them finished: the figures are over
those); `shown` adds `(4 of 5 migrations finished)` or `(2 of 3 runs)` where
a figure covers fewer than all: nothing is dropped silently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from experiments.results import FILE_UNITS, Run, load_run, sweep_runs, typed_value, value_unit
from experiments.schema import unit_field
from experiments.summary import migration_status, throughputs

# The measures of a point, each from a run's summary; the optional ones only where a run has
# them (downtime and execution where runs migrated; in flight at the end where the summary
# counts it).
MEASURES = ("delivered", "lost", "in_flight", "throughput", "latency_p50", "latency_p95",
            "downtime", "execution")
OF_MIGRATIONS = ("downtime", "execution")  # over a run's finished migrations
OPTIONAL = ("in_flight", *OF_MIGRATIONS)
COUNTS = ("migrations", "migrations_done")  # over a point's usable runs
UNITS = {"delivered": "messages", "lost": "messages", "in_flight": "messages",
         "throughput": "readings/s", "latency_p50": "s", "latency_p95": "s", "downtime": "s",
         "execution": "s"}
# The units of the measures' columns in points.parquet (and of their bounds); counts have none.
COLUMN_UNITS = {"throughput": "1/s", "latency_p50": "s", "latency_p95": "s", "downtime": "s",
                "execution": "s"}
POINTS_FILE = "points.parquet"
# The points file's Parquet metadata key of what it is of: the experiment, the sweep's id, the
# swept keys and the runs (id, point, config hash), as results.FILE_FACTS in a run's files.
POINTS_FACTS = "foglab.sweep"
# Beside it: the runs the sweep is of, each with its point (a resumed sweep takes earlier runs).
RUNS_FILE = "runs.json"
# Student's t at 97.5 % (a two-sided 95 % interval) for 1..30 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """Student's t quantile at 0.975 for `df` degrees of freedom (the table to 30, then the
    Cornish-Fisher expansion around the normal quantile, within 1e-4 there)."""
    if df < 1:
        return math.nan
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def interval(values: Iterable[float]) -> tuple[float, float, float]:
    """Mean and the 95 % confidence interval's bounds of the mean (Student t); NaN bounds for
    one value, all NaN for none. Missing values (None, NaN) are left out."""
    data = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if data.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(data.mean())
    if data.size == 1:
        return mean, math.nan, math.nan
    half = t975(data.size - 1) * float(data.std(ddof=1)) / math.sqrt(data.size)
    return mean, mean - half, mean + half


def measures(summary: dict) -> dict[str, float]:
    """A run's measures from its summary (NaN where it has none: no latency without delivered
    messages, no downtime or execution without a finished migration; each is the mean of the
    run's finished migrations'), with its `migrations` and `migrations_done` (finished)
    counts."""
    latency = summary.get("latency_s") or {}
    moved = summary.get("migrations") or []
    done = [m for m in moved if migration_status(m) == "done"]
    downtimes = [m.get("downtime") for m in done if m.get("downtime") is not None]
    executions = [m.get("execution") for m in done if m.get("execution") is not None]
    return {"delivered": _number(summary.get("delivered")), "lost": _number(summary.get("lost")),
            "in_flight": _number(summary.get("in_flight")),
            "throughput": _number(throughputs(summary)[0]),
            "latency_p50": _number(latency.get("p50")),
            "latency_p95": _number(latency.get("p95")),
            "downtime": float(np.mean(downtimes)) if downtimes else math.nan,
            "execution": float(np.mean(executions)) if executions else math.nan,
            "migrations": len(moved), "migrations_done": len(done)}


def _number(value) -> float:
    return math.nan if value is None else float(value)


def frame(runs: list[Run], indices: list[int] | None = None,
          values: list[dict] | None = None) -> pd.DataFrame:
    """One row per point of the runs' sweep, in point order: the swept keys (typed), `runs`
    (the repetitions in the figures), `broken` (those left out), and per measure its mean,
    `<measure>_low` and `<measure>_high` (NaN bounds for a single repetition) and
    `<measure>_runs` (the runs with a figure); `migrations` and `migrations_done`. Downtime's
    and execution's columns only where a run migrated, in flight's where the summaries count
    it. `indices` and `values`: each run's point and its swept values in this sweep (a
    resumed sweep's runs made by an earlier sweep have that sweep's in their manifests), else
    its manifest's."""
    groups: dict[int, list[Run]] = {}
    written: dict[int, dict] = {}
    for run, (index, point) in zip(runs, memberships([r.manifest for r in runs], indices,
                                                     values), strict=True):
        groups.setdefault(index, []).append(run)
        written.setdefault(index, point)
    rows = []
    for index in sorted(groups):
        members = groups[index]
        first = members[0].manifest
        row: dict = {"point": index}
        for key, value in written[index].items():
            row[key] = typed_value(first.get("config") or {}, key, value)
        usable = [r for r in members if r.manifest.get("status") == "ok" and r.summary]
        row["runs"], row["broken"] = len(usable), len(members) - len(usable)
        figures = [measures(r.summary) for r in usable]
        for measure in MEASURES:
            values = [f[measure] for f in figures]
            mean, low, high = interval(values)
            row.update({measure: mean, f"{measure}_low": low, f"{measure}_high": high,
                        f"{measure}_runs": sum(1 for v in values if not math.isnan(v))})
        for count in COUNTS:
            row[count] = sum(f[count] for f in figures)
        rows.append(row)
    table = pd.DataFrame(rows)
    for measure in OPTIONAL:
        if table.empty:
            break
        # A migration's columns wherever a run migrated, even if none finished (then `-` with
        # how many did not): an unfinished migration never makes the measure vanish.
        unused = ((table["migrations"] == 0).all() if measure in OF_MIGRATIONS
                  else table[measure].isna().all())
        if unused:
            table = table.drop(columns=[measure, f"{measure}_low", f"{measure}_high",
                                        f"{measure}_runs"])
    if not table.empty and (table["migrations"] == 0).all():
        table = table.drop(columns=list(COUNTS))
    return table


def memberships(manifests: list[dict], indices: list[int] | None = None,
                values: list[dict] | None = None) -> list[tuple[int, dict]]:
    """Each run's (point index, swept values as written) in a sweep: as given (a resumed
    sweep's runs made by an earlier sweep have that sweep's in their manifests), else its
    manifest's."""
    return [(indices[i] if indices is not None else int(m.get("point_index") or 0),
             values[i] if values is not None else m.get("point") or {})
            for i, m in enumerate(manifests)]


def swept_keys(columns: Iterable[str]) -> list[str]:
    """The swept keys among a points table's columns (or a row's keys)."""
    fixed = {"point", "runs", "broken", *COUNTS} | {f"{m}{s}" for m in MEASURES
                                                   for s in ("", "_low", "_high", "_runs")}
    return [c for c in columns if c not in fixed]


def write(folders: list[Path], sweep_folder: Path, indices: list[int] | None = None,
          values: list[dict] | None = None) -> Path:
    """The points of the runs in `folders` (each of point `indices[i]` with swept `values[i]`,
    else its manifest's) as `points.parquet` in `sweep_folder` (made if need be); its path.
    Each swept value's and measure's unit is in its field's metadata (key "unit": the swept
    key's field's, results.value_unit, COLUMN_UNITS), and the
    file's metadata says which experiment, sweep and runs it is of (key POINTS_FACTS) and
    the units again (key results.FILE_UNITS, JSON)."""
    sweep_folder.mkdir(parents=True, exist_ok=True)
    path = sweep_folder / POINTS_FILE
    found = [load_run(f) for f in folders]
    table = pa.Table.from_pandas(frame(found, indices, values), preserve_index=False)
    members = memberships([r.manifest for r in found], indices, values)
    units = {**swept_units(found, members), **{
        f"{measure}{suffix}": unit for measure, unit in COLUMN_UNITS.items()
        for suffix in ("", "_low", "_high")}}
    facts = {"experiment": found[0].manifest.get("experiment") if found else None,
             "sweep": sweep_folder.name.removesuffix("-sweep"),
             "keys": swept_keys(table.column_names),
             "runs": [{"run": r.id, "point": index, "config_hash": r.manifest.get("config_hash")}
                      for r, (index, _) in zip(found, members, strict=True)]}
    schema = pa.schema([unit_field(f, units.get(f.name)) for f in table.schema],
                       {**(table.schema.metadata or {}),
                        POINTS_FACTS: json.dumps(facts, sort_keys=True),
                        FILE_UNITS: json.dumps({c: u for c, u in units.items()
                                                if c in table.column_names}, sort_keys=True)})
    pq.write_table(pa.Table.from_arrays(table.columns, schema=schema), path,
                   compression="zstd", store_schema=True, write_statistics=True)
    return path


def swept_units(found: list[Run], members: list[tuple[int, dict]]) -> dict[str, str]:
    """Each swept key's unit (results.value_unit) where every run's value has the same."""
    seen: dict[str, set] = {}
    for run, (_, point) in zip(found, members, strict=True):
        config = run.manifest.get("config") or {}
        for key, written in point.items():
            seen.setdefault(key, set()).add(
                value_unit(key, typed_value(config, key, written)))
    return {key: next(iter(units)) for key, units in seen.items()
            if len(units) == 1 and None not in units}


def shown(row: dict, measure: str) -> str:
    """A measure of a row as a person reads it: `12.3 ± 0.4` (latency in ms), the mean alone
    with `(1 run)` when it has no interval, `-` when there is no figure; then what it covers
    when that is less than all (`coverage`)."""
    mean = row.get(measure, math.nan)
    if mean is None or math.isnan(mean):
        return "-" + coverage(row, measure)
    scale = 1000.0 if UNITS[measure] == "s" else 1.0
    digits = 1 if UNITS[measure] in ("s", "readings/s") else 0
    text = f"{mean * scale:,.{digits}f}"
    low, high = row.get(f"{measure}_low", math.nan), row.get(f"{measure}_high", math.nan)
    if low is None or math.isnan(low):
        return text + (" (1 run)" if row.get("runs") == 1 else "") + coverage(row, measure)
    return text + f" ± {(high - low) / 2 * scale:,.{digits}f}" + coverage(row, measure)


def coverage(row: dict, measure: str) -> str:
    """` (4 of 5 migrations finished)` for a downtime or execution over fewer than all of its
    point's migrations, ` (2 of 3 runs)` for a measure some usable runs had no figure for; ''
    when it covers all (or a points table written before these counts)."""
    def known(value) -> bool:
        return value is not None and not (isinstance(value, float) and math.isnan(value))

    total, done = row.get("migrations"), row.get("migrations_done")
    if measure in OF_MIGRATIONS and known(total) and known(done) and done < total:
        return f" ({int(done)} of {int(total)} migrations finished)"
    covered, runs = row.get(f"{measure}_runs"), row.get("runs")
    if known(covered) and known(runs) and covered < runs:
        return f" ({int(covered)} of {int(runs)} runs)"
    return ""


def rows(folders: list[Path], indices: list[int] | None = None,
         values: list[dict] | None = None) -> list[dict]:
    """The points of the runs in `folders` (a sweep's outcomes' folders; each of point
    `indices[i]` with swept `values[i]`, else its manifest's) as dicts, in point order: what
    `foglab run` prints per point (use `shown(row, measure)` for each cell and `swept_keys`
    for the headers)."""
    return frame([load_run(f) for f in folders], indices, values).to_dict("records")


def sweep_members(sweep_folder: Path) -> tuple[list[Path], list[int], list[dict]]:
    """The runs a sweep's folder is of, each one's point and swept values (its RUNS_FILE; a
    folder written before it had one: the runs of its sweep id beside it, by their
    manifests)."""
    listed = sweep_folder / RUNS_FILE
    if listed.is_file():
        entries = json.loads(listed.read_text(encoding="utf-8"))
        return ([sweep_folder.parent / e["run"] for e in entries],
                [int(e["point"]) for e in entries], [e["values"] for e in entries])
    found = sweep_runs(sweep_folder)
    return ([r.folder for r in found], [int(r.manifest.get("point_index") or 0) for r in found],
            [r.manifest.get("point") or {} for r in found])
