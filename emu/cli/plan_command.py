"""`foglab emu plan`: an experiment's hosts, start-up time and CPU pressure per host, predicted
from the calibrated model (emu.cluster.capacity's planner; docs/capacity.md)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from emu.cli.clusters import load_experiment
from topologies.errors import SpecError
from topologies.output import JsonOption, json_output
from topologies.terminal import console, escape, positive, refuse, say, warning

# How `emu plan` predicts each container's CPU demand: the calibrated model's, which emu
# cannot run (it imports no sim), handed over by the experiment layer (experiments.planning).
_demand: list[Callable[[Any, Any], tuple[dict[str, float], float | str]]] = []


def use_demand(predict: Callable[[Any, Any], tuple[dict[str, float], float | str]]) -> None:
    """Take `predict(spec, topology)`: each container's host cores at K = 1 with the
    testbed's `relays` and `engine`, and the dilation to plan at (a number or `auto`)."""
    _demand[:] = [predict]


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
    json_: JsonOption = False,
) -> None:
    """Predict an experiment's hosts, start-up time and CPU pressure per host from the
    calibrated model (docs/capacity.md); exit 3 naming the figures when it cannot fit."""
    with json_output(json_) as document:
        plan = _planned(experiment, hosts, cores, memory, set_ or [])
        document.update(figures=plan.figures(), hosts=[
            {"host": h.index, "containers": list(h.containers), "sites": list(h.sites),
             "cores": h.demand, "pressure": h.pressure, "memory_bytes": h.memory,
             "start_s": h.start_s} for h in plan.hosts])
        _print_plan(plan, plain)


def _planned(experiment: str, hosts: int, cores: float | None, memory: str | None,
             sets: list[str]):
    """The capacity plan of the experiment's one point; else its refusal (exit 3)."""
    from emu.cluster.capacity import CapacityRefused, host_memory, plan_experiment
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
        _, loaded = load_experiment(experiment, sets)
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
    return plan


def _print_plan(plan, plain: bool) -> None:
    """The plan as a table and a summary line (or key=value lines), and a warning when it
    predicts the hosts saturated."""
    from emu.cluster.capacity import TARGET_PRESSURE

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
