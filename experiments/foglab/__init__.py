"""foglab from Python: what a notebook or a script imports (`import foglab`).

    import foglab

    experiment = foglab.load("quickstart", set=["run.duration=30s"])
    result = foglab.run(experiment)            # or foglab.run("quickstart", set=[...])
    result.summary                             # one row per run: sweep values and figures
    result.table("messages")                   # every run's messages, with run, seed, point
    foglab.results().runs()                    # the runs under a results folder
    foglab.compare(result.runs[0], other)      # two runs, figure by figure
    foglab.comparison_frame(comparison)        # that comparison as a table

Installed as the package `foglab` (pyproject.toml maps it to experiments/foglab: the
mission's top-level folders stay as they are; topologies, workloads, sim, emu and experiments
are installed as top-level packages beside it); `python -m foglab` is the command line.
It composes the experiment layer (experiments.loader, runner, results, compare) under short
names and decides nothing of its own. A bad input raises topologies.errors.SpecError (a
ValueError) naming the file, field and value, as the command line says it.

The results folder is `out` or `root` when given, else the FOGLAB_RESULTS variable, else
`results` (the command line's default). Swept values come typed as the schema reads them (a
rate in messages per second, a duration in seconds, a size in bytes), so that they sort and
plot as numbers (experiments.results does the same; `typed=False` there gives them as
written).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from experiments import compare as comparing
from experiments import results as stored
from experiments.compare import emu_unavailable, explanations, latency_cdf_figure
from experiments.loader import Experiment
from experiments.loader import load as load_file
from experiments.results import load_summaries, load_table
from experiments.runner import Outcome, Reporter, run_experiment

__all__ = ["Comparison", "Experiment", "Result", "Results", "Run", "compare",
           "comparison_frame", "emu_unavailable", "explanations", "latency_cdf_figure",
           "load", "load_summaries", "load_table", "results", "run"]

Run = stored.Run
Comparison = comparing.Comparison
RESULTS_VARIABLE = stored.RESULTS_VARIABLE


def results_folder(folder: str | Path | None = None) -> Path:
    """`folder`, else FOGLAB_RESULTS, else `results`."""
    return Path(folder if folder is not None else os.environ.get(RESULTS_VARIABLE, "results"))


def load(source: str | Path, set: Iterable[str] = (), sweep: Iterable[str] = (),  # noqa: A002
         allow_files: Iterable[str | Path] = (), paired: Iterable[str] = ()) -> Experiment:
    """An experiment file or catalog name, with `set` overrides (`run.duration=30s`),
    `sweep` values (`workload.streams.0.rate=[10/s, 50/s]`: every combination) and `paired`
    ones (the command line's --zip: the i-th run takes the i-th value of each), validated:
    every sweep point's spec, topology and placement (experiments.loader.load)."""
    return load_file(source, list(set), list(sweep), list(allow_files), list(paired))


@dataclass
class Result:
    """What `run` ran: the experiment, each run's outcome (its folder, sweep point,
    repetition, summary, error), and the runs' tables read back from their folders."""

    experiment: Experiment
    outcomes: list[Outcome]

    @property
    def ok(self) -> bool:
        """Every run ended without an error (a degraded run, some nodes failed, counts)."""
        return all(outcome.error is None for outcome in self.outcomes)

    @property
    def errors(self) -> list[str]:
        return [f"{outcome.folder.name}: {outcome.error}" for outcome in self.outcomes
                if outcome.error is not None]

    @property
    def runs(self) -> list[Run]:
        return [Run(outcome.folder) for outcome in self.outcomes]

    @property
    def summary(self) -> pd.DataFrame:
        """One row per run: its sweep values (typed), status, seed and headline figures."""
        return stored.load_summaries(self.runs, typed=True)

    def table(self, name: str = "messages", columns: list[str] | None = None,
              filter: stored.Filter = None, arrow: bool = False,  # noqa: A002
              ) -> pd.DataFrame | pa.Table:
        """One table (experiments.schema: messages, nodes, links, migrations, ...) of every
        run, with its run id, repetition, seed and sweep values (typed) as columns, read as
        one pyarrow dataset: `columns`, the table's columns to read (the run's always come),
        and `filter` (a pyarrow compute expression, `{"state": "delivered"}` or
        `[("latency", ">", 0.1)]`; on the run's columns too) pushed down to the files
        (experiments.results.load_table); `arrow`: a pyarrow Table, each column's unit in
        its field's metadata."""
        return stored.load_table(self.runs, name, typed=True, columns=columns, filter=filter,
                                 arrow=arrow)


def run(experiment: Experiment | str | Path, set: Iterable[str] = (),  # noqa: A002
        sweep: Iterable[str] = (), out: str | Path | None = None,
        reporter: Reporter | None = None, paired: Iterable[str] = (),
        resume: bool = False, jobs: int = 1) -> Result:
    """Run every sweep point and repetition of an experiment (loaded here when given as a
    file or catalog name, with `set`, `sweep` and `paired`; given loaded, it runs as it is)
    into `out`.
    A run that fails keeps its error in its outcome and the others go on: `Result.ok` says.
    `resume`: a point and repetition with an `ok` run of the same configuration in `out`
    is not run again (that run stands for it): a sweep cut short goes on.
    `jobs`: runs at once, each in a worker process (sim points only; the same results).
    `reporter`: what hears the progress (experiments.runner.Reporter; silent by default)."""
    if not isinstance(experiment, Experiment):
        experiment = load(experiment, set, sweep, paired=paired)
    elif tuple(set) or tuple(sweep) or tuple(paired):
        raise ValueError("set and sweep apply to an experiment named by its file or catalog "
                         "name; a loaded one runs as it was loaded (foglab.load(..., set=...))")
    return Result(experiment, run_experiment(experiment, results_folder(out), reporter,
                                             resume=resume, jobs=jobs))


class Results:
    """The runs under a results folder (experiments.results), oldest first."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = results_folder(root)

    def runs(self, experiment: str | None = None, sweep: str | None = None) -> list[Run]:
        return stored.runs(self.root, experiment, sweep)

    def run(self, run: str | Path) -> Run:
        """A run by its folder or the id `foglab results list` prints."""
        return stored.find_run(run, self.root)

    def summary(self, experiment: str | None = None, sweep: str | None = None) -> pd.DataFrame:
        return stored.load_summaries(self.runs(experiment, sweep), typed=True)

    def table(self, name: str = "messages", experiment: str | None = None,
              sweep: str | None = None, columns: list[str] | None = None,
              filter: stored.Filter = None, arrow: bool = False,  # noqa: A002
              ) -> pd.DataFrame | pa.Table:
        """One table of the runs (of `experiment`, of `sweep`), as Result.table reads it."""
        return stored.load_table(self.runs(experiment, sweep), name, typed=True,
                                 columns=columns, filter=filter, arrow=arrow)


def results(root: str | Path | None = None) -> Results:
    return Results(root)


def compare(first: Run | str | Path, second: Run | str | Path,
            root: str | Path | None = None, labels: Sequence[str] | None = None,
            targets: dict[str, float] | None = None) -> Comparison:
    """Two runs (Run objects, folders, or ids under `root`) figure by figure, the second's
    errors against the first (experiments.compare.compare): `Comparison.figures`, or
    `comparison_frame(...)` as a table. `targets`: the tolerances to mark (none by default;
    experiments.compare.TARGETS are the model-against-emulation ones)."""
    found = [run if isinstance(run, Run) else stored.find_run(run, results_folder(root))
             for run in (first, second)]
    if found[0].folder.resolve() == found[1].folder.resolve():
        raise ValueError(f"{found[0].folder} is both runs: name two runs to compare")
    names = tuple(labels) if labels is not None else comparing.labels(found[0].id, found[1].id)
    data = {name: comparing.read_run(run.folder) for name, run in zip(names, found, strict=True)}
    experiment = str(found[0].manifest.get("experiment") or "runs")
    return comparing.compare(data, experiment, reference=names[0],
                             targets={} if targets is None else targets)


def comparison_frame(comparison: Comparison) -> pd.DataFrame:
    """A comparison as a table: a row per figure, each run's value (seconds, counts,
    shares: the command line shows them in the figure's unit), each other run's relative
    error against the reference, and the target (None: none)."""
    rows = []
    for figure in comparison.figures:
        row = {"figure": figure.key, "target": figure.target}
        row.update({name: figure.values.get(name) for name in comparison.backends})
        row.update({f"error {name}": error for name, error in figure.errors.items()})
        rows.append(row)
    return pd.DataFrame(rows)
