"""Running an experiment from the command line: loading it (a bad file or option is one line
and exit 3), its progress bars with the time left, and what a Ctrl-C or SIGTERM leaves (which
run is marked interrupted, which had finished). Shared by `foglab run` and `foglab compare`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from experiments.cli_options import AllowFiles, Sets, Sweeps, Zips  # noqa: F401 - re-exported
from experiments.loader import Experiment, load
from experiments.runner import Estimate, Reporter, run_experiment, shown_duration
from topologies.errors import SpecError
from topologies.exit_codes import ExitCode
from topologies.terminal import (
    bars,
    error,
    exit_code,
    folder_to_read,
    folder_to_write,
    note,
    stop_on_signals,
)

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
    a line per failed run and per step after the runs, and the runs that finished."""

    def __init__(self, progress):
        self.bars = progress
        self.runs = None
        self.current = None
        self.folder: Path | None = None  # the run under way, for an interrupt to name
        self.total = 0
        self.finished: list[tuple[str, Path, str | None]] = []  # label, folder, error
        self.estimate: Estimate | None = None
        self.duration = 0.0

    def start(self, total_runs: int, total_seconds: float = 0.0) -> None:
        self.total = total_runs
        self.estimate = Estimate(total_seconds)
        self.runs = self.bars.add_task("runs", total=total_runs)

    def run_started(self, label: str, folder: Path, duration: float) -> None:
        self.folder = folder
        self.label = f"run {label}"
        self.duration = duration
        self.current = self.bars.add_task(self.label, total=duration)

    def progress(self, seconds: float) -> None:
        self.bars.update(self.current, completed=seconds)
        self._tell_left(min(seconds, self.duration))

    def _tell_left(self, current: float) -> None:
        left = self.estimate.left(current) if self.estimate else None
        if left is not None:
            self.bars.update(self.runs, description=f"runs (ETA {shown_duration(left)})")

    def note(self, text: str) -> None:
        log.info("%s", text)

    def stage(self, text: str) -> None:
        self.bars.update(self.current, description=f"{self.label} ({text})")

    def run_finished(self, label, folder, summary, error_text) -> None:
        self.bars.update(self.current, visible=False)
        self.bars.advance(self.runs)
        self.folder = None
        self.finished.append((label, folder, error_text))
        if self.estimate:
            self.estimate.run_ended(self.duration)
            self._tell_left(0.0)
        if error_text:
            error(f"run {label} failed: {error_text}")


def execute(loaded: Experiment, out: Path, sweep_id: str | None = None,
            resume: bool = False) -> list:
    """Run an experiment with progress bars; a Ctrl-C or SIGTERM (e.g. `timeout`) stops it,
    says which run folder is marked interrupted and which runs had finished (and where), and
    exits 130 (143)."""
    folder_to_write("--out", out)
    with stop_on_signals():
        reporter = None
        try:
            with bars() as shown:
                reporter = RichReporter(shown)
                return run_experiment(loaded, out, reporter, sweep_id=sweep_id, resume=resume)
        except KeyboardInterrupt as stop:
            where = reporter.folder if reporter is not None else None
            error("interrupted" + (f": run {where} is marked interrupted; what it had written "
                                   f"is there" if where else ""))
            if reporter is not None and reporter.total > 1:
                note(f"{len(reporter.finished)} of {reporter.total} runs had finished"
                     + (":" if reporter.finished else ""))
                for label, folder, failure in reporter.finished:
                    note(f"  run {label}: {folder}" + (f" (failed: {failure})" if failure else ""))
            raise typer.Exit(exit_code(stop)) from None
