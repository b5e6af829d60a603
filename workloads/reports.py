"""What a scenario feature reports beside the core tables, declared next to its code: its
tables (an Arrow schema and the rules its rows keep) and its rows in `foglab compare`.

experiments.schema composes every run's tables from the core ones and each feature's
(workloads.features.Feature.tables); experiments.compare adds each feature's rows
(Feature.compare). A new feature's table or figure touches no file in experiments/. The rules
are written with the helpers below, which experiments.schema's core checks use too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

NAME = pa.dictionary(pa.int32(), pa.string())  # a name column (node, operator, ...)
# Float columns of times and durations: the backends' clocks differ by rounding (emu subtracts
# an epoch of about 1.7e9 s from the host clock, whose spacing there is 2.4e-7 s).
TIME_TOLERANCE_S = 1e-6
# Shares (cpu, utilisation) are differences of running float totals: -1e-17 is a zero.
SHARE_TOLERANCE = 1e-9


class SchemaError(ValueError):
    """A table that has the schema's columns but breaks what they mean: names the table, the
    rule, how many rows break it and the first of them."""


@dataclass(frozen=True)
class FeatureTable:
    """A feature's table: its schema, and `check(name, table)`, the rules its rows keep
    (raises SchemaError; None: the schema's types are all)."""

    schema: pa.Schema
    check: Callable[[str, pa.Table], None] | None = None


@dataclass
class Figure:
    """One row of `foglab compare`: a figure on each run (seconds, counts, shares), each other
    run's relative error against the reference, the target it should meet (None: no target)
    and the reasons to doubt the reference's value (empty: none). `node`: the node the figure
    is of (its doubts are that node's), None for the whole run."""

    key: str
    label: str
    unit: str  # how it is shown: ms, readings/s (delivered, each once), %, or "" for counts
    values: dict[str, float | None]
    errors: dict[str, float | None] = field(default_factory=dict)
    target: float | None = None
    met: dict[str, bool | None] = field(default_factory=dict)
    doubts: list[str] = field(default_factory=list)
    node: str | None = None


@dataclass(frozen=True)
class RunFacts:
    """What a feature's compare rows read of one run: its manifest's facts and its summary
    (experiments.summary: its figures, `nodes` among them)."""

    facts: Mapping
    summary: Mapping


# A feature's rows in `foglab compare`: from each run (by its label), its figures.
CompareRows = Callable[[Mapping[str, RunFacts]], list[Figure]]


def fail(name: str, table: pa.Table, rule: str, broken: pa.Array) -> None:
    """Raise SchemaError if any row of `broken` (bool, null counted as false) is true."""
    broken = pc.fill_null(broken, False)
    count = pc.sum(broken).as_py() or 0
    if count:
        row = pc.index(broken, True).as_py()
        shown = table.slice(row, 1).to_pylist()[0]
        raise SchemaError(f"table {name}: {rule}; {count} of {table.num_rows} rows break it, "
                          f"the first is row {row}: {shown}")


def null(table: pa.Table, column: str) -> pa.Array:
    """Null, with NaN counted as null for a float column (pandas writes a missing float so)."""
    return pc.is_null(table.column(column), nan_is_null=True)


def required(name: str, table: pa.Table, columns: list[str]) -> None:
    for column in columns:
        fail(name, table, f"{column} is never null", null(table, column))
