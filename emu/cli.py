"""`foglab emu`: prepare the host and images, run topologies and experiments as containers,
move operators on them.

The main command line (`experiments.cli`) adds this as its `emu` group; it prints through
`topologies.terminal` like the rest, and a Ctrl-C (or SIGTERM) at any moment of a command that
makes containers removes what it made and exits 130 (143 for SIGTERM) without a traceback;
during `migrate`, it waits until the move has finished or rolled back. What a command needs to
know of, or do to, a cluster that is up (its agents, where operators run, starting its
drivers) is emu.live's; this module prints and chooses the exit codes.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.progress import Progress
from rich.table import Table

from emu.apply_cli import emu_apply
from emu.cli_clusters import (
    ClusterOption,
    cluster_name,
    docker_client,
    load_experiment,
    which_cluster,
)
from emu.engines import DEFAULT as DEFAULT_ENGINE
from emu.engines import ENGINES
from emu.live import EXPERIMENT_LABEL, PING_TIMEOUT_S, SETS_LABEL
from topologies.errors import SpecError
from topologies.terminal import (
    bars,
    console,
    error,
    escape,
    exit_code,
    folder_to_write,
    positive,
    refuse,
    say,
    stop_on_signals,
    warning,
)

if TYPE_CHECKING:
    from emu.agent.config import AgentConfig
    from topologies.model import Topology

app = typer.Typer(no_args_is_help=True,
                  help="Prepare the host and images; run topologies as containers.")

ENGINES_HELP = "; ".join(f"{e.name}: {e.summary}" for e in ENGINES.values())


# How `emu plan` predicts each container's CPU demand: the calibrated model's, which emu
# cannot run (it imports no sim), handed over by the experiment layer (experiments.planning).
_demand: list[Callable[[Any, Any], tuple[dict[str, float], float | str]]] = []


def use_demand(predict: Callable[[Any, Any], tuple[dict[str, float], float | str]]) -> None:
    """Take `predict(spec, topology)`: each container's host cores at K = 1 with the
    testbed's `relays` and `engine`, and the dilation to plan at (a number or `auto`)."""
    _demand[:] = [predict]


def topology_or_exit(name: str):
    """The expanded topology of a catalog name or a file; else its error, and exit 2."""
    from topologies.catalog import load

    try:
        return load(name)
    except SpecError as failure:
        error(failure)
        raise typer.Exit(2) from None


@app.command("doctor")
def emu_doctor(fix: Annotated[bool, typer.Option(
        help="install and start what is missing (root): docker.io, qemu-user-static, "
             "binfmt-support, debootstrap")] = False) -> None:
    """Check this host for emulation: Docker Engine, arm64 through binfmt, debootstrap, netem."""
    from emu.host import check

    outcome = check(fix=fix, report=lambda line: say(line, style="dim"))
    console.print(outcome.table())
    if not outcome.ready:
        raise typer.Exit(1)


@app.command("build")
def emu_build(images: Annotated[list[str] | None, typer.Argument(
        help="gateway, cloud, services, swarm-node, rabbitmq (default: all)")] = None) -> None:
    """Build the images from Debian (debootstrap, docker import); cached by their inputs."""
    from emu.images import IMAGES, ensure_image

    names = images or list(IMAGES)
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        error(f"unknown image {unknown[0]!r}; images are {', '.join(IMAGES)}")
        raise typer.Exit(2)
    with bars(counted=False) as shown:
        for name in names:
            bar = shown.add_task(name, total=1.0)

            def progress(stage: str, fraction: float | None, bar=bar, name=name) -> None:
                shown.update(bar, description=f"{name}: {stage}",
                             completed=fraction if fraction is not None else None)

            built = ensure_image(IMAGES[name], progress=progress)
            shown.update(bar, completed=1.0)
            say(f"{name:9} {built.tag}  {'cached' if built.cached else 'built'}")



# -- emulated clusters -----------------------------------------------------------------------

def _status_table(client, name: str) -> Table:
    from emu.engines.docker import inventory

    info = inventory.clusters(client).get(name)
    title = f"cluster {escape(name)}"
    if info is not None:
        title += f" ({escape(info.topology)}; links: {info.shaper}"
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
        table.add_row(escape(node.node), node.kind if node.role in ("agent", node.kind) else
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


@dataclass
class _Deployed:
    """What `foglab emu up` brings up: a topology alone (idle agents), or an experiment's,
    with each agent's config from emu.deployment."""

    topology: Topology
    agents: dict[str, AgentConfig] | None = None  # None: idle agents
    experiment: Path | None = None
    sets: list[str] = field(default_factory=list)
    closed: bool = True  # run.access (closed by default, a bare topology's too)

    @property
    def labels(self) -> dict[str, str]:
        """What `foglab emu migrate` reads back from the cluster: the experiment and its
        --set options (for the scenario's migration settings)."""
        if self.experiment is None:
            return {}
        return {EXPERIMENT_LABEL: str(self.experiment), SETS_LABEL: json.dumps(self.sets)}


def deployed_or_exit(topology: str | None, experiment: str | None, sets: list[str],
                     agent_command: str | None) -> _Deployed:
    """The topology, or the experiment's topology and agents; else the error, and exit 2."""
    if (topology is None) == (experiment is None):
        error("give a TOPOLOGY or an --experiment (one of them)")
        raise typer.Exit(2)
    if experiment is None:
        if sets:
            error("--set changes an experiment: give one with --experiment")
            raise typer.Exit(2)
        return _Deployed(topology_or_exit(topology))
    if agent_command:
        error("--agent-command replaces the agents, which run the experiment's drivers and "
              "operators: leave it out, or bring up the topology alone")
        raise typer.Exit(2)
    from emu.deployment import agent_configs

    try:
        path, loaded = load_experiment(experiment, sets)
    except SpecError as failure:
        error(failure)
        raise typer.Exit(2) from None
    if len(loaded.points) > 1:
        swept = ", ".join(sorted(loaded.points[1].values))
        error(f"{loaded.file}: sweeps {len(loaded.points)} points ({swept}); a cluster runs "
              f"one: choose it with --set, e.g. --set {swept.split(', ')[0]}=...")
        raise typer.Exit(2)
    point = loaded.points[0]
    spec = point.spec
    # Every operator instance reads through its own input session, so that it can move.
    agents = agent_configs(point.topology, spec.workload, spec.pipeline, spec.run.seed, 0.0,
                           moving={op.name for op in spec.pipeline}, hold=True)
    return _Deployed(point.topology, agents, path, list(sets),
                     closed=spec.run.access == "closed")


@app.command("up")
def emu_up(
    topology: Annotated[str | None, typer.Argument(
        help="a topology file or a catalog name (or give --experiment)")] = None,
    experiment: Annotated[str | None, typer.Option(
        "--experiment", "-e",
        help="an experiment file or catalog name instead of TOPOLOGY: its topology comes up "
             "with its drivers and operators running, every operator instance movable by "
             "`foglab emu migrate`. An option of its own rather than a second meaning of "
             "TOPOLOGY: the file is checked as what you say it is, with errors naming its "
             "fields, not guessed from what it holds")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="KEY=VALUE: change the experiment (as `foglab run --set`); a file "
                      "that sweeps must be pinned to one point")] = None,
    cluster: Annotated[str | None, typer.Option(
        help="the cluster's name (default: the topology's)")] = None,
    zookeeper: Annotated[int, typer.Option(help="ZooKeeper servers: 1, or 3 for an ensemble")]
    = 1,
    engine: Annotated[str, typer.Option(help=ENGINES_HELP)] = DEFAULT_ENGINE,
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
    """Bring a topology up as containers with idle agents (no drivers, no operators), or an
    experiment's with its devices and operators running from one epoch (--experiment); print
    their status, and hold it until Ctrl-C (or with --detach, until `foglab emu down`)."""
    cluster_name(cluster)
    if zookeeper not in (1, 3):
        refuse(f"--zookeeper {zookeeper}: 1 server, or 3 for an ensemble")
    if engine not in ENGINES:
        refuse(f"--engine {engine}: one of {', '.join(ENGINES)}")
    if records is not None:
        folder_to_write("--records", records)
    for item in label or []:
        if not item.partition("=")[0].strip() or "=" not in item:
            refuse(f"--label {item}: expected KEY=VALUE")
    deployed = deployed_or_exit(topology, experiment, set_ or [], agent_command)
    labels = dict(item.partition("=")[::2] for item in label or [])
    # From here on a Ctrl-C or SIGTERM at any moment removes what was made and exits 130/143.
    with stop_on_signals():
        try:
            _up(deployed, cluster, zookeeper, detach, records, agent_command, labels,
                label or [], notice, log, topology, engine)
        except KeyboardInterrupt as stop:
            notify_path(notice, ok=False, error="interrupted")
            say("interrupted: nothing of the cluster is left", style="yellow")
            raise typer.Exit(exit_code(stop)) from None


_NOTIFIED: set[Path] = set()  # notices written: the starting process reads one, then removes it


def notify_path(notice: Path | None, **facts) -> None:
    """Tell the process that started this one how `up` went, once: after a cluster that was up
    is brought down, nobody reads a second notice, which would be left behind."""
    from emu.cluster.hold import notify

    if notice is not None and notice not in _NOTIFIED:
        _NOTIFIED.add(notice)
        notify(notice, **facts)


def _up(deployed: _Deployed, cluster: str | None, zookeeper: int, detach: bool,
        records: Path | None, agent_command: str | None, labels: dict,
        label_options: list[str], notice: Path | None, log: Path | None,
        topology: str | None, engine: str = "docker") -> None:
    import os
    import shlex

    from emu.cluster.hold import hold
    from emu.cluster.plan import plan_cluster
    from emu.engines import engine_class
    from emu.live import start_drivers

    try:
        plan = plan_cluster(deployed.topology, cluster, agents=deployed.agents,
                            zookeeper=zookeeper, labels={**labels, **deployed.labels},
                            closed=deployed.closed,
                            live_acl=engine_class(engine, "--engine").live_acl)
    except SpecError as failure:
        error(failure)
        raise typer.Exit(2) from None
    if detach:
        _up_detached(topology, deployed, plan.cluster, zookeeper, records, agent_command,
                     label_options, engine)
        return
    client = docker_client()
    command = shlex.split(agent_command) if agent_command else None
    try:
        with bars() as shown:
            running = engine_class(engine, "--engine")(
                plan, client, records=records, agent_command=command,
                progress=_UpBars(shown, len(plan.containers))).up()
    except KeyboardInterrupt:
        raise  # Cluster.up removed what it had made; emu_up says so
    except Exception as failure:  # noqa: BLE001 - shown, after the cluster cleaned up
        notify_path(notice, ok=False, error=str(failure))
        error(failure, hint=f"removed what cluster {plan.cluster} had made")
        raise typer.Exit(1) from None
    try:
        if deployed.agents is not None:
            try:
                with console.status("agents registering; then the drivers start"):
                    start_drivers(running)
            except Exception as failure:  # noqa: BLE001 - shown; the cluster goes below
                notify_path(notice, ok=False, error=str(failure))
                error(f"starting the experiment on cluster {plan.cluster}: {failure}",
                      hint=f"removed cluster {plan.cluster}")
                raise typer.Exit(1) from None
        console.print(_status_table(client, plan.cluster))
        facts = running.facts
        say(f"up in {facts['up_s']:.1f} s; links shaped by {facts['shaper']}; "
            f"records in {facts['records']}")
        if deployed.experiment is not None:
            say(_running_operators(plan))
        notify_path(notice, ok=True, pid=os.getpid(), facts=facts,
                    operators=_running_operators(plan) if deployed.agents else "")
        if notice is None:
            say("Ctrl-C brings the cluster down", style="dim")
        hold()  # until a Ctrl-C or SIGTERM, which emu_up reports after the cluster is down
    finally:
        removed = running.down()
        say(f"cluster {plan.cluster} down: removed {removed.containers} containers, "
            f"{removed.networks} networks")
        if log is not None:
            log.unlink(missing_ok=True)


def _running_operators(plan) -> str:
    """Where the experiment's operators run, for the user to move them."""
    from emu.live import running_operators

    where = running_operators(plan)
    devices = sum(len(d.devices) for a in plan.agents() for d in a.agent.drivers)
    return (f"{devices} devices emitting; operators: " + ", ".join(
        f"{name} on {', '.join(nodes)}" for name, nodes in where.items())
        + "; move one with `foglab emu migrate OPERATOR --to NODE`")


def _up_detached(topology: str | None, deployed: _Deployed, cluster: str, zookeeper: int,
                 records: Path | None, agent_command: str | None, labels: list[str],
                 engine: str = "docker") -> None:
    """Run `foglab emu up` again in the background and wait until it says the cluster is up."""
    import secrets
    import tempfile

    from emu.cluster.hold import spawn, wait_for_notice

    stem = Path(tempfile.gettempdir()) / f"foglab-{cluster}-{secrets.token_hex(4)}"
    log, notice = stem.with_suffix(".log"), stem.with_suffix(".notice")
    source = ([topology] if deployed.experiment is None else
              ["--experiment", str(deployed.experiment),
               *(f"--set={item}" for item in deployed.sets)])
    argv = ["emu", "up", *source, "--cluster", cluster, "--zookeeper", str(zookeeper),
            "--engine", engine, "--notice", str(notice), "--log", str(log)]
    if records is not None:
        argv += ["--records", str(records.resolve())]
    if agent_command:
        argv += ["--agent-command", agent_command]
    for label in labels:
        argv += ["--label", label]
    process = spawn(argv, log)
    try:
        say(f"bringing cluster {cluster} up in the background (pid {process.pid}, log {log})")
        with console.status("waiting for the cluster"):
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
        error(f"{outcome.get('error')}\n{tail}")
        raise typer.Exit(130 if outcome.get("error") == "interrupted" else 1)
    client = docker_client()
    console.print(_status_table(client, cluster))
    facts = outcome["facts"]
    say(f"up in {facts['up_s']:.1f} s; links shaped by {facts['shaper']}; records in "
        f"{facts['records']}\nthe relays run in background process {process.pid} "
        f"(log {log}); `foglab emu down --cluster {cluster}` ends it")
    if outcome.get("operators"):
        say(outcome["operators"])


@app.command("plan")
def emu_plan(
    experiment: Annotated[str, typer.Argument(help="an experiment file or catalog name")],
    hosts: Annotated[int, typer.Option(help="hosts to place the containers on")] = 1,
    cores: Annotated[float | None, typer.Option(
        help="cores per host (default: this host's)")] = None,
    memory: Annotated[str | None, typer.Option(
        help="memory per host, e.g. 24GiB (default: this host's)")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="KEY=VALUE: change the experiment (as `foglab run --set`)")] = None,
    plain: Annotated[bool, typer.Option(
        help="key=value lines instead of the table")] = False,
) -> None:
    """Predict an experiment's hosts, start-up time and CPU pressure per host from the
    calibrated model (docs/capacity.md); exit 2 naming the figures when it cannot fit."""
    from emu.capacity import TARGET_PRESSURE, CapacityRefused, host_memory, plan_experiment
    from topologies import units

    if hosts < 1:
        refuse(f"--hosts {hosts}: must be at least 1")
    if cores is not None:
        positive("--cores", cores)
    size = host_memory()
    if memory is not None:
        try:
            size = units.size(memory)
        except ValueError as failure:
            refuse(f"--memory {memory}: {failure}")
        if size <= 0:
            refuse(f"--memory {memory}: must be above 0")
    if not _demand:
        refuse("emu plan needs the calibrated model's demand (these commands were mounted "
               "without the experiment layer: experiments.planning, use_demand)")
    try:
        _, loaded = load_experiment(experiment, set_ or [])
    except SpecError as failure:
        refuse(failure)
    if len(loaded.points) > 1:
        swept = ", ".join(sorted(loaded.points[1].values))
        refuse(f"{loaded.file}: sweeps {len(loaded.points)} points ({swept}); a plan is of "
               f"one: choose it with --set, e.g. --set {swept.split(', ')[0]}=...")
    point = loaded.points[0]
    spec = point.spec
    cores = cores if cores is not None else float(len(os.sched_getaffinity(0)))
    demand, dilation = _demand[0](spec, point.topology)
    try:
        plan = plan_experiment(point.topology, spec.workload, spec.pipeline, spec.run.seed,
                               demand, hosts, cores, size, dilation)
    except CapacityRefused as failure:
        refuse(f"{experiment}: {failure}")
    if plain:
        for key, value in plan.figures().items():
            console.print(f"{key}={value}", soft_wrap=True, highlight=False, markup=False)
    else:
        console.print(_plan_table(plan))
        needed = plan.hosts_needed if plan.hosts_needed is not None else "none (dilate)"
        say(f"{plan.total_demand:.2f} host cores predicted at K=1 (calibrated model), run at "
            f"K={plan.dilation:g} (asked {plan.asked}); start-up ~{plan.start_s:.1f} s; hosts "
            f"needed at pressure {TARGET_PRESSURE:g}"
            f"{' in real time' if isinstance(plan.asked, str) else ''}: {needed}")
    if plan.saturated:
        warning(f"predicted pressure {plan.max_pressure:.2f} > {TARGET_PRESSURE:g} on "
                f"{len(plan.hosts)} host(s): the emulated figures would be partly the "
                "testbed's; add --hosts or dilate (--set run.dilation=auto)")


def _plan_table(plan) -> Table:
    table = Table(box=box.SIMPLE, title=f"capacity on {len(plan.hosts)} host(s) of "
                                        f"{plan.cores:g} cores, {plan.memory / 2**30:.1f} GiB")
    for column in ("host", "containers", "sites", "cores (K=1)", "pressure", "memory GiB",
                   "start-up s"):
        table.add_column(column, justify="left" if column in ("host", "sites") else "right")
    for host in plan.hosts:
        style = "red" if host.pressure > 1 else "yellow" if host.pressure > 0.5 else None
        table.add_row(str(host.index), str(len(host.containers)),
                      escape(", ".join(host.sites)), f"{host.demand:.3f}",
                      f"{host.pressure:.3f}", f"{host.memory / 2**30:.2f}",
                      f"{host.start_s:.1f}", style=style)
    return table


@app.command("down")
def emu_down(cluster: ClusterOption = None,
             all_: Annotated[bool, typer.Option("--all", help="every foglab cluster")] = False
             ) -> None:
    """Remove a cluster: its containers, networks, relays (ending the process that holds them)
    and scratch folder, all found by the cluster's label."""
    from emu.engines.docker import inventory

    client = docker_client()
    names = list(inventory.clusters(client)) if all_ else [which_cluster(client, cluster)]
    for name in names:
        removed = inventory.remove(client, name)
        note = "; ended the process holding its relays" if removed.owner_ended else ""
        say(f"cluster {name} down: removed {removed.containers} containers, "
            f"{removed.networks} networks{note}")
    if not names:
        say("no foglab cluster is up")


@app.command("status")
def emu_status(cluster: Annotated[str | None, typer.Option(
        "--cluster", callback=cluster_name, help="one cluster (default: all)")] = None
               ) -> None:
    """Each container of a cluster (or of all): node, kind, state, IP, image, container id."""
    from emu.engines.docker import inventory

    client = docker_client()
    names = [which_cluster(client, cluster)] if cluster else list(inventory.clusters(client))
    for name in names:
        console.print(_status_table(client, name))
    if not names:
        say("no foglab cluster is up")


@app.command("exec")
def emu_exec(node: Annotated[str, typer.Argument(help="a node of the cluster, e.g. gw-1")],
             command: Annotated[list[str], typer.Argument(help="the command, after --")],
             cluster: ClusterOption = None) -> None:
    """Run a command in a node's container: foglab emu exec gw-1 -- python3 -V"""
    import sys

    from emu.engines.docker import inventory

    client = docker_client()
    name = which_cluster(client, cluster)
    try:
        found = inventory.node_of(client, name, node)
    except LookupError as failure:
        error(failure)
        raise typer.Exit(1) from None

    def out(chunk: bytes) -> None:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()

    raise typer.Exit(found.exec_stream(command, out))


@app.command("logs")
def emu_logs(node: Annotated[str, typer.Argument(help="a node of the cluster, e.g. gw-1")],
             follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
             cluster: ClusterOption = None) -> None:
    """Print a node's container log; --follow keeps printing until Ctrl-C."""
    import sys

    from emu.engines.docker import inventory

    client = docker_client()
    name = which_cluster(client, cluster)
    try:
        container = inventory.find_container(client, name, node)["Id"]
        for chunk in inventory.follow_logs(client, container, follow):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
    except LookupError as failure:
        error(failure)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass


# -- moving an operator on a cluster that is up ----------------------------------------------

# The record's figures, as `foglab emu migrate` prints them: (column, field, format).
RECORD_ROWS = (("status", "status", "{}"), ("downtime", "downtime", "{:.3f} s"),
               ("held", "held", "{}"), ("state bytes", "state_bytes", "{:,}"),
               ("chunks", "chunks", "{}"), ("lost", "lost", "{}"),
               ("duplicated", "duplicates", "{}"), ("reordered", "reordered", "{}"))


def _record_table(record) -> Table:
    table = Table(title=f"migration of {escape(record.operator)}: {escape(record.source)} -> "
                        f"{escape(record.target)} ({record.strategy})",
                  title_justify="left", box=box.SIMPLE_HEAD)
    for column, _, _ in RECORD_ROWS:
        table.add_column(column, justify="left" if column == "status" else "right")
    cells = []
    for _, name, shape in RECORD_ROWS:
        value = getattr(record, name)
        cells.append("-" if isinstance(value, float) and value != value else shape.format(value))
    colour = "green" if record.status == "done" else "red"
    cells[0] = f"[{colour}]{cells[0]}[/{colour}]"
    table.add_row(*cells)
    return table


@app.command("migrate")
def emu_migrate(
    operator: Annotated[str, typer.Argument(help="the operator to move, e.g. count")],
    to: Annotated[str, typer.Option("--to", help="the gateway or cloud VM to move it to")],
    strategy: Annotated[str | None, typer.Option(
        help="pause_drain, pause_transfer or parallel (default: the experiment's "
             "scenario.migration.strategy, else pause_transfer)")] = None,
    source: Annotated[str | None, typer.Option(
        "--from", help="the node whose instance moves, when the operator runs on several")]
    = None,
    timeout: Annotated[float, typer.Option(help="seconds one step may take")] = 30.0,
    cluster: ClusterOption = None,
) -> None:
    """Move a running operator's instance to another node of a cluster that is up (`foglab
    emu up --experiment`), showing the migration's phases, and print its record."""
    from emu.live import ExperimentGone, agents_and_brokers, cluster_login, experiment_settings
    from emu.migration import STRATEGIES

    positive("--timeout", timeout)
    if strategy is not None and strategy not in STRATEGIES:
        refuse(f"--strategy {strategy}: unknown strategy {strategy!r}; strategies on emu: "
               f"{', '.join(STRATEGIES)}")
    client = docker_client()
    name = which_cluster(client, cluster)
    agents, brokers, kinds = agents_and_brokers(client, name)
    try:
        login = cluster_login(client, name)
    except PermissionError as refused:
        error(refused)
        raise typer.Exit(1) from None
    _check_move_target(to, name, agents, kinds)
    try:
        settings = experiment_settings(client, name, load_experiment)
    except ExperimentGone as gone:
        warning(f"{gone}: the migration takes the default settings")
        settings = None
    strategy = strategy or getattr(settings, "strategy", None) or "pause_transfer"
    source = _instance_to_move(operator, source, to, name, agents, brokers, login)
    record, caught = _migrated(client, name, login, agents, brokers, operator, source, to,
                               strategy, settings, timeout)
    console.print(_record_table(record))
    if caught:
        say("interrupted: the migration had finished or rolled back first", style="yellow")
        raise typer.Exit(128 + caught[0])
    if record.status != "done":
        error(f"the migration failed and was rolled back to {source}: {record.error}")
        raise typer.Exit(1)
    say(f"{operator} runs on {to} now")


def _check_move_target(to: str, name: str, agents, kinds) -> None:
    """Exit 1 unless `to` is a node of cluster `name` whose agent can run an operator."""
    if to not in kinds:
        error(f"no node {to!r} in cluster {name}; its nodes: {', '.join(kinds)}")
        raise typer.Exit(1)
    if to not in agents or agents[to].kind not in ("gateway", "cloud_vm"):
        movable = [n for n, a in agents.items() if a.kind in ("gateway", "cloud_vm")]
        error(f"{to} is a {kinds[to]}: an operator moves to a gateway or cloud VM, whose agent "
              f"runs it ({', '.join(movable) or 'none in this cluster'})")
        raise typer.Exit(1)


def _instance_to_move(operator: str, source: str | None, to: str, name: str, agents, brokers,
                      login) -> str:
    """The node whose instance of `operator` moves to `to` (`source`, or the one node that
    runs it), asked of the agents; exit 1 if there is none, or it cannot move there."""
    from emu.live import where_operators_run as where_running

    with console.status("asking the agents what they run"):
        running, silent = where_running(agents, brokers, credentials=login)
    if not running and silent and len(silent) == len(agents):
        error(f"no agent of cluster {name} answered a ping within {PING_TIMEOUT_S:g} s "
              f"({', '.join(silent)}): are they agents (not --agent-command)?")
        raise typer.Exit(1)
    nodes = running.get(operator, [])
    if not nodes:
        known = "; ".join(f"{op} on {', '.join(where)}" for op, where in sorted(running.items()))
        error(f"no operator {operator!r} runs in cluster {name}; running: {known or 'none'}"
              + (f" (no answer from {', '.join(silent)})" if silent else ""))
        raise typer.Exit(1)
    if source is None:
        if len(nodes) > 1:
            error(f"{operator} runs on {', '.join(nodes)}: say which instance moves with --from")
            raise typer.Exit(1)
        source = nodes[0]
    elif source not in nodes:
        error(f"{operator} does not run on {source}; it runs on {', '.join(nodes)}")
        raise typer.Exit(1)
    if source == to:
        error(f"{operator} runs on {to} already: give another node with --to")
        raise typer.Exit(1)
    if to in running.get(operator, []):
        error(f"{to} runs an instance of {operator} already: one node holds one instance")
        raise typer.Exit(1)
    if agents[source].broker != agents[to].broker:
        error(f"{source} talks to broker {agents[source].broker} and {to} to "
              f"{agents[to].broker}: the emulation does not bridge brokers, so the input "
              f"session cannot move between them")
        raise typer.Exit(1)
    return source


def _migrated(client, name: str, login, agents, brokers, operator: str, source: str, to: str,
              strategy: str, settings, timeout: float):
    """Move the instance (emu.migration.migrate), its phases shown as they pass: (its record,
    the signals caught meanwhile); exit 2 if the migration could not be carried out."""
    import time

    from emu.migration import MigrationError, migrate

    # A migration under way finishes or rolls back (each step has its timeout) before a
    # Ctrl-C takes effect: cut short, it would leave the operator paused.
    with _interrupts_held() as caught, bars(counted=False) as shown:
        phase = shown.add_task(f"{operator}: {source} -> {to} ({strategy})", total=None)
        started = time.time()

        def progress(step: str) -> None:
            shown.update(phase, description=f"{operator}: {step}")
            say(f"[{time.time() - started:6.2f} s] {step}", style="dim")

        try:
            with _controller(brokers[agents[source].broker], login,
                             _grants(client, name, login)) as control:
                record = migrate(control, operator, source, to, strategy, settings,
                                 timeout=timeout, progress=progress)
        except MigrationError as failure:
            error(failure)
            raise typer.Exit(2) from None
    return record, caught


def _controller(broker: str, login: tuple[str, str] | None = None, grants=None):
    from emu.control import Controller

    return Controller(broker, credentials=login, grants=grants)


def _grants(client, cluster: str, login):
    """A closed cluster's read grants (emu.cluster.grants): the target of a move is granted
    the operator's reads before its instance starts there. None for an open cluster."""
    from emu.engines.docker.acl_reload import cluster_grants

    return cluster_grants(cluster, client, tls=getattr(login, "tls", None))


@contextlib.contextmanager
def _interrupts_held():
    """Note Ctrl-C, SIGTERM and SIGHUP instead of acting on them; the caller decides after.
    Yields the signal numbers caught."""
    import signal

    caught: list[int] = []

    def note(number: int, frame: object) -> None:
        if not caught:
            warning("a migration under way finishes or rolls back first")
        caught.append(number)

    numbers = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {number: signal.signal(number, note) for number in numbers}
    try:
        yield caught
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


app.command("apply")(emu_apply)
