"""The `foglab` command line: run, validate, schema, topo, results, bench, and `emu` (emu.cli.main).

A command's result goes to stdout, its messages and progress to stderr (`topologies.terminal`);
with --json the result is one JSON document (`topologies.output`), and the exit codes are
topologies.exit_codes's. The commands' own modules are imported when a command runs (the
heavy ones, `emu`, `compare`, `apply`, `calibrate`, by experiments.lazy_commands): shell
completion runs this program on every TAB.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from experiments.cli_options import (
    RESULTS_VARIABLE,
    AllowFiles,
    Sets,
    Sweeps,
    Zips,
    results_folder,
)
from experiments.lazy_commands import LazyGroup, QuickGroup
from topologies.errors import SpecError
from topologies.exit_codes import ExitCode
from topologies.output import JsonOption, json_output
from topologies.terminal import (
    bars,
    console,
    escape,
    file_to_write,
    fit_output,
    folder_to_read,
    folder_to_write,
    note,
    one_of,
    positive,
    refuse,
    say,
    verbosity,
)

log = logging.getLogger(__name__)

app = typer.Typer(cls=LazyGroup, add_completion=True, no_args_is_help=True,
                  help="foglab: fog and IoT stream processing experiments, simulated or emulated.")
topo_app = typer.Typer(cls=QuickGroup, no_args_is_help=True, help="Look at topologies.")
results_app = typer.Typer(cls=QuickGroup, no_args_is_help=True, help="Look at results.")
bench_app = typer.Typer(cls=QuickGroup, no_args_is_help=True, help="Micro-benchmarks.")
app.add_typer(topo_app, name="topo")
app.add_typer(results_app, name="results")
app.add_typer(bench_app, name="bench")


def _version(shown: bool) -> None:
    if shown:
        from importlib import metadata

        from experiments.results import git_revision

        try:
            version = metadata.version("foglab")
        except metadata.PackageNotFoundError:  # run from a checkout that was not installed
            version = "(not installed)"
        revision = git_revision()
        say(f"foglab {version}" + (f" (git {revision})" if revision else ""))
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_version,
        help="the package's version and the git revision it runs from")] = False,
          quiet: Annotated[bool, typer.Option(
              "--quiet", "-q", help="warnings and errors only: no notes, no progress")] = False,
          verbose: Annotated[bool, typer.Option(
              "--verbose", "-v", help="debug lines too, with their time and source")] = False
          ) -> None:
    if quiet and verbose:
        raise typer.BadParameter("-q and -v ask for opposite things: give one",
                                 param_hint="-q/-v")
    fit_output()
    verbosity(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)


@app.command("list")
def list_catalog(kind: Annotated[str | None, typer.Argument(
        help="experiments, topologies or workloads (default: all three)")] = None,
                 json_: JsonOption = False) -> None:
    """The catalog: each shipped experiment, topology and workload with its description (a
    name runs or shows as it is: `foglab run NAME`, `foglab topo show NAME`)."""
    from experiments.catalog import entries

    kinds = {"experiments": "experiment", "topologies": "topology", "workloads": "workload"}
    with json_output(json_) as document:
        if kind is not None:
            one_of("KIND", kind, list(kinds))
        for plural, singular in kinds.items():
            if kind not in (None, plural):
                continue
            found = entries(singular)
            document[plural] = [
                {"name": e.name, "description": e.description,
                 **({"topology": e.topology, "backend": e.backend}
                    if singular == "experiment" else {})} for e in found]
            console.print(_catalog_table(plural, singular, found))


def _catalog_table(plural: str, singular: str, found: list) -> Table:
    """One kind's entries as `foglab list` prints them."""
    table = Table(title=plural, title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("name", no_wrap=True, min_width=max(len(e.name) for e in found))
    if singular == "experiment":
        table.add_column("topology", no_wrap=True, min_width=max(
            len(e.topology or "") for e in found))
        table.add_column("backend", no_wrap=True, min_width=6)
    # One line each on a terminal too: the rest of a description is in its file.
    table.add_column("description", no_wrap=True, overflow="ellipsis")
    for entry in found:
        extra = ([escape(entry.topology or ""), escape(entry.backend or "")]
                 if singular == "experiment" else [])
        table.add_row(escape(entry.name), *extra, escape(entry.description))
    return table


@app.command()
def run(experiment: Annotated[str, typer.Argument(help="a file or a catalog name")],
        set_: Sets = None, sweep: Sweeps = None, zip_: Zips = None,
        out: Annotated[Path, results_folder("results folder")] = Path("results"),
        allow_files: AllowFiles = None,
        resume: Annotated[bool, typer.Option(
            "--resume", help="skip each point and repetition that has an ok run of the same "
            "configuration in the results folder (a sweep cut short goes on)")] = False,
        jobs: Annotated[int, typer.Option(
            "--jobs", "-j", help="runs at once, each in its own process (sim only)")] = 1,
        yes: Annotated[bool, typer.Option(
            "--yes", "-y", help="run even when the estimate is above the host's memory, disk "
            "or a day of wall time")] = False,
        json_: JsonOption = False) -> None:
    """Run an experiment (every sweep point and repetition) and summarise it."""
    from experiments import report
    from experiments.parallel import check_jobs
    from experiments.running import afford, execute, load_or_exit

    with json_output(json_) as document:
        loaded = load_or_exit(experiment, set_, sweep, allow_files, zip_)
        try:
            check_jobs(loaded.points, jobs)
        except ValueError as failure:
            refuse(failure)
        document.update(experiment=loaded.name, file=str(loaded.file),
                        backend=loaded.spec.run.backend, placements=placements(loaded))
        for line in document["placements"]:
            note(line)
        afford(loaded, out, jobs, yes)
        outcomes = execute(loaded, out, resume=resume, jobs=jobs)
        document["runs"] = [{"point": o.index, "values": o.point, "repetition": o.repetition,
                             "folder": str(o.folder), "status": o.status, "error": o.error,
                             "failed": o.failed, "summary": o.summary} for o in outcomes]
        report.run_summary(loaded.name, loaded.spec.run.backend, outcomes)
        if any(o.error for o in outcomes):
            raise typer.Exit(ExitCode.FAILURE)


def placements(loaded) -> list[str]:
    """Each distinct placement decision of the experiment's points, as a line."""
    from experiments.placement import described

    return list(dict.fromkeys(described(point.placement, point.replanning)
                              for point in loaded.points if point.placement is not None))


@app.command()
def validate(experiment: str, set_: Sets = None, sweep: Sweeps = None, zip_: Zips = None,
             allow_files: AllowFiles = None, json_: JsonOption = False) -> None:
    """Check an experiment file without running it."""
    from experiments.estimate import estimate
    from experiments.model_settings import unused_costs
    from experiments.running import load_or_exit

    with json_output(json_) as document:
        loaded = load_or_exit(experiment, set_, sweep, allow_files, zip_)
        # What the points run on, each distinct value once (a sweep may vary any of them).
        backends = list(dict.fromkeys(p.spec.run.backend for p in loaded.points))
        repetitions = list(dict.fromkeys(p.spec.run.repetitions for p in loaded.points))
        topologies = list(dict.fromkeys(
            f"{p.spec.topology.name} ("
            + ", ".join(f"{n} {k}" for k, n in sorted(p.topology.counts().items())) + ")"
            for p in loaded.points))
        notes = list(dict.fromkeys(note for point in loaded.points
                                   for note in unused_costs(point.spec, point.topology)))
        document.update(valid=True, file=str(loaded.file), experiment=loaded.name,
                        points=[{"point": p.index, "values": p.values} for p in loaded.points],
                        repetitions=repetitions, backends=backends, topologies=topologies,
                        placements=placements(loaded), notes=notes)
        console.print(f"[green]valid[/green]: {escape(str(loaded.file))}: "
                      f"{len(loaded.points)} sweep point(s) x "
                      f"{' or '.join(map(str, repetitions))} repetition(s) on "
                      f"{' and '.join(backends)}; topology {escape('; '.join(topologies))}",
                      soft_wrap=True)
        for line in document["placements"]:
            console.print(escape(line), soft_wrap=True)
        for line in notes:  # diagnostics, not the answer: on stderr
            log.warning("%s", line)
        cost = estimate(loaded.points)
        document["estimate"] = dataclasses.asdict(cost)
        say(cost.line())


@app.command()
def schema(kind: Annotated[str, typer.Option(help="experiment, topology or workload")]
           = "experiment",
           out: Annotated[Path | None, typer.Option(help="write to a file")] = None) -> None:
    """Write the JSON Schema of a description file, for editors to complete and check."""
    from experiments.spec import ExperimentFile
    from topologies.spec import TopologySpec
    from workloads.spec import WorkloadSpec

    models = {"experiment": ExperimentFile, "topology": TopologySpec, "workload": WorkloadSpec}
    if kind not in models:
        refuse(f"--kind: expected one of {', '.join(models)}, got {kind!r}")
    if out:
        file_to_write("--out", out)
    text = json.dumps(described_schema(kind, models[kind]), indent=2)
    if out:
        out.write_text(text + "\n", encoding="utf-8")
        say(f"wrote {out}")
    else:
        print(text)


def described_schema(kind: str, model) -> dict:
    """A model's JSON Schema with the draft it follows (`$schema`, pydantic's) and an `$id`
    naming the kind and foglab's version, first, as editors and validators look for them."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("foglab")
    except PackageNotFoundError:  # run from a source tree not installed
        release = "0"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"urn:foglab:{kind}:{release}", **model.model_json_schema()}


TopologySource = Annotated[str, typer.Argument(
    help="a topology (file or catalog name), or an experiment (file or catalog name), "
         "whose topology is shown: inline or named, with its --set options")]


def _topology(source: str, sets: list[str] | None = None):
    """The expanded topology of a topology or of an experiment (its first sweep point's, so
    with the experiment's own changes and --set options); else the error, and exit 3.

    A file is an experiment when it says what runs on the topology (a workload or pipeline):
    then its errors name the experiment's fields, not a topology's."""
    from emu.cli.main import topology_or_exit
    from experiments.catalog import find, names
    from experiments.running import load_or_exit
    from topologies import catalog as topologies
    from topologies.documents import read

    path = topologies.find(source)  # a catalog topology, or any file
    if path is None:
        path = find("experiment", source)
        if path is None:
            refuse(f"{source}: neither a topology ({', '.join(topologies.names())}) nor an "
                   f"experiment ({', '.join(names('experiment'))}), by catalog name or file")
    elif path.parent != topologies.FOLDER:
        try:
            data = read(path).data
        except SpecError as failure:
            refuse(failure)
        if not (isinstance(data, dict) and {"workload", "pipeline"} & set(data)):
            path = None
    else:
        path = None
    if path is None:  # a topology
        if sets:
            refuse(f"--set changes an experiment, and {source} is a topology")
        return topology_or_exit(source)
    return load_or_exit(str(path), sets, []).points[0].topology


@topo_app.command("show")
def topo_show(topology: TopologySource, set_: Sets = None) -> None:
    """Print a topology's nodes by group and its links."""
    topo = _topology(topology, set_)
    groups = Table(title=f"{escape(topo.name)}: nodes")
    for column in ("group", "kind", "count", "profile", "cores", "speed", "site"):
        groups.add_column(column)
    seen: dict[str, list] = {}
    for node in topo.nodes.values():
        if node.group in seen:
            seen[node.group][2] += 1
        else:
            seen[node.group] = [node.group, node.kind, 1, node.profile_name,
                                node.profile.cores, node.profile.speed, node.site or ""]
    for row in seen.values():
        groups.add_row(*(escape(str(v)) for v in row))
    console.print(groups)
    links = Table(title=f"{escape(topo.name)}: links ({len(topo.links)})")
    for column in ("between", "count", "latency", "jitter", "bandwidth", "loss"):
        links.add_column(column)
    kinds: dict[tuple, int] = {}
    for link in topo.links:
        key = (topo.nodes[link.a].group, topo.nodes[link.b].group, link.latency, link.jitter,
               link.bandwidth, link.loss)
        kinds[key] = kinds.get(key, 0) + 1
    for (a, b, latency, jitter, bandwidth, loss), count in kinds.items():
        links.add_row(escape(f"{a} - {b}"), str(count), f"{latency * 1000:g} ms",
                      f"{jitter * 1000:g} ms",
                      f"{bandwidth / 1e6:g} Mbit/s" if bandwidth else "unlimited",
                      f"{loss * 100:g}%")
    console.print(links)


@topo_app.command("draw")
def topo_draw(topology: TopologySource, set_: Sets = None,
              out: Annotated[Path | None, typer.Option(
                  help="the picture (default: TOPOLOGY.png); its suffix is its type")]
              = None) -> None:
    """Draw a topology to a PNG file."""
    from matplotlib.backend_bases import FigureCanvasBase

    from topologies.draw import draw

    kinds = FigureCanvasBase.get_supported_filetypes()
    if out is not None and out.suffix and out.suffix[1:].lower() not in kinds:
        refuse(f"--out {out}: a picture's type is its suffix, one of {', '.join(kinds)}")
    topo = _topology(topology, set_)
    path = draw(topo, file_to_write("--out", out or Path(f"{topo.name}.png")))
    say(f"wrote {path}")


@topo_app.command("export")
def topo_export(topology: TopologySource, set_: Sets = None,
                format_: Annotated[str, typer.Option(
                    "--format", help="graphml (Gephi, yEd, igraph) or json (node-link)")]
                = "graphml",
                out: Annotated[Path | None, typer.Option(
                    help="the file (default: TOPOLOGY.graphml or .json)")] = None) -> None:
    """Write a topology's nodes and links for other tools (GraphML or JSON, SI units)."""
    from topologies.export import FORMATS, export

    if format_ not in FORMATS:
        refuse(f"--format {format_}: one of {', '.join(FORMATS)}")
    topo = _topology(topology, set_)
    path = file_to_write("--out", out or Path(f"{topo.name}{FORMATS[format_][0]}"))
    say(f"wrote {export(topo, path, format_)}")


@results_app.command("list")
def results_list(root: Annotated[Path, results_folder("the results folder")] = Path("results"),
                 experiment: Annotated[str | None, typer.Option(
                     help="only this experiment's runs")] = None,
                 json_: JsonOption = False) -> None:
    """List runs with their status and headline figures."""
    from experiments.results import runs

    with json_output(json_) as document:
        document.update(root=str(root), runs=[])
        if root == Path("results") and not root.exists() and RESULTS_VARIABLE not in os.environ:
            say("no runs here yet: no results folder in this directory (foglab run makes one; "
                f"--root or {RESULTS_VARIABLE} names another)")
            return
        folder_to_read("--root", root)
        found_runs = runs(root, experiment)
        if not found_runs:
            have = sorted({run.folder.parent.name for run in runs(root)})
            say(f"no runs under {root}" + (f" of {experiment}" if experiment else "")
                + (f"; experiments with runs: {', '.join(have)}" if have else ""))
            return
        table = Table(title=f"runs under {escape(str(root))}")
        for column in ("experiment", "run", "backend", "status", "delivered", "p50 ms"):
            table.add_column(column)
        for found in found_runs:
            manifest, summary = found.manifest, found.summary or {}
            p50 = (summary.get("latency_s") or {}).get("p50")
            document["runs"].append({
                "experiment": manifest.get("experiment"), "id": found.id,
                "folder": str(found.folder), "backend": manifest.get("backend"),
                "status": manifest.get("status"), "delivered": summary.get("delivered"),
                "p50_s": p50})
            table.add_row(escape(str(manifest.get("experiment", "?"))), escape(found.id),
                          manifest.get("backend", "?"), manifest.get("status", "?"),
                          str(summary.get("delivered", "")),
                          f"{p50 * 1000:.1f}" if p50 is not None else "")
        console.print(table)


@results_app.command("show")
def results_show(run_folder: Annotated[Path, typer.Argument(
                     help="a run's folder, or the id `results list` prints")],
                 root: Annotated[Path, results_folder("the results folder an id is in")]
                 = Path("results"),
                 json_: JsonOption = False) -> None:
    """Show one run: its manifest's facts, its headline figures, its nodes, and each
    feature's own figures (migrations, recoveries, replicas, faults, broadcasts, ...); or,
    given a sweep's folder (`<sweep>-sweep`), its points again."""
    from experiments.points import POINTS_FILE, sweep_members
    from experiments.report import points_table, show_run
    from experiments.results import find_run

    with json_output(json_) as document:
        if (run_folder / POINTS_FILE).is_file():  # a sweep's folder: its points again
            folders, indices, values = sweep_members(run_folder)
            document.update(sweep=run_folder.name.removesuffix("-sweep"),
                            folder=str(run_folder), runs=[
                                {"folder": str(f), "point": i, "values": v}
                                for f, i, v in zip(folders, indices, values, strict=True)])
            say(f"sweep {document['sweep']}: {len(folders)} runs")
            points_table(folders, indices, values)
            return
        if not run_folder.is_dir() and root != Path("results"):  # an id, under a --root given
            folder_to_read("--root", root)
        try:
            found = find_run(run_folder, root)  # a folder, or an id that `results list` prints
        except (FileNotFoundError, LookupError) as failure:
            refuse(failure)
        document.update(id=found.id, folder=str(found.folder), manifest=found.manifest,
                        summary=found.summary or {})
        show_run(found.manifest, found.summary or {}, run_folder)


@bench_app.command("riot")
def bench_riot(
    tasks: Annotated[list[str] | None, typer.Argument(help="task names (default: all)")] = None,
    seconds: Annotated[float, typer.Option(help="measuring time per task")] = 1.0,
    dataset: Annotated[str, typer.Option(help="city or taxi")] = "city",
    out: Annotated[Path, typer.Option(help="folder for the table and plot")] = Path(
        "results/bench-riot")) -> None:
    """RIoTBench's micro-benchmark: each task on one core, its peak throughput, latency
    percentiles, CPU per message and memory (section 5 of "Benchmarking Distributed Stream
    Processing Platforms for IoT Applications"); writes a table and a plot.
    The CPU per message is what `python -m workloads.riot.costs` turns into simulator costs."""
    from workloads.riot.bench import bench_tasks, write_report
    from workloads.riot.datasets import DATASETS
    from workloads.riot.tasks.base import TASKS

    positive("--seconds", seconds)
    one_of("--dataset", dataset, list(DATASETS))
    folder_to_write("--out", out)
    names = tasks or sorted(TASKS)
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        refuse(f"unknown task {unknown[0]!r}; tasks are {', '.join(sorted(TASKS))}")
    with bars() as shown:
        bar = shown.add_task("tasks", total=len(names))
        table = bench_tasks(names, duration=seconds, dataset=dataset,
                            progress=lambda name, done, total: shown.update(
                                bar, completed=done, description=name))
    view = Table(title=f"RIoTBench tasks on one core ({dataset})")
    for column in ("task", "msg/s", "CPU µs/msg", "p50 µs", "p95 µs", "p99 µs", "selectivity"):
        view.add_column(column, justify="left" if column == "task" else "right")
    for row in table.sort_values("throughput", ascending=False).itertuples():
        view.add_row(row.task, f"{row.throughput:,.0f}", f"{row.cpu_per_message * 1e6:.2f}",
                     f"{row.latency_p50 * 1e6:.1f}", f"{row.latency_p95 * 1e6:.1f}",
                     f"{row.latency_p99 * 1e6:.1f}", f"{row.selectivity_measured:.3f}")
    console.print(view)
    for kind, path in write_report(table, out).items():
        say(f"{kind:8} {path}")


if __name__ == "__main__":
    app()
