"""Runs an experiment: every sweep point times every repetition, each into its own run folder."""

from __future__ import annotations

import contextlib
import json
import re
import time
import traceback
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from experiments.backends import backend
from experiments.estimate import readings
from experiments.loader import Experiment, RunPoint
from experiments.parallel import Workers, check_jobs
from experiments.placement import table as placement_table
from experiments.results import (
    RunWriter,
    git_revision,
    host_facts,
    now_utc,
    package_versions,
    runs,
)
from experiments.run_plan import RunPlan
from experiments.schema import conform
from experiments.summary import summarise
from workloads import calibration


def repetition_seed(seed: int, repetition: int) -> int:
    """Repetition 0 runs with the seed as written; later ones with seeds derived from it."""
    if repetition == 0:
        return seed
    return int(np.random.SeedSequence([seed, repetition]).generate_state(1, np.uint64)[0] >> 1)


class Reporter:
    """What a runner tells its user; the CLI shows it with rich, tests stay silent."""

    def start(self, total_runs: int, total_seconds: float = 0.0) -> None: ...
    # Runs in parallel (`jobs`): the run, by its label, the next progress and stage are of;
    # one at a time, they are of the run started last.
    def current_run(self, label: str) -> None: ...
    def run_started(self, label: str, folder: Path, duration: float) -> None: ...
    def progress(self, seconds: float) -> None: ...
    def stage(self, text: str) -> None: ...
    def run_finished(self, label: str, folder: Path, summary: dict | None,
                     error: str | None) -> None: ...
    def note(self, text: str) -> None: ...


class Estimate:
    """How long a sweep has left: the wall time per second of the runs' duration so far,
    times the seconds still to run (an emulation's set-up counts in the rate once a run has
    had it); None until some of the work is done."""

    def __init__(self, total_seconds: float, clock=time.monotonic):
        self.total = total_seconds
        self.clock = clock
        self.started = clock()
        self.finished = 0.0  # the durations of the runs that ended

    def run_ended(self, duration: float) -> None:
        self.finished += duration

    def left(self, current: float = 0.0) -> float | None:
        done = self.finished + current
        if done <= 0 or self.total <= 0:
            return None
        return max(0.0, (self.clock() - self.started) * (self.total - done) / done)


class RunProgress:
    """What a backend tells of its run: `progress(seconds)` done, and `progress.stage(text)`,
    the step it is at (an emulation's set-up takes a while before its first second)."""

    def __init__(self, reporter: Reporter):
        self.reporter = reporter

    def __call__(self, seconds: float) -> None:
        self.reporter.progress(seconds)

    def stage(self, text: str) -> None:
        self.reporter.stage(text)


@dataclass
class Outcome:
    folder: Path
    point: dict
    repetition: int
    summary: dict | None
    error: str | None
    status: str = "ok"  # ok, degraded (some nodes failed; see `failed`) or failed
    failed: dict[str, str] = field(default_factory=dict)
    index: int = 0  # the sweep point's index (a resumed run's: in this sweep, not its own)

    def failed_summary(self) -> str:
        return "; ".join(f"{node}: {why}" for node, why in sorted(self.failed.items()))


def run_experiment(experiment: Experiment, out: Path | str = "results",
                   reporter: Reporter | None = None, sweep_id: str | None = None,
                   resume: bool = False, jobs: int = 1) -> list[Outcome]:
    """Run all points and repetitions; a failed run records its error and the others go on.
    `resume`: a point and repetition that already has an `ok` run of the same configuration
    (config hash) under `out` is not run again; that run stands for it (the newest).
    `jobs`: runs at once, each in a worker process (experiments.parallel; sim points only,
    else a ValueError before anything runs); the outcomes and files are the serial ones."""
    check_jobs(experiment.points, jobs)
    reporter = reporter or Reporter()
    sweep_id = sweep_id or _fresh_sweep_id(Path(out) / experiment.name)
    points = experiment.points
    done = finished_runs(Path(out), experiment.name) if resume else {}
    todo = [(position, repetition) for position, point in enumerate(points)
            for repetition in range(point.spec.run.repetitions)
            if (point.config_hash, repetition) not in done]
    common = {"revision": git_revision(), "packages": package_versions(), "host": host_facts()}
    shared = (experiment, Path(out), sweep_id, common)
    jobs = min(jobs, len(todo))
    outcomes = []
    # The workers start before the reporter does: forked before the progress bars' threads.
    with Workers(jobs, run_at, shared) if jobs > 1 else contextlib.nullcontext() as workers:
        reporter.start(len(todo), sum(points[p].spec.run.duration for p, _ in todo))
        for point in points:
            for repetition in range(point.spec.run.repetitions):
                if (kept := done.get((point.config_hash, repetition))) is not None:
                    reporter.note(f"p{point.index} r{repetition}: done before, {kept.folder}")
        ran = (workers.run([(item, item) for item in longest_first(points, todo)], reporter)
               if workers else {})
    for position, point in enumerate(points):
        for repetition in range(point.spec.run.repetitions):
            if (kept := done.get((point.config_hash, repetition))) is not None:
                outcomes.append(replace(kept, index=point.index, point=point.values))
            elif workers:
                outcomes.append(ran[(position, repetition)])
            else:
                outcomes.append(run_at(*shared, position, repetition, reporter))
    if len(outcomes) > 1:
        _write_sweep(experiment, outcomes, sweep_folder(out, experiment.name, sweep_id), reporter)
    return outcomes


def longest_first(points, todo: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The runs to do in the order a pool of workers ends soonest: the most readings first
    (experiments.estimate; longest processing time first, within 4/3 of the best order), runs
    alike in the order given. 8 quickstart rates, 1/s to 8/s (benchmarks/sweep_parallel.py):
    in their order the 8/s run ends alone on one core, 0.522 of the serial time on 2 cores;
    longest first 0.502."""
    return sorted(todo, key=lambda item: -readings(points[item[0]].spec,
                                                   points[item[0]].topology))


def run_at(experiment: Experiment, out: Path, sweep_id: str, common: dict, position: int,
           repetition: int, reporter: Reporter) -> Outcome:
    """The run of the experiment's `position`-th point and `repetition` (in a worker, too)."""
    return run_one(experiment, experiment.points[position], repetition, out, sweep_id, common,
                   reporter)


def finished_runs(out: Path, experiment: str) -> dict[tuple[str, int], Outcome]:
    """(config hash, repetition) -> the newest `ok` run of that configuration under `out`."""
    found: dict[tuple[str, int], Outcome] = {}
    for run in runs(out, experiment):  # oldest first: the newest stays
        manifest = run.manifest
        if manifest.get("status") != "ok" or not run.summary:
            continue
        found[(manifest.get("config_hash"), int(manifest.get("repetition") or 0))] = Outcome(
            run.folder, manifest.get("point") or {}, int(manifest.get("repetition") or 0),
            run.summary, None)
    return found


def sweep_folder(out: Path | str, experiment: str, sweep_id: str) -> Path:
    """Where a sweep's own files go (points.parquet, the plots across it): beside its runs."""
    return Path(out) / experiment / f"{sweep_id}-sweep"


def _write_sweep(experiment: Experiment, outcomes: list[Outcome], folder: Path,
                 reporter: Reporter) -> None:
    """The points table of a sweep (or of repetitions), the runs it is of (`runs.json`: a
    resumed sweep's include earlier sweeps' runs), and its plots if the file asks."""
    from experiments import points

    reporter.note(f"writing the sweep's points table: {folder / points.POINTS_FILE}")
    path = points.write([o.folder for o in outcomes], folder, [o.index for o in outcomes],
                        [o.point for o in outcomes])
    (folder / points.RUNS_FILE).write_text(json.dumps(
        [{"run": o.folder.name, "point": o.index, "values": o.point} for o in outcomes],
        indent=1, default=str) + "\n", encoding="utf-8")
    if "sweep" in experiment.spec.plots:
        from experiments.plots import sweep_plots

        reporter.note(f"drawing the plots across the sweep into {folder}")
        sweep_plots(path, folder)


def run_name(sweep_id: str, point: RunPoint, repetition: int) -> str:
    """A run's folder name: the sweep, the point's index (unique), the swept values (keys by
    their last part unless two share it), the repetition; only characters safe in a path."""
    keys = list(point.values)
    short = {k: k.rsplit(".", 1)[-1] for k in keys}
    if len(set(short.values())) < len(keys):
        short = {k: k.replace(".", "_") for k in keys}
    values = "-".join(f"{short[k]}={point.values[k]}" for k in keys)
    values = re.sub(r"[^A-Za-z0-9._=+-]", "_", values)[:80]
    return f"{sweep_id}-p{point.index}" + (f"-{values}" if values else "") + f"-r{repetition}"


def _fresh_sweep_id(folder: Path) -> str:
    """The start time to the second, with a counter when that second already has a sweep."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    taken = {p.name.split("-p")[0] for p in folder.glob(f"{stamp}*")} if folder.exists() else set()
    candidate, n = stamp, 1
    while candidate in taken:
        n += 1
        candidate = f"{stamp}.{n}"
    return candidate


def run_one(experiment: Experiment, point: RunPoint, repetition: int, out: Path, sweep_id: str,
             common: dict, reporter: Reporter) -> Outcome:
    spec = point.spec
    seed = repetition_seed(spec.run.seed, repetition)
    run_id = run_name(sweep_id, point, repetition)
    # `p1 r0 rate=4/s seed=2`: the point's values as written, by the last part of their key.
    label = " ".join([f"p{point.index} r{repetition}",
                      *(f"{key.rsplit('.', 1)[-1]}={value}"
                        for key, value in point.values.items())])
    writer = RunWriter(out / experiment.name / run_id, {
        "experiment": experiment.name, "file": experiment.file, "run": run_id,
        "sweep": sweep_id, "point_index": point.index, "point": point.values,
        "repetition": repetition, "seed": seed, "backend": spec.run.backend,
        # The profile the model took its costs from, whole: a run stays explained when the
        # profile is measured again or removed.
        "calibration": (calibration.load(spec.run.calibration).facts()
                        if spec.run.calibration and spec.run.backend == "sim" else None),
        "config_hash": point.config_hash, "references": experiment.references,
        "start": now_utc(), "end": None, "status": "running", "error": None,
        **common, "config": spec.model_dump(mode="json"),
    })
    reporter.run_started(label, writer.folder, spec.run.duration)
    try:
        runner = backend(spec.run.backend)
        progress = RunProgress(reporter)
        output = runner.run(RunPlan(spec, point.topology, seed, repetition, point.replanning),
                            progress)
        progress.stage("checking and writing the tables")
        tables = conform({**output.tables, "placements": placement_table(
            point.placement, output.tables.get("placements"))})
        progress.stage("summarising")
        # Of every message, whatever record.messages writes of them.
        summary = summarise(tables, spec.run.duration, spec.run.sample, output.facts)
        writer.tables(tables, spec.record.messages)
        writer.summary(summary)
        if "latency" in spec.plots:
            from experiments.plots import latency_plot
            progress.stage("drawing the latency plot")
            latency_plot(writer.folder)
        if output.failed:
            writer.manifest["failed_nodes"] = output.failed
        # What the figures do not cover (a migration that did not finish): the run stays ok,
        # its figures whole, and says so (docs/results.md, warnings).
        writer.manifest["warnings"] = summary.get("warnings", [])
        writer.finish("degraded" if output.failed else "ok", facts=output.facts)
    except KeyboardInterrupt as stop:
        how = getattr(stop, "signal", None)
        writer.finish("interrupted", f"interrupted by {how.name}" if how is not None
                      else "interrupted by the user (Ctrl-C)")
        raise
    except Exception as exc:  # noqa: BLE001 - a failed run is recorded, the sweep goes on
        error = f"{type(exc).__name__}: {exc}"
        writer.manifest["traceback"] = traceback.format_exc()
        writer.finish("failed", error)
        reporter.run_finished(label, writer.folder, None, error)
        return Outcome(writer.folder, point.values, repetition, None, error, "failed",
                       index=point.index)
    reporter.run_finished(label, writer.folder, summary, None)
    return Outcome(writer.folder, point.values, repetition, summary, None,
                   "degraded" if output.failed else "ok", output.failed, point.index)
