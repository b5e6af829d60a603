"""The results store: `results/<experiment>/<run-id>/` with manifest, Parquet tables, summary;
and the small API that loads runs and sweeps into pandas for notebooks."""

from __future__ import annotations

import contextlib
import glob
import json
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
import pyarrow.parquet as pq

from experiments.schema import TABLES
from experiments.summary import throughputs

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


# The environment variable naming the results folder where none is given (foglab run --out,
# results --root, compare --out, import foglab); else `results`.
RESULTS_VARIABLE = "FOGLAB_RESULTS"

# The Parquet metadata key of a run's facts in each of its table files (RunWriter.file_facts).
FILE_FACTS = "foglab.run"


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
            table = table.replace_schema_metadata({
                **(table.schema.metadata or {}),
                FILE_FACTS: json.dumps({**facts, "table": name}, sort_keys=True)})
            pq.write_table(table, self.folder / f"{name}.parquet", compression="zstd",
                           store_schema=True, write_statistics=True)

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
    there (a list element named by the operator, say) or is not a plain value."""
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
    if isinstance(node, dict | list):
        return json.dumps(node, sort_keys=True)
    return node


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

    def values(self, typed: bool = False) -> dict[str, object]:
        """The run's sweep values by key: as written (`12.5/s`), or `typed` as the schema
        read them (12.5, messages per second; `typed_value`)."""
        point = self.manifest.get("point") or {}
        if not typed:
            return dict(point)
        config = self.manifest.get("config") or {}
        return {key: typed_value(config, key, written) for key, written in point.items()}

    def table(self, name: str) -> pd.DataFrame:
        if name not in TABLES:
            raise KeyError(f"no table {name!r}; tables are {', '.join(TABLES)}")
        path = self.folder / f"{name}.parquet"
        if (name == "messages" and not path.exists()
                and (self.manifest.get("record") or {}).get("messages") == "none"):
            raise NotRecorded(f"{self.folder}: the run wrote no messages table (its "
                              "experiment's record.messages is none); run it again with "
                              "--set record.messages=all, or a fraction such as 10%")
        if not path.exists():
            return TABLES[name].empty_table().to_pandas()
        return pq.read_table(path).to_pandas()

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


def load_table(runs_: list[Run], name: str = "messages", typed: bool = False) -> pd.DataFrame:
    """One table of many runs, with the run id, repetition, seed and sweep values as columns
    (`typed`: the values as the schema read them, a rate in messages/s, a duration in s, so
    that they sort and plot as numbers; else as written, `12.5/s`)."""
    frames = []
    for run in runs_:
        frame = run.table(name)  # NotRecorded for a run that wrote no messages table
        frame.insert(0, "run", run.id)
        frame.insert(1, "repetition", run.manifest.get("repetition"))
        frame.insert(2, "seed", run.manifest.get("seed"))
        for key, value in run.values(typed).items():
            frame[key] = value
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_summaries(runs_: list[Run], typed: bool = False) -> pd.DataFrame:
    """One row per run: its sweep values (`typed`: as load_table says) and the headline
    figures of its summary."""
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
