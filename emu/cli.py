"""`foglab emu`: prepare the host and images, run topologies as containers.

The main command line (`experiments.cli`) adds this as its `emu` group; it prints through
`topologies.terminal` like the rest, and a Ctrl-C (or SIGTERM) at any moment of a command that
makes containers removes what it made and exits 130 (143 for SIGTERM) without a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.progress import Progress
from rich.table import Table

from topologies.errors import SpecError
from topologies.terminal import (
    bars,
    console,
    error,
    escape,
    exit_code,
    say,
    stop_on_signals,
)

app = typer.Typer(no_args_is_help=True,
                  help="Prepare the host and images; run topologies as containers.")


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
        help="gateway, cloud, services (default: all)")] = None) -> None:
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

ClusterOption = Annotated[str | None, typer.Option(
    "--cluster", help="the cluster's name (default: the only cluster there is)")]


def _docker():
    try:
        import docker

        from emu.images import DOCKER_TIMEOUT_S

        return docker.from_env(timeout=DOCKER_TIMEOUT_S, max_pool_size=24)
    except Exception as failure:  # noqa: BLE001 - whatever keeps the SDK from the engine
        error(f"no Docker Engine: {failure}", hint="foglab emu doctor --fix")
        raise typer.Exit(1) from None


def _which_cluster(client, name: str | None) -> str:
    """The named cluster, or the only one there is."""
    from emu.cluster import inventory

    found = inventory.clusters(client)
    if name is not None:
        if name not in found:
            error(f"no cluster {name!r}; clusters: {', '.join(found) or 'none'}")
            raise typer.Exit(1)
        return name
    if len(found) != 1:
        error("no cluster is up" if not found else
              f"{len(found)} clusters are up ({', '.join(found)}): choose one with --cluster")
        raise typer.Exit(1)
    return next(iter(found))


def _status_table(client, name: str) -> Table:
    from emu.cluster import inventory

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


@app.command("up")
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
    topo = topology_or_exit(topology)
    labels = dict(item.partition("=")[::2] for item in label or [])
    # From here on a Ctrl-C or SIGTERM at any moment removes what was made and exits 130/143.
    with stop_on_signals():
        try:
            _up(topo, cluster, zookeeper, detach, records, agent_command, labels, label or [],
                notice, log, topology)
        except KeyboardInterrupt as stop:
            notify_path(notice, ok=False, error="interrupted")
            say("interrupted: nothing of the cluster is left", style="yellow")
            raise typer.Exit(exit_code(stop)) from None


def notify_path(notice: Path | None, **facts) -> None:
    from emu.cluster.hold import notify

    notify(notice, **facts)


def _up(topo, cluster: str | None, zookeeper: int, detach: bool, records: Path | None,
        agent_command: str | None, labels: dict, label_options: list[str],
        notice: Path | None, log: Path | None, topology: str) -> None:
    import os
    import shlex

    from emu.cluster.engine import Cluster
    from emu.cluster.hold import hold
    from emu.cluster.plan import plan_cluster

    try:
        plan = plan_cluster(topo, cluster, zookeeper=zookeeper, labels=labels)
    except SpecError as failure:
        error(failure)
        raise typer.Exit(2) from None
    if detach:
        _up_detached(topology, plan.cluster, zookeeper, records, agent_command, label_options)
        return
    client = _docker()
    command = shlex.split(agent_command) if agent_command else None
    try:
        with bars() as shown:
            running = Cluster(plan, client, records=records, agent_command=command,
                              progress=_UpBars(shown, len(plan.containers))).up()
    except KeyboardInterrupt:
        raise  # Cluster.up removed what it had made; emu_up says so
    except Exception as failure:  # noqa: BLE001 - shown, after the cluster cleaned up
        notify_path(notice, ok=False, error=str(failure))
        error(failure, hint=f"removed what cluster {plan.cluster} had made")
        raise typer.Exit(1) from None
    try:
        console.print(_status_table(client, plan.cluster))
        facts = running.facts
        say(f"up in {facts['up_s']:.1f} s; links shaped by {facts['shaper']}; "
            f"records in {facts['records']}")
        notify_path(notice, ok=True, pid=os.getpid(), facts=facts)
        if notice is None:
            say("Ctrl-C brings the cluster down", style="dim")
        hold()  # until a Ctrl-C or SIGTERM, which emu_up reports after the cluster is down
    finally:
        removed = running.down()
        say(f"cluster {plan.cluster} down: removed {removed.containers} containers, "
            f"{removed.networks} networks")
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
    client = _docker()
    console.print(_status_table(client, cluster))
    facts = outcome["facts"]
    say(f"up in {facts['up_s']:.1f} s; links shaped by {facts['shaper']}; records in "
        f"{facts['records']}\nthe relays run in background process {process.pid} "
        f"(log {log}); `foglab emu down --cluster {cluster}` ends it")


@app.command("down")
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
        say(f"cluster {name} down: removed {removed.containers} containers, "
            f"{removed.networks} networks{note}")
    if not names:
        say("no foglab cluster is up")


@app.command("status")
def emu_status(cluster: Annotated[str | None, typer.Option(
        "--cluster", help="one cluster (default: all)")] = None) -> None:
    """Each container of a cluster (or of all): node, kind, state, IP, image, container id."""
    from emu.cluster import inventory

    client = _docker()
    names = [_which_cluster(client, cluster)] if cluster else list(inventory.clusters(client))
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

    from emu.cluster import inventory

    client = _docker()
    name = _which_cluster(client, cluster)
    try:
        container = inventory.find_container(client, name, node)["Id"]
    except LookupError as failure:
        error(failure)
        raise typer.Exit(1) from None
    execution = client.api.exec_create(container, command, stdout=True, stderr=True)
    for chunk in client.api.exec_start(execution["Id"], stream=True):
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    raise typer.Exit(client.api.exec_inspect(execution["Id"])["ExitCode"] or 0)


@app.command("logs")
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
    except LookupError as failure:
        error(failure)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass
