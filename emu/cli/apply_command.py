"""`foglab emu apply`: an experiment's jobs made to run on a cluster that is up.

Reads what the agents run (emu.live.apply), prints the plan from it to the experiment as `foglab
apply` does (its table, handed over by the experiment layer: `use_plans`), and exits as it
does with --dry-run: 0 when nothing would change, 4 when something would, 1 on a failure, 3
on a bad experiment or option (topologies.exit_codes).
Without --dry-run the plan is carried out, read back and checked; each step's time printed;
exit 0 once what runs is what the experiment describes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from emu.cli.clusters import (
    cluster_name,
    load_experiment,
    reach_cluster,
)
from topologies.errors import SpecError
from topologies.exit_codes import ExitCode
from topologies.terminal import console, error, escape, note, refuse, say

# How the plan is shown: `foglab apply`'s table with the model's times (experiments.apply_cli),
# which emu cannot import; handed over by the experiment layer as it mounts these commands.
_shows: list[Callable[[Any], None]] = []


def use_plans(show: Callable[[Any], None]) -> None:
    """Take `show(plan)`: print a plan (workloads.apply.Plan) as `foglab apply` does."""
    _shows[:] = [show]


def _show(plan) -> None:
    if _shows:
        _shows[0](plan)
        return
    for change in plan.changes:  # mounted without the experiment layer: one line a job
        say(f"  {change.job}  {change.action} {change.kind or ''}")


def emu_apply(
    experiment: Annotated[str, typer.Argument(
        help="the desired version: an experiment file or catalog name")],
    cluster: Annotated[str | None, typer.Option(
        "--cluster", help="the cluster's name (default: the only cluster there is)")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="print the plan from what runs only; change nothing")] = False,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="KEY=VALUE: change the experiment (as `foglab run --set`)")] = None,
    timeout: Annotated[float, typer.Option(help="seconds one request may take")] = 30.0,
) -> None:
    """Make a cluster that is up run an experiment's jobs: read what its agents run, plan
    (deploy, modify in-place, replace or move, delete), carry the plan out and check it;
    --dry-run prints the plan only (exit 0 nothing would change, 4 something would)."""
    from topologies.terminal import positive

    cluster_name(cluster)
    positive("--timeout", timeout)
    path, loaded, wanted = _desired(experiment, set_ or [])
    name, agents, nodes, routes, login = _reached(cluster, path, wanted)
    spec = loaded.points[0].spec
    settings = getattr(spec.scenario, "migration", None)
    strategy = getattr(settings, "strategy", None) or "pause_transfer"
    job_of = {config.name: config.job for config in wanted.configs.values()}
    applied, after = _carried_out(name, routes, login, nodes, job_of, wanted, dry_run=dry_run,
                                  agents=agents, strategy=strategy, settings=settings,
                                  timeout=timeout)
    console.print(_times(applied))
    if not after.empty:
        from emu.live.apply import differences

        error(f"applied, but cluster {name} does not run what the experiment describes: "
              f"{differences(after)}")
        raise typer.Exit(ExitCode.FAILURE)
    say(f"Applied in {applied.total_s:.3f} s (read {applied.read_s:.3f}, execute "
        f"{applied.execute_s:.3f}, verify {applied.verify_s:.3f}); cluster {name} runs what "
        "the experiment describes.")


def _desired(experiment: str, overrides: list[str]):
    """(the experiment's file, its loaded form with the --set `overrides`, what its one sweep
    point runs: emu.live.apply's desired state); exit 3 (bad input) if it does not load or
    sweeps."""
    from emu.live.apply import desired

    try:
        path, loaded = load_experiment(experiment, overrides)
        if len(loaded.points) > 1:
            raise SpecError(("sweep",), f"{len(loaded.points)} points", "one sweep point "
                            "(pin it with --set): a cluster runs one", str(loaded.file))
        wanted = desired(loaded)
    except SpecError as failure:
        refuse(failure)
    return path, loaded, wanted


def _reached(cluster: str | None, path, wanted):
    """The running cluster the experiment goes to: (its name, its agents, their nodes, each
    node's broker, the login to them); exit 1 (failure) if it cannot place the experiment's
    operators or no broker of its agents is known."""
    from emu.live.apply import agent_nodes

    _, name, agents, brokers, _, login = reach_cluster(cluster, ExitCode.FAILURE)
    nodes = agent_nodes(agents)
    absent = sorted({node for _, node in wanted.configs} - set(nodes))
    if absent:
        error(f"{path}: places operators on {', '.join(absent)}, which cluster {name} has "
              f"no running agent of (its agents: {', '.join(nodes) or 'none'}): bring the "
              "experiment's topology up")
        raise typer.Exit(ExitCode.FAILURE)
    routes = {node: brokers[agents[node].broker] for node in nodes
              if agents[node].broker in brokers}
    if not routes:
        error(f"cluster {name}: no agent's broker is known")
        raise typer.Exit(ExitCode.FAILURE)
    return name, agents, nodes, routes, login


def _carried_out(name: str, routes, login, nodes, job_of, wanted, *, dry_run: bool, agents,
                 strategy: str, settings, timeout: float):
    """Read what the cluster runs, print the plan from it and, but on a dry run, carry it out
    (emu.live.apply.execute) and read back: (the steps' times, the plan from what runs then).
    Exits OK when nothing would change, CHANGES on a dry run that would change something,
    FAILURE when an agent is silent or a step fails (topologies.exit_codes)."""
    import time

    from emu.control.commands import Controller
    from emu.live.apply import Applied, ApplyError, execute, plan_for, read_running

    applied = Applied()
    try:
        # A closed cluster's run-time grants: an install on a node its plan did not place the
        # operator on grants the node its reads first (emu.cluster.grants).
        from emu.engines.docker.acl_reload import cluster_grants

        with Controller(routes, credentials=login, grants=cluster_grants(name)) as control:
            started = time.perf_counter()
            running = read_running(control, nodes, job_of)
            applied.read_s = time.perf_counter() - started
            if running.silent:
                raise ApplyError(f"no answer from {', '.join(running.silent)} within its "
                                 "timeout: what it runs is unknown, so nothing is planned "
                                 "(is its agent up? `foglab emu status`)")
            plan = plan_for(running, wanted)
            if not plan.empty:
                _show(plan)
            say(plan.summary())
            if plan.empty:
                say(f"No changes: cluster {name} runs what the experiment describes.")
                raise typer.Exit(ExitCode.OK)
            if dry_run:
                say("(dry run: nothing executed)")
                raise typer.Exit(ExitCode.CHANGES)
            applied.steps = execute(control, plan, wanted, running, agents=agents,
                                    strategy=strategy, settings=settings, timeout=timeout,
                                    progress=note)
            started = time.perf_counter()
            after = plan_for(read_running(control, nodes, job_of), wanted)
            applied.verify_s = time.perf_counter() - started
    except ApplyError as failure:
        error(failure)
        raise typer.Exit(ExitCode.FAILURE) from None
    return applied, after


def _times(applied) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title="apply times", title_justify="left")
    for column in ("job", "action", "class", "requests", "s"):
        table.add_column(column, justify="right" if column in ("requests", "s") else "left")
    for step in applied.steps:
        table.add_row(escape(step.job), step.action, step.kind or "", str(step.requests),
                      f"{step.seconds:.3f}")
    return table
