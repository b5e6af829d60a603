"""The results store: `results/<experiment>/<run-id>/` with manifest, Parquet tables, summary;
and the small API that loads runs and sweeps for notebooks: a table of many runs read as one
`pyarrow.dataset` (columns and filters pushed down, the run's id, seed and swept values as
columns constant per file), into pandas once or as Arrow."""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import operator
import os
import platform
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

import experiments
from experiments.schema import TABLES, unit_field, units_of, with_units
from experiments.spec import ExperimentFile
from experiments.summary import throughputs
from topologies.fields import unit_of

PACKAGES = ("foglab", "simpy", "numpy", "pandas", "pyarrow", "pydantic", "networkx")
PROJECT = Path(__file__).resolve().parent.parent


def now_utc() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_revision() -> str | None:
    try:
        head = subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(PROJECT), "status", "--porcelain",
                                "--untracked-files=no"], check=True, capture_output=True,
                               text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


def host_facts() -> dict:
    memory = None
    with contextlib.suppress(ValueError, OSError, AttributeError):
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"system": platform.system(), "release": platform.release(),
            "machine": platform.machine(), "cpus": os.cpu_count(), "memory_bytes": memory}


RESULTS_VARIABLE = experiments.RESULTS_VARIABLE  # the results folder's variable

# The Parquet metadata key of a run's facts in each of its table files (RunWriter.file_facts).
FILE_FACTS = "foglab.run"
# The Parquet metadata key of each unit-bearing column's unit in a run's table file (JSON,
# column -> unit), beside the same in each field's metadata (schema.UNITS).
FILE_UNITS = "foglab.units"


class RunWriter:
    """Writes one run's folder: the manifest first (so a crash still leaves it), then tables."""

    def __init__(self, folder: Path, manifest: dict):
        self.folder = folder
        self.manifest = manifest
        folder.mkdir(parents=True, exist_ok=False)
        self._write_manifest()

    def _write_manifest(self) -> None:
        text = json.dumps(self.manifest, indent=2, sort_keys=False, default=str)
        (self.folder / "manifest.json").write_text(text + "\n", encoding="utf-8")

    def tables(self, tables: dict[str, pa.Table], record: str | float = "all") -> None:
        """The tables as Parquet; of messages, what `record` (spec.RecordSpec) keeps, and
        in the manifest what was written against all."""
        tables = dict(tables)
        if "messages" in tables:
            total = tables["messages"].num_rows
            if record == "none":
                del tables["messages"]
            else:
                tables["messages"] = sampled(tables["messages"], record)
            written = tables["messages"].num_rows if "messages" in tables else 0
            self.manifest["record"] = {"messages": record, "rows": written, "of": total}
        facts = self.file_facts()
        for name, table in tables.items():
            # No pandas metadata and fixed settings: the same run gives the same bytes. Each
            # file says which run it is of (file_facts), for tools that read it without foglab.
            # Each column's unit in its field's metadata (schema.UNITS), and all of them in
            # the file's (FILE_UNITS), where readers that see no field metadata find them.
            schema = with_units(name, table.schema)
            table = pa.Table.from_arrays(table.columns, schema=schema.with_metadata({
                **(table.schema.metadata or {}),
                FILE_FACTS: json.dumps({**facts, "table": name}, sort_keys=True),
                FILE_UNITS: json.dumps(units_of(schema), sort_keys=True)}))
            pq.write_table(table, self.folder / f"{name}.parquet", compression="zstd",
                           store_schema=True, write_statistics=True, **encodings(schema))

    def file_facts(self) -> dict:
        """What every table file of the run carries in its Parquet metadata (key FILE_FACTS):
        the experiment, backend, seed, repetition, sweep point and config hash; not the run's
        id or times, so that one configuration and seed still give the same bytes (the file's
        folder is the run's id)."""
        m = self.manifest
        return {"experiment": m.get("experiment"), "backend": m.get("backend"),
                "seed": m.get("seed"), "repetition": m.get("repetition"),
                "point": m.get("point") or {}, "config_hash": m.get("config_hash")}

    def summary(self, summary: dict) -> None:
        (self.folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n",
                                                  encoding="utf-8")

    def finish(self, status: str, error: str | None = None, facts: dict | None = None) -> None:
        """The run's end in the manifest; a run that is not `ok` but wrote a summary gets, as
        its summary's first line, what part of the workload it lost (summary.lost_workload):
        its figures are of a part of the run."""
        from experiments.summary import lost_workload

        self.manifest.update(status=status, end=now_utc(), error=error, facts=facts or {})
        self._write_manifest()
        path = self.folder / "summary.json"
        if status != "ok" and path.exists():
            summary = json.loads(path.read_text(encoding="utf-8"))
            summary.pop("lost_workload", None)
            self.summary({"lost_workload": lost_workload(self.manifest, summary), **summary})


def encodings(schema: pa.Schema) -> dict:
    """How a table's columns are encoded in Parquet (pq.write_table's arguments): floats as
    byte streams split and 64-bit integers as deltas (times, latencies, ids: few repeat, so a
    dictionary only costs), every other column by a dictionary (names, states, flags). Read
    back about 1.6 times faster and 40 % smaller than all by dictionary (benchmarks/
    load_table.py's sweep); DuckDB, polars and pyarrow read both."""
    plain = {f.name: "BYTE_STREAM_SPLIT" if pa.types.is_floating(f.type) else
             "DELTA_BINARY_PACKED" for f in schema
             if pa.types.is_floating(f.type) or pa.types.is_int64(f.type)}
    dictionary = [f.name for f in schema if f.name not in plain]
    return {"use_dictionary": dictionary or False, "column_encoding": plain or None}


def kept(ids: np.ndarray, fraction: float) -> np.ndarray:
    """Which readings a sample keeps: a stable hash of each message id (splitmix64's
    finaliser) below the fraction, so copies of a reading go together and a run with the
    same seed keeps the same rows."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)) < np.uint64(round(fraction * 2**53))


def sampled(messages: pa.Table, record: str | float) -> pa.Table:
    """The rows of the messages table that `record` keeps (all, or a fraction's sample)."""
    if record == "all":
        return messages
    ids = messages.column("id").to_numpy(zero_copy_only=False)
    return messages.filter(pa.array(kept(ids, float(record))))


class NotRecorded(LookupError):
    """A run whose messages table was not written (its experiment's `record.messages: none`)."""


def sample_note(manifest: dict) -> str | None:
    """"a 10 % sample" when the run's messages table is sampled; None when it is whole."""
    record = (manifest.get("record") or {}).get("messages", "all")
    if isinstance(record, int | float) and record < 1:
        return f"a {record * 100:g} % sample of the readings (record.messages)"
    return None


def typed_value(config: dict, key: str, written):
    """The swept `key`'s value as the schema read it (from the run's resolved config): a
    number for a rate, duration or size; the value as written where the key cannot be found
    there (a list element named by the operator, say) or is not a plain value (a list of
    names swept as one name, `gateways`, as swept; a mapping or list as its JSON)."""
    node = config
    for part in key.replace("[", ".").replace("]", "").split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, list):
            named = [item for item in node if isinstance(item, dict) and item.get("name") == part]
            if len(named) != 1:
                return written
            node = named[0]
        else:
            return written
    if isinstance(node, list) and isinstance(written, str):  # `on: gateways`: as swept
        return written
    if isinstance(node, dict | list):
        return json.dumps(node, sort_keys=True)
    return node


def value_unit(key: str, typed) -> str | None:
    """The unit of swept `key`'s typed value: its field's in the experiment's schema
    (topologies.fields.unit_of: a rate in 1/s, a bandwidth in bit/s, a duration in s, a size
    in B, a clock in Hz); None for a value that is no number, or a field with no unit (a
    count, a ratio, a name)."""
    if isinstance(typed, bool) or not isinstance(typed, int | float):
        return None
    return unit_of(ExperimentFile, key)


@dataclass
class Run:
    """One run's folder, loaded lazily."""

    folder: Path

    @cached_property
    def manifest(self) -> dict:
        return json.loads((self.folder / "manifest.json").read_text(encoding="utf-8"))

    @cached_property
    def summary(self) -> dict:
        path = self.folder / "summary.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    @property
    def id(self) -> str:
        return self.folder.name

    def values(self, typed: bool = True) -> dict[str, object]:
        """The run's sweep values by key: `typed` as the schema read them (12.5, messages per
        second; `typed_value`), else as written (`12.5/s`)."""
        point = self.manifest.get("point") or {}
        if not typed:
            return dict(point)
        config = self.manifest.get("config") or {}
        return {key: typed_value(config, key, written) for key, written in point.items()}

    def table_path(self, name: str) -> Path:
        """Where the run's `name` table is (it may not exist: a failed run wrote none);
        KeyError for a table the schema does not know, NotRecorded for a messages table the
        run's record.messages left out."""
        if name not in TABLES:
            raise KeyError(f"no table {name!r}; tables are {', '.join(TABLES)}")
        path = self.folder / f"{name}.parquet"
        if (name == "messages" and not path.exists()
                and (self.manifest.get("record") or {}).get("messages") == "none"):
            raise NotRecorded(f"{self.folder}: the run wrote no messages table (its "
                              "experiment's record.messages is none); run it again with "
                              "--set record.messages=all, or a fraction such as 10%")
        return path

    def table(self, name: str, columns: list[str] | None = None, filter: Filter = None,  # noqa: A002
              arrow: bool = False) -> pd.DataFrame | pa.Table:
        """One of the run's tables (experiments.schema.TABLES), read as load_table reads
        many (`columns` and `filter` pushed down; `arrow`: a pyarrow Table) but without the
        run's columns; the table's empty schema where the run wrote no file."""
        path = self.table_path(name)
        schema = with_units(name, TABLES[name])
        data = (ds.dataset(str(path), schema=schema, format="parquet") if path.exists()
                else ds.InMemoryDataset(schema.empty_table()))
        table = scan(data, columns, filter, f"the {name} table of {self.folder}")
        return table if arrow else frame_of(table)

    @property
    def messages(self) -> pd.DataFrame:
        return self.table("messages")

    @property
    def nodes(self) -> pd.DataFrame:
        return self.table("nodes")

    @property
    def links(self) -> pd.DataFrame:
        return self.table("links")


def runs(root: Path | str = "results", experiment: str | None = None,
         sweep: str | None = None) -> list[Run]:
    """The runs under a results folder, oldest first; filtered by experiment and sweep id."""
    root = Path(root)
    folders = sorted(root.glob(f"{experiment or '*'}/*/manifest.json"))
    found = [Run(path.parent) for path in folders]
    if sweep is not None:
        found = [run for run in found if run.manifest.get("sweep") == sweep]
    return found


def sweep_runs(folder: Path | str) -> list[Run]:
    """The runs of the sweep whose own folder (`<experiment>/<sweep>-sweep`, where its
    points.parquet is) is `folder`: its siblings of that sweep id, oldest first."""
    folder = Path(folder)
    return runs(folder.parent.parent, folder.parent.name, folder.name.removesuffix("-sweep"))


def load_run(folder: Path | str) -> Run:
    folder = Path(folder)
    if not (folder / "manifest.json").exists():
        raise FileNotFoundError(f"{folder} is not a run folder (no manifest.json)")
    return Run(folder)


def find_run(run: Path | str, root: Path | str = "results") -> Run:
    """A run by its folder, or by the id `foglab results list` prints (`<run>`, or
    `<experiment>/<run>` where two experiments have a run of that id) under `root`.

    FileNotFoundError (or LookupError for an id that is ambiguous) says which."""
    folder, root = Path(run), Path(root)
    if (folder / "manifest.json").exists():
        return Run(folder)
    if folder.exists() or folder.is_absolute() or len(folder.parts) > 2:
        return load_run(folder)  # a folder, which says what it lacks
    if len(folder.parts) == 1:
        matches = sorted(path.parent for path in
                         root.glob(f"*/{glob.escape(folder.name)}/manifest.json"))
    else:
        matches = [root / folder] if (root / folder / "manifest.json").exists() else []
    if len(matches) > 1:
        raise LookupError(f"{run}: {len(matches)} runs have that id under {root} ("
                          + ", ".join(str(m.relative_to(root)) for m in matches)
                          + "): give EXPERIMENT/RUN")
    if not matches:
        raise FileNotFoundError(f"{run} is not a run folder (no manifest.json), nor a run id "
                                f"under {root} (`foglab results list` shows them)")
    return Run(matches[0])


# The columns load_table puts before a table's own, constant per run; the swept keys follow it.
RUN_COLUMNS = ("run", "repetition", "seed")

# A filter as load_table and Run.table take it (filter_expression).
Filter = pc.Expression | dict | list | None


def filter_expression(where: Filter) -> pc.Expression | None:
    """A filter as a pyarrow compute expression: an expression as it is
    (`pc.field("state") == "delivered"`); a dict, each column equal to its value, or one of
    its values where that is a list (`{"state": ["lost", "filtered"], "seed": 7}`); a list of
    `(column, op, value)` tuples, ANDed, or a list of such lists, ORed (pyarrow.parquet's and
    pandas.read_parquet's `filters`: `[("latency", ">", 0.1)]`)."""
    if where is None or isinstance(where, pc.Expression):
        return where
    if isinstance(where, dict):
        parts = [pc.field(column).isin(list(value))
                 if isinstance(value, list | tuple | set | frozenset) else pc.field(column) == value
                 for column, value in where.items()]
        return functools.reduce(operator.and_, parts) if parts else None
    if isinstance(where, list):
        try:
            return pq.filters_to_expression(where) if where else None
        except (TypeError, ValueError) as error:
            raise ValueError(f"filter {where!r}: {error}; a list of (column, op, value) "
                             "tuples, or of lists of them") from None
    raise TypeError(f"filter {where!r}: a pyarrow compute expression, a dict of column to "
                    "value(s) or a list of (column, op, value) tuples")


def scan(data: ds.Dataset, columns: list[str] | None, where: Filter, what: str) -> pa.Table:
    """`data` read into one Arrow table: only `columns` (all when None; the dataset's order),
    only the rows `where` keeps (filter_expression), both pushed down to the files. A column
    the table lacks, or a filter it cannot take, is a ValueError naming `what` and its
    columns."""
    names = data.schema.names
    unknown = [c for c in columns or () if c not in names]
    if unknown:
        raise ValueError(f"{what} has no column {', '.join(map(repr, unknown))}; its columns "
                         f"are {', '.join(names)}")
    projection = None if columns is None else [c for c in names if c in columns]
    expression = filter_expression(where)
    try:
        return data.to_table(columns=projection, filter=expression)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
        raise ValueError(f"filter {expression} on {what}: {str(error).splitlines()[0]}; its "
                         f"columns are {', '.join(names)}") from None


def value_type(values: list) -> pa.DataType:
    """The Arrow type of a swept key's column from its value in each run: bool, int64 or
    float64 where every value is one (None: null), else a string."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.int64()
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return pa.float64()
    return pa.string()


def value_fields(runs_: list[Run], typed: bool = True) -> tuple[list[pa.Field], list[dict]]:
    """The columns of the runs' swept keys (each key once, in the order first met; its type
    by value_type; `typed`: with its unit in the field's metadata where every run's value
    has the same, value_unit) and each run's values (Run.values)."""
    values = [run.values(typed) for run in runs_]
    fields = []
    for key in dict.fromkeys(key for point in values for key in point):
        found = {value_unit(key, v[key]) for v in values if key in v}
        field = pa.field(key, value_type([point.get(key) for point in values]))
        fields.append(unit_field(field, found.pop() if typed and len(found) == 1 else None))
    return fields, values


def known(field: pa.Field, value) -> pc.Expression:
    """That `field` is `value` in a whole file: the file's partition expression, which the
    dataset fills the column from and prunes files by."""
    if value is None:
        return pc.field(field.name).is_null()
    if pa.types.is_string(field.type):
        return pc.field(field.name) == str(value)
    return pc.field(field.name) == pa.scalar(value, field.type)


def table_dataset(runs_: list[Run], name: str = "messages", typed: bool = True) -> ds.Dataset:
    """The runs' `name` tables as one pyarrow dataset, each file a fragment whose run id,
    repetition, seed and swept values (`typed`: Run.values) are columns constant in it
    (RUN_COLUMNS first, the table's columns, the swept keys of all the runs last): a filter
    on them skips whole files. A run that wrote no such file (failed) has no rows;
    NotRecorded for one whose record.messages left its messages out."""
    paths = [run.table_path(name) for run in runs_]  # KeyError, NotRecorded
    keys, values = value_fields(runs_, typed)
    table = with_units(name, TABLES[name])
    clash = [key.name for key in keys if key.name in table.names or key.name in RUN_COLUMNS]
    if clash:
        raise ValueError(f"swept keys {clash} are named as columns of the {name} table")
    fields = [pa.field("run", pa.string()), pa.field("repetition", pa.int64()),
              pa.field("seed", pa.int64()), *keys]
    files, partitions = [], []
    for run, path, point in zip(runs_, paths, values, strict=True):
        if not path.exists():
            continue
        constants = (run.id, run.manifest.get("repetition"), run.manifest.get("seed"),
                     *(point.get(key.name) for key in keys))
        files.append(os.path.abspath(path))
        partitions.append(functools.reduce(operator.and_, [
            known(field, value) for field, value in zip(fields, constants, strict=True)]))
    schema = pa.schema([*fields[:3], *table, *fields[3:]])
    return ds.FileSystemDataset.from_paths(files, schema=schema, format=ds.ParquetFileFormat(),
                                           filesystem=pafs.LocalFileSystem(),
                                           partitions=partitions)


def load_table(runs_: list[Run], name: str = "messages", typed: bool = True,
               columns: list[str] | None = None, filter: Filter = None,  # noqa: A002
               arrow: bool = False) -> pd.DataFrame | pa.Table:
    """One table of many runs, with the run id, repetition, seed and sweep values as columns
    (`typed`: the values as the schema read them, a rate in messages/s, a bandwidth in bit/s,
    a duration in s, so that they sort and plot as numbers; `typed=False`: as written,
    `12.5/s`). Read as one pyarrow dataset (table_dataset): `columns`, the table's columns to
    read (the run's columns always come), and `filter` (filter_expression: an expression, a
    dict or a list of tuples; on the run's columns too) pushed down to the files; one Arrow
    table, converted to pandas once (the table's names stay categorical; the run id and
    swept values that are not numbers are strings), or returned as it is (`arrow`; each
    column's unit in its field's metadata)."""
    data = table_dataset(runs_, name, typed)
    wanted = None if columns is None else [*data.schema.names[:3], *columns,
                                           *data.schema.names[3 + len(TABLES[name]):]]
    table = scan(data, wanted, filter, f"the {name} table of {len(runs_)} run(s)")
    return table if arrow else frame_of(table)


# Arrow strings (the run id, swept values that are not numbers) as pandas' Arrow-backed
# strings: they add, compare and group as strings do (`"a/" + frame["run"]`), without a
# Python object per row (a 20-run sweep's million rows convert in 30 ms rather than 54).
_STRINGS = {pa.string(): pd.StringDtype("pyarrow"), pa.large_string(): pd.StringDtype("pyarrow")}


def frame_of(table: pa.Table) -> pd.DataFrame:
    """An Arrow table of results as pandas, converted once: dictionaries (the table's names)
    as categoricals, strings as Arrow-backed strings, numbers as numpy's."""
    return table.to_pandas(types_mapper=_STRINGS.get)


def load_summaries(runs_: list[Run], typed: bool = True) -> pd.DataFrame:
    """One row per run: its sweep values (`typed`, the default: as load_table says; else as
    written) and the headline figures of its summary."""
    rows = []
    for run in runs_:
        s = run.summary
        row = {"run": run.id, "status": run.manifest.get("status"),
               "repetition": run.manifest.get("repetition"), "seed": run.manifest.get("seed"),
               **run.values(typed)}
        if s:
            readings, deliveries = throughputs(s)
            row.update(delivered=s["delivered"], lost=s["lost"], loss_rate=s["loss_rate"],
                       throughput_per_s=readings, deliveries_per_s=deliveries,
                       **{f"latency_{k}": v for k, v in s["latency_s"].items()},
                       jitter_mean_abs=s["jitter"]["mean_abs"])
        rows.append(row)
    return pd.DataFrame(rows)
