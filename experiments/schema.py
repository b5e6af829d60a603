"""The result tables every backend writes, as Arrow schemas: sim and emu read alike."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_name = pa.dictionary(pa.int32(), pa.string())

TABLES: dict[str, pa.Schema] = {
    "messages": pa.schema([
        ("id", pa.int64()), ("stream", _name), ("source", _name), ("sink", _name),
        ("t_sent", pa.float64()), ("t_received", pa.float64()), ("latency", pa.float64()),
        ("hops", pa.int32()), ("lost", pa.bool_()),
    ]),
    "nodes": pa.schema([
        ("t", pa.float64()), ("node", _name), ("cpu", pa.float64()), ("memory", pa.float64()),
        ("queue", pa.int64()), ("up", pa.bool_()),
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
}


def conform(tables: dict[str, dict]) -> dict[str, pa.Table]:
    """Every table of the schema from a backend's columns, in the schema's order; a table the
    backend did not write is there, empty, so every run has the same files."""
    unknown = sorted(set(tables) - set(TABLES))
    if unknown:
        raise ValueError(f"the backend wrote tables the schema does not know: {unknown}")
    return {name: to_table(name, tables[name]) if name in tables else empty(name)
            for name in TABLES}


def empty(name: str) -> pa.Table:
    return TABLES[name].empty_table()


def to_table(name: str, columns: dict) -> pa.Table:
    """Columns from a backend as a table of the named schema; a missing column is an error."""
    schema = TABLES[name]
    missing = [f.name for f in schema if f.name not in columns]
    if missing:
        raise ValueError(f"the backend's {name} table lacks columns {missing}")
    arrays = []
    for column in schema:
        values = columns[column.name]
        if pa.types.is_dictionary(column.type):
            arrays.append(pa.array(np.asarray(values, dtype=object), type=pa.string())
                          .dictionary_encode().cast(column.type))
        else:
            arrays.append(pa.array(values, type=column.type, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=schema)
