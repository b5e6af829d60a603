"""`foglab emu`: prepare the host and images, run topologies and experiments as containers,
move operators on them.

The main command line (`experiments.cli`) adds this as its `emu` group; it prints through
`topologies.terminal` like the rest, and a Ctrl-C (or SIGTERM) at any moment of a command that
makes containers removes what it made and exits 130 (143 for SIGTERM) without a traceback;
during `migrate`, it waits until the move has finished or rolled back. What a command needs to
know of, or do to, a cluster that is up (its agents, where operators run, starting its
drivers) is emu.live.agents's; this module prints and chooses the exit codes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.progress import Progress
from rich.table import Table

from emu.cli.apply_command import emu_apply
from emu.cli.clusters import (
    ClusterOption,
    cluster_name,
    docker_client,
    load_experiment,
    which_cluster,
)
from emu.cli.migrate_command import emu_migrate
from emu.cli.plan_command import emu_plan
from emu.engines import DEFAULT as DEFAULT_ENGINE
from emu.engines import ENGINES
from emu.live.agents import EXPERIMENT_LABEL, SETS_LABEL
from topologies.errors import SpecError
from topologies.exit_codes import ExitCode
from topologies.output import JsonOption, json_output
from topologies.terminal import (
    bars,
    console,
    error,
    escape,
    exit_code,
    folder_to_write,
    messages,
    note,
    refuse,
    say,
    stop_on_signals,
    warning,
)

if TYPE_CHECKING:
    from emu.agent.config import AgentConfig
    from topologies.model import Topology

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Prepare the host and images; run topologies as containers.")

ENGINES_HELP = "; ".join(f"{e.name}: {e.summary}" for e in ENGINES.values())


def topology_or_exit(name: str):
    """The expanded topology of a catalog name or a file; else its error, and exit 3."""
    from topologies.catalog import load

    try:
        return load(name)
    except SpecError as failure:
        error(failure)
        raise typer.Exit(ExitCode.BAD_INPUT) from None


@app.command("doctor")
def emu_doctor(fix: Annotated[bool, typer.Option(
        help="install and start what is missing (root): docker.io, qemu-user-static, "
             "binfmt-support, debootstrap")] = False) -> None:
    """Check this host for emulation: Docker Engine, arm64 through binfmt, debootstrap, netem."""
    from emu.host.doctor import check

    outcome = check(fix=fix, report=note)
    console.print(outcome.table())
    if not outcome.ready:
        raise typer.Exit(ExitCode.FAILURE)


@app.command("build")
def emu_build(images: Annotated[list[str] | None, typer.Argument(
        help="gateway, cloud, services, swarm-node, rabbitmq (default: all)")] = None) -> None:
    """Build the images from Debian (debootstrap, docker import); cached by their inputs."""
    from emu.engines.docker.image_store import ensure_image
    from emu.images import IMAGES

    names = images or list(IMAGES)
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        error(f"unknown image {unknown[0]!r}; images are {', '.join(IMAGES)}")
        raise typer.Exit(ExitCode.BAD_INPUT)
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
    with each agent's config from emu.cluster.deployment."""

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
    """The topology, or the experiment's topology and agents; else the error, and exit 3."""
    if (topology is None) == (experiment is None):
        error("give a TOPOLOGY or an --experiment (one of them)")
        raise typer.Exit(ExitCode.BAD_INPUT)
    if experiment is None:
        if sets:
            error("--set changes an experiment: give one with --experiment")
            raise typer.Exit(ExitCode.BAD_INPUT)
        return _Deployed(topology_or_exit(topology))
    if agent_command:
        error("--agent-command replaces the agents, which run the experiment's drivers and "
              "operators: leave it out, or bring up the topology alone")
        raise typer.Exit(ExitCode.BAD_INPUT)
    from emu.cluster.deployment import agent_configs

    try:
        path, loaded = load_experiment(experiment, sets)
    except SpecError as failure:
        error(failure)
        raise typer.Exit(ExitCode.BAD_INPUT) from None
    if len(loaded.points) > 1:
        swept = ", ".join(sorted(loaded.points[1].values))
        error(f"{loaded.file}: sweeps {len(loaded.points)} points ({swept}); a cluster runs "
              f"one: choose it with --set, e.g. --set {swept.split(', ')[0]}=...")
        raise typer.Exit(ExitCode.BAD_INPUT)
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
            warning("interrupted: nothing of the cluster is left")
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
    import shlex

    from emu.cluster.hold import hold
    from emu.cluster.plan import plan_cluster
    from emu.engines import engine_class
    from emu.live.agents import start_drivers

    try:
        plan = plan_cluster(deployed.topology, cluster, agents=deployed.agents,
                            zookeeper=zookeeper, labels={**labels, **deployed.labels},
                            closed=deployed.closed,
                            live_acl=engine_class(engine, "--engine").live_acl)
    except SpecError as failure:
        error(failure)
        raise typer.Exit(ExitCode.BAD_INPUT) from None
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
        raise typer.Exit(ExitCode.FAILURE) from None
    try:
        if deployed.agents is not None:
            try:
                with messages.status("agents registering; then the drivers start"):
                    start_drivers(running)
            except Exception as failure:  # noqa: BLE001 - shown; the cluster goes below
                notify_path(notice, ok=False, error=str(failure))
                error(f"starting the experiment on cluster {plan.cluster}: {failure}",
                      hint=f"removed cluster {plan.cluster}")
                raise typer.Exit(ExitCode.FAILURE) from None
        console.print(_status_table(client, plan.cluster))
        facts = running.facts
        say(f"up in {facts['up_s']:.1f} s; links shaped by {facts['shaper']}; "
            f"records in {facts['records']}")
        if deployed.experiment is not None:
            say(_running_operators(plan))
        notify_path(notice, ok=True, pid=os.getpid(), facts=facts,
                    operators=_running_operators(plan) if deployed.agents else "")
        if notice is None:
            note("Ctrl-C brings the cluster down")
        hold()  # until a Ctrl-C or SIGTERM, which emu_up reports after the cluster is down
    finally:
        removed = running.down()
        say(f"cluster {plan.cluster} down: removed {removed.containers} containers, "
            f"{removed.networks} networks")
        if log is not None:
            log.unlink(missing_ok=True)


def _running_operators(plan) -> str:
    """Where the experiment's operators run, for the user to move them."""
    from emu.live.agents import running_operators

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
        note(f"bringing cluster {cluster} up in the background (pid {process.pid}, log {log})")
        with messages.status("waiting for the cluster"):
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
        raise typer.Exit(ExitCode.INTERRUPTED if outcome.get("error") == "interrupted"
                         else ExitCode.FAILURE)
    client = docker_client()
    console.print(_status_table(client, cluster))
    facts = outcome["facts"]
    say(f"up in {facts['up_s']:.1f} s; links shaped by {facts['shaper']}; records in "
        f"{facts['records']}\nthe relays run in background process {process.pid} "
        f"(log {log}); `foglab emu down --cluster {cluster}` ends it")
    if outcome.get("operators"):
        say(outcome["operators"])


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
        ended = "; ended the process holding its relays" if removed.owner_ended else ""
        say(f"cluster {name} down: removed {removed.containers} containers, "
            f"{removed.networks} networks{ended}")
    if not names:
        say("no foglab cluster is up")


@app.command("status")
def emu_status(cluster: Annotated[str | None, typer.Option(
        "--cluster", callback=cluster_name, help="one cluster (default: all)")] = None,
               json_: JsonOption = False) -> None:
    """Each container of a cluster (or of all): node, kind, state, IP, image, container id."""
    from emu.engines.docker import inventory

    with json_output(json_) as document:
        document["clusters"] = []
        client = docker_client()
        found = inventory.clusters(client)
        names = [which_cluster(client, cluster)] if cluster else list(found)
        for name in names:
            info = found.get(name)
            document["clusters"].append({
                "name": name, "topology": info and info.topology, "shaper": info and info.shaper,
                "relays_running": info and info.owner_running,
                "nodes": [{"node": n.node, "kind": n.kind, "role": n.role, "state": n.state,
                           "ip": n.ip, "image": n.image, "container": n.container}
                          for n in inventory.node_status(client, name)]})
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
        raise typer.Exit(ExitCode.FAILURE) from None

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
        raise typer.Exit(ExitCode.FAILURE) from None
    except KeyboardInterrupt:
        pass


app.command("apply")(emu_apply)
app.command("plan")(emu_plan)
app.command("migrate")(emu_migrate)
