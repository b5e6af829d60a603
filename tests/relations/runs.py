"""Runs for the relations (tests/relations/relations.py): one view of a run, whether the model
made it in memory or a whole run wrote it as Parquet, and the catalog's experiments made
short enough to run on the model in a test.

A `Run` holds what a person reads of a run: the tables as the schema has them (conformed, as
the runner writes them), the facts, the summary the runner computes from them, and the run's
duration and sample interval. Every relation reads a run through it, so the same check
applies to any experiment, to a run read back from its folder, and to a deliberately broken
model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from experiments.catalog import names
from experiments.loader import Experiment, RunPoint, load, parse_text
from experiments.schema import TABLES, conform
from experiments.summary import summarise
from sim.model import SimResult
from tests.foundation.helpers import simulate_point
from topologies.errors import SpecError


@dataclass
class Run:
    """One run as its tables, facts and summary say it."""

    label: str
    tables: dict[str, pa.Table]
    facts: dict
    summary: dict
    duration: float
    sample: float
    point: RunPoint | None = None  # the sweep point it ran (None: read from a folder)
    whole_messages: bool = True  # False: the messages table is a sample, or was not written
    result: SimResult | None = field(default=None, repr=False)  # the model's own columns

    @property
    def spec(self):
        return self.point.spec if self.point is not None else None

    @property
    def topology(self):
        return self.point.topology if self.point is not None else None


def point(source: str, overrides: list[str] = (), index: int = 0) -> RunPoint:
    """A sweep point on the model: a catalog experiment by name, or an experiment's YAML text;
    run.backend=sim first, so that an override may still name another backend."""
    overrides = ["run.backend=sim", *overrides]
    if "\n" in source:
        return parse_text(source, overrides=overrides).points[index]
    return load(source, overrides=overrides).points[index]


def simulate(run_point: RunPoint, label: str = "", **changes) -> Run:
    """Simulate a sweep point (`changes` override its sim Settings) and summarise it as the
    runner does (experiments.runner: conform, then summarise)."""
    result = simulate_point(run_point, **changes)
    tables = conform(result.tables)
    run = run_point.spec.run
    duration = changes.get("duration", run.duration)
    sample = changes.get("sample", run.sample)
    return Run(label or run_point.spec.name, tables, result.facts,
               summarise(tables, duration, sample, result.facts), duration, sample, run_point,
               result=result)


def run(source: str, overrides: list[str] = (), index: int = 0, **changes) -> Run:
    """Simulate a catalog experiment (by name) or an experiment's text, with --set
    `overrides`, on the model."""
    label = source if "\n" not in source else "<text>"
    if overrides:
        label += " --set " + " --set ".join(overrides)
    return simulate(point(source, overrides, index), label, **changes)


def from_folder(folder: Path) -> Run:
    """A run a runner wrote (experiments.runner): its Parquet tables, its manifest's facts
    and its summary.json, as a reader of the folder gets them."""
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    tables = {name: pq.read_table(folder / f"{name}.parquet")
              if (folder / f"{name}.parquet").exists() else TABLES[name].empty_table()
              for name in TABLES}
    record = (manifest.get("record") or {}).get("messages", "all")
    config = manifest["config"]["run"]
    return Run(str(folder.name), tables, manifest.get("facts") or {}, summary,
               float(config["duration"]), float(config["sample"]),
               whole_messages=record == "all")


# -- the catalog on the model ---------------------------------------------------------------

# Shipped experiments that cannot run on the model, with the reason (none today: each one's
# backend is one --set away, run.backend=sim). A test checks that every other one loads.
NOT_ON_SIM: dict[str, str] = {}

# What makes a shipped experiment light enough for a test, beyond a shorter run (below):
# its heaviest sweep points at a lower rate or with fewer devices. Each relation is about
# the model's bookkeeping, which holds at any load.
LIGHTER: dict[str, list[str]] = {
    # 10,000 events/s for 520 s (a 400 s window with the migration inside it): 100/s.
    "thesis-ch5-window": ["workload.streams.0.rate=25/s", "run.drain=5s"],
    "thesis-ch5-rate": ["workload.streams.0.rate=25/s", "run.drain=5s"],
    # 4 to 1,000 drivers at 5 msg/s (a --set of a swept key takes its sweep away): 250.
    "iotcloud-scaling": ["topology.nodes.driver.replicas=250"],
    # 12.5 to 400 events/s: 100.
    "thesis-ch6-rate": ["workload.streams.0.rate=100/s"],
}
# A run longer than this is cut to the first of these that its schedule allows (a fault or a
# migration written at 30 s needs a longer run; a window must close); else it keeps its own.
SHORTER = (20.0, 30.0, 45.0, 60.0)


def short(name: str, extra: list[str] = ()) -> Experiment:
    """A shipped experiment on the model, one repetition, as short and light as its schedule
    allows (LIGHTER, SHORTER): every sweep point of it."""
    base = ["run.backend=sim", "run.repetitions=1", *LIGHTER.get(name, []), *extra]
    shipped = load(name, overrides=base)
    for limit in SHORTER:
        if shipped.spec.run.duration <= limit:
            break
        try:
            return load(name, overrides=[*base, f"run.duration={limit:g}s"])
        except SpecError:
            continue
    return shipped


def catalog() -> list[str]:
    """The shipped experiments that run on the model."""
    return [name for name in names("experiment") if name not in NOT_ON_SIM]


def catalog_points() -> list[tuple[str, int]]:
    """(experiment, sweep point index) for every point of every shipped experiment that runs
    on the model, made short (`short`)."""
    return [(name, p.index) for name in catalog() for p in short(name).points]


def catalog_run(name: str, index: int = 0) -> Run:
    experiment = short(name)
    run_point = experiment.points[index]
    label = f"{name} p{index}" + (f" {run_point.values}" if run_point.values else "")
    return simulate(run_point, label)
