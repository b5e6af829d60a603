"""The `foglab` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich import box
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
emu_app = typer.Typer(no_args_is_help=True,
                      help="Prepare the host and images; run topologies as containers.")
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



# -- emulated clusters -----------------------------------------------------------------------

ClusterOption = Annotated[str | None, typer.Option(
    "--cluster", help="the cluster's name (default: the only cluster there is)")]


def _docker():
    try:
        import docker

        from emu.images import DOCKER_TIMEOUT_S

        return docker.from_env(timeout=DOCKER_TIMEOUT_S, max_pool_size=24)
    except Exception as error:  # noqa: BLE001 - whatever keeps the SDK from the engine
        console.print(f"[red]error:[/red] no Docker Engine: {error} (foglab emu doctor --fix)",
                      highlight=False)
        raise typer.Exit(1) from None


def _which_cluster(client, name: str | None) -> str:
    """The named cluster, or the only one there is."""
    from emu.cluster import inventory

    found = inventory.clusters(client)
    if name is not None:
        if name not in found:
            console.print(f"[red]error:[/red] no cluster {name!r}; clusters: "
                          f"{', '.join(found) or 'none'}", highlight=False)
            raise typer.Exit(1)
        return name
    if len(found) != 1:
        console.print("[red]error:[/red] " + (
            "no cluster is up" if not found else
            f"{len(found)} clusters are up ({', '.join(found)}): choose one with --cluster"),
            highlight=False)
        raise typer.Exit(1)
    return next(iter(found))


def _status_table(client, name: str) -> Table:
    from emu.cluster import inventory

    info = inventory.clusters(client).get(name)
    title = f"cluster {name}"
    if info is not None:
        title += f" ({info.topology}; links: {info.shaper}"
        if info.shaper == "relay":
            title += ", relays " + ("running" if info.owner_running else
                                    "[red]gone: their process ended[/red]")
        title += ")"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("node", "kind", "state", "ip", "image", "container"):
        table.add_column(column, no_wrap=column in ("ip", "container"))
    for node in inventory.node_status(client, name):
        colour = "green" if node.state == "running" else "red"
        image, _, tag = node.image.removeprefix("foglab/").partition(":")
        table.add_row(node.node, node.kind if node.role in ("agent", node.kind) else
                      f"{node.kind} ({node.role})", f"[{colour}]{node.state}[/{colour}]",
                      node.ip, f"{image}:{tag[:8]}" if tag else image, node.container[:12])
    return table


class _UpBars:
    """Progress of `foglab emu up`: the images, the containers started, the services ready."""

    def __init__(self, bars: Progress, containers: int):
        self.bars = bars
        self.image = bars.add_task("images", total=None)
        self.containers = bars.add_task("containers", total=containers, visible=False)
        self.ready = None

    def __call__(self, stage: str, done: int, total: int, detail: str) -> None:
        if stage in ("shaper", "image"):
            self.bars.update(self.image, description=detail)
        elif stage == "networks":
            self.bars.update(self.image, visible=False)
            self.bars.update(self.containers, visible=True)
        elif stage == "containers":
            self.bars.update(self.containers, completed=done, description="containers")
        elif stage == "zygote":  # the agents' zygote importing, before the gateways start
            self.bars.update(self.containers, description=detail)
        elif stage == "ready":
            if self.ready is None:
                self.ready = self.bars.add_task("services answer", total=total)
            self.bars.update(self.ready, completed=done)


@emu_app.command("up")
def emu_up(
    topology: Annotated[str, typer.Argument(help="a topology file or a catalog name")],
    cluster: Annotated[str | None, typer.Option(
        help="the cluster's name (default: the topology's)")] = None,
    zookeeper: Annotated[int, typer.Option(help="ZooKeeper servers: 1, or 3 for an ensemble")]
    = 1,
    detach: Annotated[bool, typer.Option(
        help="return once up; the relays stay in a background process that "
             "`foglab emu down` ends")] = False,
    records: Annotated[Path | None, typer.Option(
        help="folder for the nodes' records (default: a scratch folder `down` removes)")]
    = None,
    agent_command: Annotated[str | None, typer.Option(
        help="run this instead of the agent in gateways and cloud VMs, e.g. 'sleep infinity'")]
    = None,
    label: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE: one more label on every container and network")] = None,
    notice: Annotated[Path | None, typer.Option(hidden=True)] = None,
    log: Annotated[Path | None, typer.Option(hidden=True)] = None,
) -> None:
    """Bring a topology up as containers with idle agents (no drivers, no operators), print
    their status, and hold it until Ctrl-C (or with --detach, until `foglab emu down`)."""
    import os
    import shlex

    from emu.cluster.engine import Cluster
    from emu.cluster.hold import hold, notify, stop_on_signals
    from emu.cluster.plan import plan_cluster

    topo = _topology(topology)
    labels = dict(item.partition("=")[::2] for item in label or [])
    try:
        plan = plan_cluster(topo, cluster, zookeeper=zookeeper, labels=labels)
    except SpecError as error:
        console.print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if detach:
        _up_detached(topology, plan.cluster, zookeeper, records, agent_command, label or [])
        return
    client = _docker()
    command = shlex.split(agent_command) if agent_command else None
    with stop_on_signals():
        try:
            with _bars() as bars:
                running = Cluster(plan, client, records=records, agent_command=command,
                                  progress=_UpBars(bars, len(plan.containers))).up()
        except KeyboardInterrupt:
            notify(notice, ok=False, error="interrupted")
            console.print(f"[yellow]interrupted[/yellow]: removed what cluster {plan.cluster} "
                          "had made", highlight=False)
            raise typer.Exit(130) from None
        except Exception as error:  # noqa: BLE001 - shown, after the cluster cleaned up
            notify(notice, ok=False, error=str(error))
            console.print(f"[red]error:[/red] {error}\n(removed what cluster {plan.cluster} "
                          "had made)", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        try:
            console.print(_status_table(client, plan.cluster))
            facts = running.facts
            console.print(f"up in {facts['up_s']:.1f} s; links shaped by {facts['shaper']}; "
                          f"records in {facts['records']}", highlight=False)
            notify(notice, ok=True, pid=os.getpid(), facts=facts)
            if notice is None:
                console.print("[dim]Ctrl-C brings the cluster down[/dim]")
            hold()
        except KeyboardInterrupt:
            pass
        finally:
            removed = running.down()
            console.print(f"cluster {plan.cluster} down: removed {removed.containers} "
                          f"containers, {removed.networks} networks", highlight=False)
            if log is not None:
                log.unlink(missing_ok=True)


def _up_detached(topology: str, cluster: str, zookeeper: int, records: Path | None,
                 agent_command: str | None, labels: list[str]) -> None:
    """Run `foglab emu up` again in the background and wait until it says the cluster is up."""
    import secrets
    import tempfile

    from emu.cluster.hold import spawn, wait_for_notice

    stem = Path(tempfile.gettempdir()) / f"foglab-{cluster}-{secrets.token_hex(4)}"
    log, notice = stem.with_suffix(".log"), stem.with_suffix(".notice")
    argv = ["emu", "up", topology, "--cluster", cluster, "--zookeeper", str(zookeeper),
            "--notice", str(notice), "--log", str(log)]
    if records is not None:
        argv += ["--records", str(records.resolve())]
    if agent_command:
        argv += ["--agent-command", agent_command]
    for label in labels:
        argv += ["--label", label]
    process = spawn(argv, log)
    try:
        with console.status(f"bringing cluster {cluster} up in the background "
                            f"(pid {process.pid})"):
            outcome = wait_for_notice(notice, process)
    except KeyboardInterrupt:
        # The background process cleans up what it made when told to stop.
        process.terminate()
        process.wait(timeout=120)
        outcome = {"ok": False, "error": "interrupted"}
    notice.unlink(missing_ok=True)
    if not outcome.get("ok"):
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        log.unlink(missing_ok=True)
        if process.poll() is None:
            process.wait(timeout=60)
        console.print(f"[red]error:[/red] {outcome.get('error')}\n{tail}", highlight=False,
                      soft_wrap=True)
        raise typer.Exit(1)
    client = _docker()
    console.print(_status_table(client, cluster))
    facts = outcome["facts"]
    console.print(f"up in {facts['up_s']:.1f} s; links shaped by {facts['shaper']}; records in "
                  f"{facts['records']}\nthe relays run in background process {process.pid} "
                  f"(log {log}); `foglab emu down --cluster {cluster}` ends it", highlight=False)


@emu_app.command("down")
def emu_down(cluster: ClusterOption = None,
             all_: Annotated[bool, typer.Option("--all", help="every foglab cluster")] = False
             ) -> None:
    """Remove a cluster: its containers, networks, relays (ending the process that holds them)
    and scratch folder, all found by the cluster's label."""
    from emu.cluster import inventory

    client = _docker()
    names = list(inventory.clusters(client)) if all_ else [_which_cluster(client, cluster)]
    for name in names:
        removed = inventory.remove(client, name)
        note = "; ended the process holding its relays" if removed.owner_ended else ""
        console.print(f"cluster {name} down: removed {removed.containers} containers, "
                      f"{removed.networks} networks{note}", highlight=False)
    if not names:
        console.print("no foglab cluster is up")


@emu_app.command("status")
def emu_status(cluster: Annotated[str | None, typer.Option(
        "--cluster", help="one cluster (default: all)")] = None) -> None:
    """Each container of a cluster (or of all): node, kind, state, IP, image, container id."""
    from emu.cluster import inventory

    client = _docker()
    names = [_which_cluster(client, cluster)] if cluster else list(inventory.clusters(client))
    for name in names:
        console.print(_status_table(client, name))
    if not names:
        console.print("no foglab cluster is up")


@emu_app.command("exec")
def emu_exec(node: Annotated[str, typer.Argument(help="a node of the cluster, e.g. gw-1")],
             command: Annotated[list[str], typer.Argument(help="the command, after --")],
             cluster: ClusterOption = None) -> None:
    """Run a command in a node's container: foglab emu exec gw-1 -- python3 -V"""
    import sys

    from emu.cluster import inventory

    client = _docker()
    name = _which_cluster(client, cluster)
    try:
        container = inventory.find_container(client, name, node)["Id"]
    except LookupError as error:
        console.print(f"[red]error:[/red] {error}", highlight=False)
        raise typer.Exit(1) from None
    execution = client.api.exec_create(container, command, stdout=True, stderr=True)
    for chunk in client.api.exec_start(execution["Id"], stream=True):
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    raise typer.Exit(client.api.exec_inspect(execution["Id"])["ExitCode"] or 0)


@emu_app.command("logs")
def emu_logs(node: Annotated[str, typer.Argument(help="a node of the cluster, e.g. gw-1")],
             follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
             cluster: ClusterOption = None) -> None:
    """Print a node's container log; --follow keeps printing until Ctrl-C."""
    import sys

    from emu.cluster import inventory

    client = _docker()
    name = _which_cluster(client, cluster)
    try:
        container = inventory.find_container(client, name, node)["Id"]
        for chunk in inventory.follow_logs(client, container, follow):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
    except LookupError as error:
        console.print(f"[red]error:[/red] {error}", highlight=False)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass


@emu_app.command("deploy-timing")
def emu_deploy_timing(
    gateways: Annotated[str, typer.Option(help="gateway counts, comma-separated")]
    = "50,100,150,200",
    repetitions: Annotated[int, typer.Option(help="install, update, uninstall rounds per N")]
    = 10,
    out: Annotated[Path, typer.Option(help="folder for the run's tables and plot")]
    = Path("results/deployment-timing"),
) -> None:
    """Time install, update and uninstall of an operator on N idle gateways, as seed 002's
    Figs. 3.10-3.13 did on Kura: one cluster per N, removed after it."""
    from emu.deploy_timing import COMMANDS, run_deploy_timing

    try:
        counts = [int(part) for part in gateways.split(",") if part.strip()]
    except ValueError:
        console.print(f"[red]error:[/red] --gateways: comma-separated counts, not {gateways!r}",
                      highlight=False)
        raise typer.Exit(2) from None
    client = _docker()
    with _bars() as bars:
        sizes = bars.add_task("gateway counts", total=len(counts))
        started = bars.add_task("containers", total=None, visible=False)
        commands = bars.add_task("commands", total=repetitions * len(COMMANDS), visible=False)

        def progress(stage: str, done: int, total: int, detail: str) -> None:
            if stage == "cluster":
                bars.update(started, visible=True, completed=done, total=total,
                            description="containers")
            elif stage == "registered":
                bars.update(started, description=f"registered {done}/{total}")
            elif stage == "command":
                bars.update(started, visible=False)
                bars.update(commands, visible=True, completed=done, total=total)
                bars.console.print(detail, highlight=False)
            elif stage == "down":
                bars.update(commands, visible=False, completed=0)
                bars.advance(sizes)
            elif stage == "leftover":
                bars.console.print(f"[yellow]left behind:[/yellow] {detail}", highlight=False)

        try:
            result = run_deploy_timing(counts, repetitions, out, client=client,
                                       progress=progress)
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/yellow]: clusters removed; tables of the "
                          f"counts done are under {out}", highlight=False)
            raise typer.Exit(130) from None
        except Exception as error:  # noqa: BLE001 - shown, after the cluster cleaned up
            console.print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
    table = Table(title=f"deployment timing ({result.folder})", title_justify="left",
                  box=box.SIMPLE_HEAD)
    for column in ("N", "command", "mean s", "sd s", "min s", "max s", "p95 reply s",
                   "failed"):
        table.add_column(column, justify="right" if column != "command" else "left")
    def seconds(value) -> str:
        return "-" if value is None or value != value else f"{value:.3f}"  # None or NaN

    for row in result.summary.itertuples():
        table.add_row(str(row.gateways), row.command, *(seconds(v) for v in (
            row.mean_s, row.std_s, row.min_s, row.max_s, row.latency_p95_s)), str(row.failed))
    console.print(table)

if __name__ == "__main__":
    app()
