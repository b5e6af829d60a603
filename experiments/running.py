"""Running an experiment from the command line: loading it (a bad file or option is one line
and exit 3), its progress bars with the time left, and what a Ctrl-C or SIGTERM leaves (which
run is marked interrupted, which had finished). Shared by `foglab run` and `foglab compare`.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import typer

from experiments.cli_options import AllowFiles, Sets, Sweeps, Zips  # noqa: F401 - re-exported
from experiments.estimate import estimate, too_much
from experiments.loader import Experiment, load
from experiments.runner import Estimate, Reporter, run_experiment
from topologies.errors import SpecError
from topologies.exit_codes import ExitCode
from topologies.terminal import (
    bars,
    error,
    exit_code,
    folder_to_read,
    folder_to_write,
    messages,
    note,
    refuse,
    stop_on_signals,
    warning,
)
from topologies.units import shown_duration

log = logging.getLogger(__name__)


def load_or_exit(experiment: str, sets: list[str] | None, sweeps: list[str] | None,
                 allow_files: list[Path] | None = None,
                 zips: list[str] | None = None) -> Experiment:
    for folder in allow_files or []:
        folder_to_read("--allow-files", folder)
    try:
        return load(experiment, sets or [], sweeps or [], allow_files or [], zips or [])
    except SpecError as failure:
        error(failure)
        raise typer.Exit(ExitCode.BAD_INPUT) from None


class RichReporter(Reporter):
    """Progress over (simulated) time and over runs with the time left (`runs (ETA 3m 05s)`),
    a bar per run under way (several with `-j N`), a line per failed run and per step after
    the runs, and the runs that finished. The bars start with the runs (`start`)."""

    def __init__(self, progress):
        self.bars = progress
        self.runs = None
        self.total = 0
        self.finished: list[tuple[str, Path, str | None]] = []  # label, folder, error
        self.estimate: Estimate | None = None
        # The runs under way by label: bar, folder, duration, seconds done.
        self.lanes: dict[str, list] = {}
        self.label: str | None = None  # the run the next progress and stage are of

    @property
    def under_way(self) -> list[Path]:
        """The folders of the runs under way, for an interrupt to name."""
        return [lane[1] for lane in self.lanes.values()]

    def start(self, total_runs: int, total_seconds: float = 0.0) -> None:
        self.bars.start()
        self.total = total_runs
        self.estimate = Estimate(total_seconds)
        self.runs = self.bars.add_task("runs", total=total_runs)

    def current_run(self, label: str) -> None:
        self.label = label

    def run_started(self, label: str, folder: Path, duration: float) -> None:
        self.label = label
        self.lanes[label] = [self.bars.add_task(f"run {label}", total=duration), folder,
                             duration, 0.0]

    def progress(self, seconds: float) -> None:
        lane = self.lanes[self.label]
        lane[3] = min(seconds, lane[2])
        self.bars.update(lane[0], completed=seconds)
        self._tell_left()

    def _tell_left(self) -> None:
        current = sum(lane[3] for lane in self.lanes.values())
        left = self.estimate.left(current) if self.estimate else None
        if left is not None:
            self.bars.update(self.runs, description=f"runs (ETA {shown_duration(left)})")

    def note(self, text: str) -> None:
        log.info("%s", text)

    def stage(self, text: str) -> None:
        self.bars.update(self.lanes[self.label][0], description=f"run {self.label} ({text})")

    def run_finished(self, label, folder, summary, error_text) -> None:
        bar, _, duration, _ = self.lanes.pop(label)
        self.bars.update(bar, visible=False)
        self.bars.advance(self.runs)
        self.finished.append((label, folder, error_text))
        if self.estimate:
            self.estimate.run_ended(duration)
            self._tell_left()
        if error_text:
            error(f"run {label} failed: {error_text}")


def afford(loaded: Experiment, out: Path, jobs: int = 1, yes: bool = False) -> None:
    """Say what the runs will cost (experiments.estimate); above what the host has, refuse
    naming the figure and what to change (exit 3, bad input), unless `yes`; a person at a
    terminal is asked instead."""
    folder_to_write("--out", out)  # a bad folder is said first
    cost = estimate(loaded.points, jobs)
    note(cost.line())
    over = too_much(cost, out)
    if not over or yes:
        return
    if messages.is_terminal and sys.stdin.isatty():
        for line in over:
            warning(f"above the bound: {line}")
        if typer.confirm("run it anyway?", default=False, err=True):
            return
        raise typer.Exit(ExitCode.FAILURE)
    refuse("this run is above what the host has: " + "; ".join(over)
           + " (--yes runs it anyway)")


def execute(loaded: Experiment, out: Path, sweep_id: str | None = None,
            resume: bool = False, jobs: int = 1) -> list:
    """Run an experiment with progress bars (`jobs` runs at once: experiments.parallel); a
    Ctrl-C or SIGTERM (e.g. `timeout`) stops it, says which run folders are marked
    interrupted and which runs had finished (and where), and exits 130 (143)."""
    folder_to_write("--out", out)
    with stop_on_signals():
        shown = bars()
        reporter = RichReporter(shown)
        try:
            try:
                return run_experiment(loaded, out, reporter, sweep_id=sweep_id, resume=resume,
                                      jobs=jobs)
            finally:
                shown.stop()
        except KeyboardInterrupt as stop:
            interrupted(reporter)
            raise typer.Exit(exit_code(stop)) from None


def interrupted(reporter: RichReporter) -> None:
    """What an interrupt left: the runs marked interrupted, the runs that had finished."""
    where = reporter.under_way
    if len(where) == 1:
        error(f"interrupted: run {where[0]} is marked interrupted; what it had written is there")
    else:
        error("interrupted" + (f": runs {', '.join(map(str, where))} are marked interrupted; "
                               "what they had written is there" if where else ""))
    if reporter.total > 1:
        note(f"{len(reporter.finished)} of {reporter.total} runs had finished"
             + (":" if reporter.finished else ""))
        for label, folder, failure in reporter.finished:
            note(f"  run {label}: {folder}" + (f" (failed: {failure})" if failure else ""))
