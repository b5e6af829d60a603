"""`foglab compare`: two runs figure by figure. One experiment on each backend (the model
against the emulation), or twice with `--against` changes, or two runs already made; the
figures and their errors are experiments.compare's, the running experiments.running's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from experiments.cli_options import Sets, results_folder
from experiments.compare import DEFAULT_BACKENDS
from experiments.loader import Experiment
from experiments.report import manifest_of
from experiments.running import execute, load_or_exit
from topologies.exit_codes import ExitCode
from topologies.output import JsonOption, json_output
from topologies.terminal import console, error, folder_to_write, note, refuse, say


def compare(
    what: Annotated[list[str], typer.Argument(
        help="an experiment (a file or a catalog name), or two runs (folders, or the ids "
        "`foglab results list` prints)", metavar="EXPERIMENT | RUN RUN", show_default=False)],
    backends: Annotated[str | None, typer.Option(
        help="the backends to run, comma-separated; errors are against emu "
        f"[default: {DEFAULT_BACKENDS}]", show_default=False)] = None,
    against: Annotated[list[str] | None, typer.Option(
        "--against", help="KEY=VALUE: run the experiment twice on its backend, the second time "
        "with these set (e.g. run.seed=8, run.calibration=NAME); errors are against the first",
        show_default=False)] = None,
    set_: Sets = None,
    out: Annotated[Path, results_folder("results folder (and where run ids are looked up)")]
    = Path("results"),
    json_: JsonOption = False) -> None:
    """Compare two runs figure by figure: delivered, lost, throughput, latency percentiles,
    CPU per node, downtime. One experiment runs on each backend (the model against the
    emulation, by default), or twice with `--against` changes; two runs already made are read
    from their folders."""
    with json_output(json_) as document:
        if len(what) > 2:
            refuse(f"compare takes one experiment or two runs, got {len(what)}: "
                   f"{' '.join(what)}")
        folder_to_write("--out", out)  # before a run is made
        if len(what) == 2:
            given = [name for name, value in (("--backends", backends),
                                              ("--against", against), ("--set", set_)) if value]
            if given:
                refuse(f"{given[0]}: two runs already made are compared as they are; "
                       f"{given[0]} is for comparing an experiment's runs")
            document.update(_compare_runs(what, out))
        elif against:
            if backends is not None:
                refuse("--backends: with --against both runs are on the experiment's "
                       "backend; choose it with --set run.backend=NAME")
            document.update(_compare_configurations(what[0], set_ or [], against, out))
        else:
            document.update(_compare_backends(what[0], backends or DEFAULT_BACKENDS, set_ or [],
                                              out))


def _one_configuration(loaded: Experiment) -> None:
    """Refuse a file that sweeps: compare runs one configuration."""
    if len(loaded.points) > 1:
        swept = ", ".join(loaded.points[1].values)
        refuse(f"{loaded.file}: compare runs one configuration, and the file sweeps {swept} "
               f"({len(loaded.points)} points): choose a value with --set KEY=VALUE")


def _run_each(loaded: dict[str, Experiment], out: Path, stamp: str, ids: dict[str, str]) -> dict:
    """Run each configuration once (a sweep id per label); exit 1 naming a failed run."""
    outcomes = {}
    for name, experiment in loaded.items():
        note(f"{name}: running {experiment.name}")
        (outcomes[name],) = execute(experiment, out, f"{stamp}-{ids[name]}")
        if outcomes[name].error:
            error(f"the {name} run failed: {outcomes[name].error} (its folder: "
                  f"{outcomes[name].folder}); nothing to compare")
            raise typer.Exit(ExitCode.FAILURE)
    return outcomes


def _show_comparison(folders: dict[str, Path], experiment: str, reference: str, out: Path,
                     stamp: str, targets: dict | None = None,
                     notes: list[str] = ()) -> dict:
    """Read the runs (exit 1 on a broken one), compare, write and print; what --json shows."""
    from experiments import compare as comparing

    try:
        runs = {n: comparing.read_run(f) for n, f in folders.items()}
    except comparing.BrokenRun as failure:  # no figures over a run that lost part of its work
        error(failure)
        raise typer.Exit(ExitCode.FAILURE) from None
    result = comparing.compare(runs, experiment, reference=reference, targets=targets)
    result.notes[:0] = notes
    paths = comparing.write(result, out / experiment / f"{stamp}-compare")
    console.print(comparing.table(result))
    for line in comparing.explanations(result):
        say(line, style="yellow" if line.startswith("*") else None)
    width = max(len(name) for name in folders) + 1
    for name, folder in folders.items():
        say(f"{name + ':':{width}} {folder}")
    for kind, path in paths.items():
        say(f"{kind + ':':11} {path}")
    return {"experiment": experiment, "reference": reference,
            "runs": {n: str(f) for n, f in folders.items()},
            "files": {k: str(p) for k, p in paths.items()},
            "comparison": result.to_json(), "explanations": comparing.explanations(result)}


def _compare_backends(experiment: str, backends: str, sets: list[str], out: Path) -> dict:
    """One configuration and seed on each backend, against the emulation."""
    from experiments import compare as comparing
    from experiments.runner import _fresh_sweep_id

    try:
        names = comparing.parse_backends(backends)
    except ValueError as failure:
        refuse(failure)
    if any(option.split("=", 1)[0].strip() == "run.backend" for option in sets):
        refuse("--set run.backend: compare runs each backend of --backends; name them there")
    loaded = {name: load_or_exit(experiment, [*sets, f"run.backend={name}",
                                              "run.repetitions=1"], [])
              for name in names}
    first = loaded[names[0]]
    _one_configuration(first)
    if "emu" in names and (why := comparing.emu_unavailable()):
        error(why)
        raise typer.Exit(ExitCode.FAILURE)
    stamp = _fresh_sweep_id(out / first.name)
    outcomes = _run_each(loaded, out, stamp, {name: name for name in names})
    return _show_comparison({n: o.folder for n, o in outcomes.items()}, first.name,
                            "emu" if "emu" in names else names[-1], out, stamp)


def _compare_configurations(experiment: str, sets: list[str], against: list[str],
                            out: Path) -> dict:
    """The experiment as written (with --set) against it with the --against changes too."""
    from experiments import compare as comparing
    from experiments.runner import _fresh_sweep_id

    base = load_or_exit(experiment, [*sets, "run.repetitions=1"], [])
    other = load_or_exit(experiment, [*sets, *against, "run.repetitions=1"], [])
    _one_configuration(base)
    _one_configuration(other)
    first, second = comparing.labels(
        comparing.written_before(against, base.spec.model_dump(mode="json"),
                                 other.spec.model_dump(mode="json")), ", ".join(against))
    if "emu" in (base.spec.run.backend, other.spec.run.backend) and (
            why := comparing.emu_unavailable()):
        error(why)
        raise typer.Exit(ExitCode.FAILURE)
    stamp = _fresh_sweep_id(out / base.name)
    outcomes = _run_each({first: base, second: other}, out, stamp,
                         {first: "first", second: "second"})
    return _show_comparison({n: o.folder for n, o in outcomes.items()}, base.name, first, out,
                            stamp, targets={}, notes=_differing(outcomes[first].folder,
                                                                outcomes[second].folder))


def _compare_runs(given: list[str], root: Path) -> dict:
    """Two runs already made, by folder or id under `root`; the second against the first."""
    from experiments import compare as comparing
    from experiments.results import find_run
    from experiments.runner import _fresh_sweep_id

    try:
        found = [find_run(run, root) for run in given]
    except (FileNotFoundError, LookupError) as failure:
        refuse(f"{failure}; compare takes one experiment or two runs")
    if found[0].folder.resolve() == found[1].folder.resolve():
        refuse(f"{given[0]} and {given[1]} are the same run: name two runs to compare")
    first, second = comparing.labels(found[0].id, found[1].id)
    experiment = str(found[0].manifest.get("experiment") or "runs")
    stamp = _fresh_sweep_id(root / experiment)
    return _show_comparison({first: found[0].folder, second: found[1].folder}, experiment,
                            first, root, stamp, targets={},
                            notes=_differing(found[0].folder, found[1].folder))


def _differing(first: Path, second: Path) -> list[str]:
    """A note of what sets two runs apart (or that nothing does but the run itself)."""
    from experiments import compare as comparing

    changes = comparing.differences(manifest_of(first), manifest_of(second))
    return [("the second run differs from the first in: " + "; ".join(changes)) if changes
            else "the two runs have the same configuration, seed and backend"]
