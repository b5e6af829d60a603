"""`foglab emu migrate`: move a running operator's instance to another node of a cluster that
is up, its phases shown as they pass, and print its record (the move is
emu.features.moves.dispatch's; this module prints and chooses the exit codes)."""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from emu.cli.clusters import ClusterOption, load_experiment, reach_cluster
from emu.live.agents import PING_TIMEOUT_S
from topologies.exit_codes import ExitCode
from topologies.terminal import (
    bars,
    console,
    error,
    escape,
    messages,
    note,
    positive,
    refuse,
    say,
    warning,
)

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
    from emu.features.moves.dispatch import STRATEGIES
    from emu.live.agents import (
        ExperimentGone,
        experiment_settings,
    )

    positive("--timeout", timeout)
    if strategy is not None and strategy not in STRATEGIES:
        refuse(f"--strategy {strategy}: unknown strategy {strategy!r}; strategies on emu: "
               f"{', '.join(STRATEGIES)}")
    client, name, agents, brokers, kinds, login = reach_cluster(cluster, 1)
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
        warning("interrupted: the migration had finished or rolled back first")
        raise typer.Exit(128 + caught[0])
    if record.status != "done":
        error(f"the migration failed and was rolled back to {source}: {record.error}")
        raise typer.Exit(ExitCode.FAILURE)
    say(f"{operator} runs on {to} now")


def _check_move_target(to: str, name: str, agents, kinds) -> None:
    """Exit 1 unless `to` is a node of cluster `name` whose agent can run an operator."""
    if to not in kinds:
        error(f"no node {to!r} in cluster {name}; its nodes: {', '.join(kinds)}")
        raise typer.Exit(ExitCode.FAILURE)
    if to not in agents or agents[to].kind not in ("gateway", "cloud_vm"):
        movable = [n for n, a in agents.items() if a.kind in ("gateway", "cloud_vm")]
        error(f"{to} is a {kinds[to]}: an operator moves to a gateway or cloud VM, whose agent "
              f"runs it ({', '.join(movable) or 'none in this cluster'})")
        raise typer.Exit(ExitCode.FAILURE)


def _instance_to_move(operator: str, source: str | None, to: str, name: str, agents, brokers,
                      login) -> str:
    """The node whose instance of `operator` moves to `to` (`source`, or the one node that
    runs it), asked of the agents; exit 1 if there is none, or it cannot move there."""
    from emu.live.agents import where_operators_run as where_running

    with messages.status("asking the agents what they run"):
        running, silent = where_running(agents, brokers, credentials=login)
    if not running and silent and len(silent) == len(agents):
        error(f"no agent of cluster {name} answered a ping within {PING_TIMEOUT_S:g} s "
              f"({', '.join(silent)}): are they agents (not --agent-command)?")
        raise typer.Exit(ExitCode.FAILURE)
    nodes = running.get(operator, [])
    if not nodes:
        known = "; ".join(f"{op} on {', '.join(where)}" for op, where in sorted(running.items()))
        error(f"no operator {operator!r} runs in cluster {name}; running: {known or 'none'}"
              + (f" (no answer from {', '.join(silent)})" if silent else ""))
        raise typer.Exit(ExitCode.FAILURE)
    if source is None:
        if len(nodes) > 1:
            error(f"{operator} runs on {', '.join(nodes)}: say which instance moves with --from")
            raise typer.Exit(ExitCode.FAILURE)
        source = nodes[0]
    elif source not in nodes:
        error(f"{operator} does not run on {source}; it runs on {', '.join(nodes)}")
        raise typer.Exit(ExitCode.FAILURE)
    if source == to:
        error(f"{operator} runs on {to} already: give another node with --to")
        raise typer.Exit(ExitCode.FAILURE)
    if to in running.get(operator, []):
        error(f"{to} runs an instance of {operator} already: one node holds one instance")
        raise typer.Exit(ExitCode.FAILURE)
    if agents[source].broker != agents[to].broker:
        error(f"{source} talks to broker {agents[source].broker} and {to} to "
              f"{agents[to].broker}: the emulation does not bridge brokers, so the input "
              f"session cannot move between them")
        raise typer.Exit(ExitCode.FAILURE)
    return source


def _migrated(client, name: str, login, agents, brokers, operator: str, source: str, to: str,
              strategy: str, settings, timeout: float):
    """Move the instance (emu.features.moves.dispatch.migrate), its phases shown as they pass: (its
    record, the signals caught meanwhile); exit 1 (a failure) if the migration could not be
    carried out (what it was asked was checked before: a bad one is refused, exit 3)."""
    import time

    from emu.features.moves.dispatch import MigrationError, migrate

    # A migration under way finishes or rolls back (each step has its timeout) before a
    # Ctrl-C takes effect: cut short, it would leave the operator paused.
    with _interrupts_held() as caught, bars(counted=False) as shown:
        phase = shown.add_task(f"{operator}: {source} -> {to} ({strategy})", total=None)
        started = time.time()

        def progress(step: str) -> None:
            shown.update(phase, description=f"{operator}: {step}")
            note(f"[{time.time() - started:6.2f} s] {step}")

        try:
            with _controller(brokers[agents[source].broker], login,
                             _grants(client, name, login)) as control:
                record = migrate(control, operator, source, to, strategy, settings,
                                 timeout=timeout, progress=progress)
        except MigrationError as failure:
            error(failure)
            raise typer.Exit(ExitCode.FAILURE) from None
    return record, caught


def _controller(broker: str, login: tuple[str, str] | None = None, grants=None):
    from emu.control.commands import Controller

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

    def held(number: int, frame: object) -> None:
        if not caught:
            warning("a migration under way finishes or rolls back first")
        caught.append(number)

    numbers = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {number: signal.signal(number, held) for number in numbers}
    try:
        yield caught
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
