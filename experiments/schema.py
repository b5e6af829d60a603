"""The result tables every backend writes, as Arrow schemas: sim and emu read alike.

The core tables are here; each scenario feature declares its own next to its code
(workloads.features.Feature.tables: faults, recoveries, replicas, broadcasts, energy), and
TABLES holds them all, the core ones first.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workloads.features import FEATURES
from workloads.reports import (  # noqa: F401 - SchemaError, tolerances: this module's API too
    NAME,
    SHARE_TOLERANCE,
    TIME_TOLERANCE_S,
    SchemaError,
)
from workloads.reports import fail as _fail
from workloads.reports import null as _null
from workloads.reports import required as _required

_name = NAME
STATES = ("delivered", "filtered", "lost", "in_flight")  # a message's end (messages.state)

CORE: dict[str, pa.Schema] = {
    "messages": pa.schema([
        ("id", pa.int64()), ("stream", _name), ("source", _name), ("sink", _name),
        ("t_sent", pa.float64()), ("t_received", pa.float64()), ("latency", pa.float64()),
        ("hops", pa.int32()), ("lost", pa.bool_()),
        # How the message ended: delivered, filtered (an operator dropped it, or nothing reads
        # its topic), lost, or in_flight (still queued or on a link when the run ended).
        ("state", _name),
    ]),
    "nodes": pa.schema([
        ("t", pa.float64()), ("node", _name), ("cpu", pa.float64()), ("memory", pa.float64()),
        ("queue", pa.int64()), ("up", pa.bool_()),
        # What could distort an emulated run (emu.host.fidelity): the host's CPU pressure and the
        # link relays' timer lag (s) in the interval, and the node's throttled share of its
        # CPU periods. Null where not measured: on sim (a model has no host), without relays.
        ("host_pressure", pa.float64()), ("relay_lag", pa.float64()),
        ("throttled", pa.float64()),
    ]),
    "links": pa.schema([
        ("t", pa.float64()), ("link", _name), ("src", _name), ("dst", _name),
        ("bytes", pa.int64()), ("utilisation", pa.float64()), ("latency", pa.float64()),
    ]),
    "migrations": pa.schema([
        ("id", pa.int64()), ("operator", _name), ("strategy", _name), ("source", _name),
        ("target", _name), ("start", pa.float64()), ("end", pa.float64()),
        ("downtime", pa.float64()), ("output_gap", pa.float64()), ("state_bytes", pa.int64()),
        ("chunks", pa.int64()),
        ("held", pa.int64()), ("duplicates", pa.int64()), ("lost", pa.int64()),
        ("reordered", pa.int64()), ("synchronised", _name),
        # How a Spark query's state moved (emu.features.moves.spark_query): checkpoint or export.
        ("spark_way", _name),
        # How it ended (workloads.migration.record.STATUSES): done, unfinished (under way
        # when the run ended: no end), failed (rolled back, or it could not begin), refused
        # (its turn came at or after the run's end: start is when it was decided).
        ("status", _name),
    ]),
    "windows": pa.schema([
        ("t", pa.float64()), ("operator", _name), ("node", _name), ("window", pa.int64()),
        ("last_sn", pa.int64()), ("count", pa.int64()), ("processing_time", pa.float64()),
        ("migration", pa.int64()), ("adjusted", pa.bool_()),
    ]),
    "positions": pa.schema([
        ("t", pa.float64()), ("device", _name), ("x", pa.float64()), ("y", pa.float64()),
        ("gateway", _name),
    ]),
    # Where the placement policy put each operator (experiments.placement): decided before the
    # run, outside the backends, so the same rows at t = 0 on sim, emu and hybrid for one seed,
    # but for decision_time (wall seconds the policy took); then a row per operator a run-time
    # re-placement moved (placement.replace), at its time. nodes: the node names,
    # comma-separated.
    "placements": pa.schema([
        ("t", pa.float64()), ("operator", _name), ("nodes", pa.string()), ("policy", _name),
        ("objective", pa.float64()), ("decision_time", pa.float64()), ("reason", pa.string()),
    ]),
    # Each period of a run-time re-placement (workloads.placement.replace): the objective of
    # the placement in force on the problem as observed, the policy's answer's (NaN: none),
    # whether it was taken, the moves begun ("op: a -> b; ..."), why, and the observation as
    # JSON (rates per stream and node, nodes down, moves failed, operators moving), from which
    # workloads.placement.replace.replay takes the steps again.
    "replacements": pa.schema([
        ("t", pa.float64()), ("objective", pa.float64()), ("proposed", pa.float64()),
        ("taken", pa.bool_()), ("moves", pa.string()), ("reason", pa.string()),
        ("observation", pa.string()),
    ]),
    # A moving device handed to another gateway in the emulation (hybrid): the model's time,
    # from, to, whether the containers carried it out, and the wall seconds that took.
    "handovers": pa.schema([
        ("t", pa.float64()), ("device", _name), ("source", _name), ("target", _name),
        ("ok", pa.bool_()), ("error", pa.string()), ("duration", pa.float64()),
    ]),
}
# Every table: the core ones, then each feature's (one name, one owner: checked at import).
FEATURE_TABLES = {name: table for feature in FEATURES for name, table in feature.tables.items()}
TABLES: dict[str, pa.Schema] = {
    **CORE, **{name: table.schema for name, table in FEATURE_TABLES.items()}}
_twice = sorted({n for f in FEATURES for n in f.tables if n in CORE} |
                {n for f in FEATURES for n in f.tables
                 if sum(n in g.tables for g in FEATURES) > 1})
if _twice:
    raise ValueError(f"tables named by two owners (the core or two features): {_twice}")


# Each core column's unit, declared once (a column without one is a count, a share, a flag or
# a name): written into the field's Parquet metadata (key UNIT, `with_units`) by
# results.RunWriter.tables, so a reader without foglab finds it. SI: s, B; x and y in m. A
# feature's table declares its columns' units itself, in its schema's field metadata (key
# UNIT), which with_units keeps.
UNIT = "unit"
UNITS: dict[str, dict[str, str]] = {
    "messages": {"t_sent": "s", "t_received": "s", "latency": "s"},
    "nodes": {"t": "s", "memory": "B", "relay_lag": "s"},
    "links": {"t": "s", "bytes": "B", "latency": "s"},
    "migrations": {"start": "s", "end": "s", "downtime": "s", "output_gap": "s",
                   "state_bytes": "B"},
    "windows": {"t": "s", "processing_time": "s"},
    "positions": {"t": "s", "x": "m", "y": "m"},
    "placements": {"t": "s", "decision_time": "s"},
    "replacements": {"t": "s"},
    "handovers": {"t": "s", "duration": "s"},
}
_unknown = sorted(f"{name}.{column}" for name, units in UNITS.items() for column in units
                  if name not in CORE or column not in CORE[name].names)
if _unknown:
    raise ValueError(f"units declared for columns no table has: {_unknown}")


def unit_field(field: pa.Field, unit: str | None) -> pa.Field:
    """`field` with its unit in its metadata (key UNIT); as it is without one."""
    if unit is None:
        return field
    return field.with_metadata({**(field.metadata or {}), UNIT.encode(): unit.encode()})


def with_units(name: str, schema: pa.Schema) -> pa.Schema:
    """The named table's schema (or one with its columns, a table's) with each column's unit
    (UNITS) in the field's metadata; the schema's own metadata, and a unit its field already
    declares (a feature's table), kept."""
    units = UNITS.get(name, {})
    return pa.schema([unit_field(f, units.get(f.name)) for f in schema], schema.metadata)


def units_of(schema: pa.Schema) -> dict[str, str]:
    """Column -> unit, as a file's fields say (UNIT in each field's metadata)."""
    return {f.name: f.metadata[UNIT.encode()].decode() for f in schema
            if f.metadata and UNIT.encode() in f.metadata}


# Columns a backend may leave out: what only some backends measure. Left out, they are null.
MEASURED_BY_SOME: dict[str, tuple[str, ...]] = {
    "nodes": ("host_pressure", "relay_lag", "throttled"),
    "messages": ("state",),  # null: written before states (delivered unless lost)
}


def conform(tables: dict[str, dict]) -> dict[str, pa.Table]:
    """Every table of the schema from a backend's columns, in the schema's order, each checked
    (see `check`); a table the backend did not write is there, empty, so every run has the
    same files."""
    unknown = sorted(set(tables) - set(TABLES))
    if unknown:
        raise ValueError(f"the backend wrote tables the schema does not know: {unknown}")
    conformed = {name: to_table(name, tables[name]) if name in tables else empty(name)
                 for name in TABLES}
    for name, table in conformed.items():
        check(name, table)
    return conformed


def empty(name: str) -> pa.Table:
    return TABLES[name].empty_table()


def to_table(name: str, columns: dict) -> pa.Table:
    """Columns from a backend as a table of the named schema; a missing column is an error."""
    schema = TABLES[name]
    optional = MEASURED_BY_SOME.get(name, ())
    missing = [f.name for f in schema if f.name not in columns and f.name not in optional]
    if missing:
        raise ValueError(f"the backend's {name} table lacks columns {missing}")
    rows = len(next(iter(columns.values()), []))
    arrays = []
    for column in schema:
        if column.name not in columns:
            arrays.append(pa.nulls(rows, column.type))
            continue
        values = columns[column.name]
        if pa.types.is_dictionary(column.type):
            arrays.append(pa.array(np.asarray(values, dtype=object), type=pa.string())
                          .dictionary_encode().cast(column.type))
        else:
            arrays.append(pa.array(values, type=column.type, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=schema)


def check(name: str, table: pa.Table) -> None:
    """What the schema's columns mean, as far as rows show it; a SchemaError for the first
    rule broken. Every backend's tables pass through here (conform), so a backend that writes
    another meaning fails its run, and a unit test of it, loudly."""
    checks = _CHECKS.get(name)
    if checks is not None and table.num_rows:
        checks(name, table)


def _messages(name: str, table: pa.Table) -> None:
    _required(name, table, ["id", "stream", "source", "t_sent", "hops", "lost"])
    lost = table.column("lost")
    state = pc.cast(table.column("state"), pa.string())
    _fail(name, table, "state is delivered, filtered, lost or in_flight",
          pc.and_(pc.is_valid(state), pc.invert(pc.is_in(state, pa.array(list(STATES))))))
    _fail(name, table, "lost is true exactly where the state is lost",
          pc.not_equal(pc.equal(state, "lost"), lost))
    delivered = pc.if_else(pc.is_null(state), pc.invert(lost), pc.equal(state, "delivered"))
    for column in ("sink", "t_received", "latency"):
        _fail(name, table, f"{column} is null exactly where the message is not delivered",
              pc.equal(_null(table, column), delivered))
    latency = table.column("latency")
    _fail(name, table, "latency is t_received - t_sent for a delivered message",
          pc.and_(delivered, pc.greater(pc.abs(pc.subtract(
              latency, pc.subtract(table.column("t_received"), table.column("t_sent")))),
              TIME_TOLERANCE_S)))
    _fail(name, table, "latency is >= 0", pc.less(latency, -TIME_TOLERANCE_S))
    # Not >= 1 where delivered: a window's output starts on the window's node, and a sink
    # there reads it having crossed no link.
    _fail(name, table, "hops is >= 0 (links crossed)", pc.less(table.column("hops"), 0))


def _nodes(name: str, table: pa.Table) -> None:
    _required(name, table, ["t", "node", "cpu", "memory", "queue", "up"])
    down = pc.invert(table.column("up"))
    _fail(name, table, "cpu is 0 where the node is not up",
          pc.and_(down, pc.not_equal(table.column("cpu"), 0.0)))
    for column in ("cpu", "memory", "queue"):
        _fail(name, table, f"{column} is >= 0", pc.less(table.column(column), -SHARE_TOLERANCE))
    for column in ("host_pressure", "throttled"):
        value = table.column(column)
        _fail(name, table, f"{column} is a share, 0 to 1, or null",
              pc.or_(pc.less(value, -SHARE_TOLERANCE), pc.greater(value, 1 + SHARE_TOLERANCE)))
    _fail(name, table, "relay_lag is >= 0 or null",
          pc.less(table.column("relay_lag"), -SHARE_TOLERANCE))


def _links(name: str, table: pa.Table) -> None:
    _required(name, table, ["t", "link", "src", "dst", "bytes", "utilisation"])
    for column in ("bytes", "utilisation"):
        _fail(name, table, f"{column} is >= 0", pc.less(table.column(column), -SHARE_TOLERANCE))


def _migrations(name: str, table: pa.Table) -> None:
    from workloads.migration.record import STATUSES

    _required(name, table, ["id", "operator", "strategy", "start", "status"])
    status = pc.cast(table.column("status"), pa.string())
    _fail(name, table, f"status is {', '.join(STATUSES[:-1])} or {STATUSES[-1]}",
          pc.invert(pc.is_in(status, pa.array(list(STATUSES)))))
    _fail(name, table, "end is null exactly where the status is unfinished",
          pc.not_equal(_null(table, "end"), pc.equal(status, "unfinished")))
    _fail(name, table, "end is not before start", pc.less(
        table.column("end"), pc.subtract(table.column("start"), TIME_TOLERANCE_S)))


_CHECKS = {"messages": _messages, "nodes": _nodes, "links": _links, "migrations": _migrations,
           **{name: table.check for name, table in FEATURE_TABLES.items() if table.check}}
