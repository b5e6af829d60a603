"""The `foglab` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from experiments import catalog
from experiments.loader import Experiment, load
from experiments.runner import Reporter, run_experiment
from topologies.errors import SpecError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="foglab: fog and IoT stream processing experiments, simulated or emulated.")
topo_app = typer.Typer(no_args_is_help=True, help="Look at topologies.")
results_app = typer.Typer(no_args_is_help=True, help="Look at results.")
bench_app = typer.Typer(no_args_is_help=True, help="Micro-benchmarks.")
emu_app = typer.Typer(no_args_is_help=True, help="Prepare the host and images for emulation.")
app.add_typer(topo_app, name="topo")
app.add_typer(results_app, name="results")
app.add_typer(bench_app, name="bench")
app.add_typer(emu_app, name="emu")
console = Console()

Sets = Annotated[list[str] | None,
                 typer.Option("--set", help="KEY=VALUE override, e.g. run.seed=3")]
Sweeps = Annotated[list[str] | None, typer.Option(
    "--sweep", help="KEY=[v1,v2] : one run per value, e.g. run.seed=[1,2,3]")]


def _bars(counted: bool = True) -> Progress:
    """The progress bars of long commands; they vanish when done."""
    columns = [TextColumn("{task.description}"), BarColumn()]
    if counted:
        columns.append(MofNCompleteColumn())
    return Progress(*columns, TimeElapsedColumn(), console=console, transient=True)


def ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.1f}" if seconds is not None else "-"


def _load(experiment: str, sets: list[str] | None, sweeps: list[str] | None) -> Experiment:
    try:
        return load(experiment, sets or [], sweeps or [])
    except SpecError as error:
        console.print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


class RichReporter(Reporter):
    """Progress bars over simulated time and over runs, and a line per finished run."""

    def __init__(self, progress: Progress):
        self.bars = progress
        self.runs = None
        self.current = None

    def start(self, total_runs: int) -> None:
        self.runs = self.bars.add_task("runs", total=total_runs)

    def run_started(self, label: str, duration: float) -> None:
        self.current = self.bars.add_task(f"run {label}", total=duration)

    def progress(self, seconds: float) -> None:
        self.bars.update(self.current, completed=seconds)

    def run_finished(self, label, folder, summary, error) -> None:
        self.bars.update(self.current, visible=False)
        self.bars.advance(self.runs)
        if error:
            self.bars.console.print(f"[red]run {label} failed:[/red] {error}", highlight=False)


@app.command()
def run(experiment: Annotated[str, typer.Argument(help="a file or a catalog name")],
        set_: Sets = None, sweep: Sweeps = None,
        out: Annotated[Path, typer.Option(help="results folder")] = Path("results")) -> None:
    """Run an experiment (every sweep point and repetition) and summarise it."""
    loaded = _load(experiment, set_, sweep)
    with _bars() as bars:
        outcomes = run_experiment(loaded, out, RichReporter(bars))
    keys = list(outcomes[0].point) if outcomes else []
    table = Table(title=f"{loaded.name} ({loaded.spec.run.backend})")
    for column in ["rep", *keys, "delivered", "lost", "msg/s", "p50 ms", "p95 ms", "p99 ms",
                   "jitter"]:
        table.add_column(column.rsplit(".", 1)[-1], justify="right")
    for outcome in outcomes:
        cells = [str(outcome.repetition), *(str(outcome.point[k]) for k in keys)]
        s = outcome.summary
        if s is None:
            table.add_row(*cells, "[red]failed[/red]", "", "", "", "", "", "")
            continue
        lat = s["latency_s"]
        jitter = s["jitter"]["mean_abs"]
        table.add_row(*cells, f"{s['delivered']:,}", f"{s['lost']:,}",
                      f"{s['throughput_per_s']:.1f}", ms(lat["p50"]), ms(lat["p95"]),
                      ms(lat["p99"]), f"{jitter:.3f}" if jitter is not None else "-")
    console.print(table)
    for outcome in outcomes:
        console.print(f"results: {outcome.folder}", highlight=False)
        if outcome.error:
            console.print(f"  [red]failed:[/red] {outcome.error}", highlight=False)
        plot = outcome.folder / "latency.png"
        if plot.exists():
            console.print(f"plot:    {plot}", highlight=False)
    if any(o.error for o in outcomes):
        raise typer.Exit(1)


@app.command()
def validate(experiment: str, set_: Sets = None, sweep: Sweeps = None) -> None:
    """Check an experiment file without running it."""
    loaded = _load(experiment, set_, sweep)
    spec = loaded.spec
    counts = ", ".join(f"{n} {k}" for k, n in sorted(loaded.points[0].topology.counts().items()))
    console.print(f"[green]valid[/green]: {loaded.file}: {len(loaded.points)} sweep point(s) x "
                  f"{spec.run.repetitions} repetition(s) on {spec.run.backend}; topology "
                  f"{spec.topology.name} ({counts})", highlight=False)


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
        console.print(f"[red]error:[/red] --kind: expected one of {', '.join(models)}, "
                      f"got {kind!r}")
        raise typer.Exit(2)
    text = json.dumps(models[kind].model_json_schema(), indent=2)
    if out:
        out.write_text(text + "\n", encoding="utf-8")
        console.print(f"wrote {out}")
    else:
        print(text)


def _topology(name: str):
    from topologies.documents import read
    from topologies.model import expand
    from topologies.spec import TopologySpec

    path = catalog.find("topology", name)
    try:
        if path is None:
            raise SpecError((), name, "a topology file or a catalog topology ("
                            + ", ".join(catalog.names("topology")) + ")", name)
        document = read(path)
        try:
            return expand(TopologySpec.model_validate(document.data))
        except SpecError as error:
            raise document.error(error) from None
        except ValueError as exc:
            raise SpecError((), name, f"a valid topology: {exc}".splitlines()[0],
                            str(path)) from None
    except SpecError as error:
        console.print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


@topo_app.command("show")
def topo_show(topology: str) -> None:
    """Print a topology's nodes by group and its links."""
    topo = _topology(topology)
    groups = Table(title=f"{topo.name}: nodes")
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
        groups.add_row(*(str(v) for v in row))
    console.print(groups)
    links = Table(title=f"{topo.name}: links ({len(topo.links)})")
    for column in ("between", "count", "latency", "jitter", "bandwidth", "loss"):
        links.add_column(column)
    kinds: dict[tuple, int] = {}
    for link in topo.links:
        key = (topo.nodes[link.a].group, topo.nodes[link.b].group, link.latency, link.jitter,
               link.bandwidth, link.loss)
        kinds[key] = kinds.get(key, 0) + 1
    for (a, b, latency, jitter, bandwidth, loss), count in kinds.items():
        links.add_row(f"{a} - {b}", str(count), f"{latency * 1000:g} ms", f"{jitter * 1000:g} ms",
                      f"{bandwidth / 1e6:g} Mbit/s" if bandwidth else "unlimited",
                      f"{loss * 100:g}%")
    console.print(links)


@topo_app.command("draw")
def topo_draw(topology: str, out: Annotated[Path | None, typer.Option()] = None) -> None:
    """Draw a topology to a PNG file."""
    from topologies.draw import draw

    topo = _topology(topology)
    path = draw(topo, out or Path(f"{topo.name}.png"))
    console.print(f"wrote {path}", highlight=False)


@results_app.command("list")
def results_list(root: Annotated[Path, typer.Option()] = Path("results"),
                 experiment: str | None = None) -> None:
    """List runs with their status and headline figures."""
    from experiments.results import runs

    table = Table(title=f"runs under {root}")
    for column in ("experiment", "run", "backend", "status", "delivered", "p50 ms"):
        table.add_column(column)
    for found in runs(root, experiment):
        manifest, summary = found.manifest, found.summary
        p50 = (summary.get("latency_s") or {}).get("p50") if summary else None
        table.add_row(manifest.get("experiment", "?"), found.id, manifest.get("backend", "?"),
                      manifest.get("status", "?"), str(summary.get("delivered", "")),
                      f"{p50 * 1000:.1f}" if p50 is not None else "")
    console.print(table)


@results_app.command("show")
def results_show(run_folder: Path) -> None:
    """Show one run: its manifest's facts and its summary."""
    from experiments.results import load_run

    try:
        found = load_run(run_folder)
    except FileNotFoundError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    manifest = found.manifest
    for key in ("experiment", "run", "backend", "seed", "status", "error", "start", "end",
                "config_hash", "revision", "point"):
        console.print(f"{key:12} {manifest.get(key)}", highlight=False)
    console.print_json(json.dumps(found.summary))


@bench_app.command("riot")
def bench_riot(
    tasks: Annotated[list[str] | None, typer.Argument(help="task names (default: all)")] = None,
    seconds: Annotated[float, typer.Option(help="measuring time per task")] = 1.0,
    dataset: Annotated[str, typer.Option(help="city or taxi")] = "city",
    out: Annotated[Path, typer.Option(help="folder for the table and plot")] = Path(
        "results/bench-riot")) -> None:
    """RIoTBench's micro-benchmark: each task on one core, its peak throughput, latency
    percentiles, CPU per message and memory (seed 003, section 5); writes a table and a plot.
    The CPU per message is what `python -m workloads.riot.costs` turns into simulator costs."""
    from workloads.riot.bench import bench_tasks, write_report
    from workloads.riot.tasks.base import TASKS

    names = tasks or sorted(TASKS)
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        console.print(f"[red]error:[/red] unknown task {unknown[0]!r}; tasks are "
                      f"{', '.join(sorted(TASKS))}", highlight=False)
        raise typer.Exit(2)
    with _bars() as bars:
        bar = bars.add_task("tasks", total=len(names))
        table = bench_tasks(names, duration=seconds, dataset=dataset,
                            progress=lambda name, done, total: bars.update(
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
        console.print(f"{kind:8} {path}", highlight=False)


@emu_app.command("doctor")
def emu_doctor(fix: Annotated[bool, typer.Option(
        help="install and start what is missing (root): docker.io, qemu-user-static, "
             "binfmt-support, debootstrap")] = False) -> None:
    """Check this host for emulation: Docker Engine, arm64 through binfmt, debootstrap, netem."""
    from emu.host import check

    outcome = check(fix=fix, report=lambda line: console.print(f"[dim]{line}[/dim]"))
    console.print(outcome.table())
    if not outcome.ready:
        raise typer.Exit(1)


@emu_app.command("build")
def emu_build(images: Annotated[list[str] | None, typer.Argument(
        help="gateway, cloud, services (default: all)")] = None) -> None:
    """Build the images from Debian (debootstrap, docker import); cached by their inputs."""
    from emu.images import IMAGES, ensure_image

    names = images or list(IMAGES)
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        console.print(f"[red]error:[/red] unknown image {unknown[0]!r}; images are "
                      f"{', '.join(IMAGES)}", highlight=False)
        raise typer.Exit(2)
    with _bars(counted=False) as bars:
        for name in names:
            bar = bars.add_task(name, total=1.0)

            def progress(stage: str, fraction: float | None, bar=bar, name=name) -> None:
                bars.update(bar, description=f"{name}: {stage}",
                            completed=fraction if fraction is not None else None)

            built = ensure_image(IMAGES[name], progress=progress)
            bars.update(bar, completed=1.0)
            console.print(f"{name:9} {built.tag}  {'cached' if built.cached else 'built'}",
                          highlight=False)


if __name__ == "__main__":
    app()
