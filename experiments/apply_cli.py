"""`foglab apply`: the plan from a running version of an experiment's jobs to this one.

Prints the plan (workloads.apply) as a table, a row per job that changes, with the model's
apply time (sim.apply_times), and exits as Terraform's `plan -detailed-exitcode` and
`kubectl diff` do: 0 when nothing would change, 4 when something would, 3 on a bad experiment
file, 2 on a command line click cannot read (topologies.exit_codes: a script tells a change from
a mistake); --json prints the plan as one document. On sim nothing runs: the plan and its
modelled time are the answer; executing it on a running emulation is the emu backend's part.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from experiments import catalog
from experiments.loader import Experiment, load_document, reference_file
from topologies.documents import read
from topologies.errors import SpecError
from topologies.exit_codes import ExitCode
from topologies.files import Files
from topologies.output import JsonOption, json_output
from topologies.terminal import console, escape, say
from workloads.apply import DELETE, DEPLOY, Plan, diff, state
from workloads.jobs import KEYS, compose
from workloads.pipeline import OperatorSpec


def load_composed(source: str | Path) -> tuple[Experiment, dict[str, list[OperatorSpec]]]:
    """An experiment and its jobs (job -> its operators, the validated pipeline's own
    objects); a flat pipeline is one job per operator. Jobs are expanded here before the
    loader validates the pipeline they make; the files they name are confined as the
    loader's are (topologies.files; FOGLAB_ALLOW_FILES widens it)."""
    path = catalog.experiment_path(source)
    document = read(path)
    files = Files.confined(path.parent)
    data = document.data
    if not (isinstance(data, dict) and "jobs" in data):
        experiment = load_document(document, files=files)
        return experiment, {op.name: [op] for op in experiment.spec.pipeline}
    checked = dict(data)
    if isinstance(checked.get("topology"), str):  # its sites, for `on: site:NAME`
        try:
            checked["topology"] = read(reference_file(
                "topology", checked["topology"], document, files), confidential=True).data
        except SpecError:
            checked["topology"] = None  # the loader refuses it, with its line
    composition = compose(checked, path.parent, document, files)
    expanded = {key: value for key, value in data.items() if key not in KEYS}
    expanded["pipeline"] = composition.pipeline
    try:
        experiment = load_document(dataclasses.replace(document, data=expanded), files=files)
    except SpecError as failure:  # found in the pipeline: placed at the job that made it
        placed = composition.placed(failure)
        raise placed if placed.file else document.error(placed) from None
    by_name = {op.name: op for op in experiment.spec.pipeline}
    return experiment, {job: [by_name[op.name] for op in ops]
                        for job, ops in composition.jobs.items()}


def plan_between(old: str | Path, new: str | Path) -> Plan:
    """The plan from experiment `old` (what runs) to `new` (what is wanted), each placed on
    its own topology."""
    states = []
    for source in (old, new):
        experiment, jobs = load_composed(source)
        if len(experiment.points) > 1:
            raise SpecError(("sweep",), f"{len(experiment.points)} points", "an experiment of "
                            "one sweep point: a plan compares two deployments",
                            str(experiment.file))
        states.append(state(jobs, experiment.points[0].topology))
    return diff(*states)


def apply(experiment: Annotated[str, typer.Argument(
              help="the desired version: a file or a catalog name")],
          against: Annotated[str, typer.Option(
              "--against", help="the running version: a file or a catalog name")],
          dry_run: Annotated[bool, typer.Option(
              "--dry-run", help="print the plan only (on sim nothing is ever executed)")]
          = False,
          json_: JsonOption = False) -> None:
    """Plan the change from a running version of an experiment's jobs to this one: a row per
    job to deploy, modify (in-place, replace or move) or delete, with the model's apply
    time; exit 0 when nothing changes, 4 when something would, 3 on a bad input."""
    from sim.apply_times import plan_time

    with json_output(json_) as document:
        plan = plan_between(against, experiment)  # a SpecError: exit 3, bad input
        times = dict(plan_time(plan).per_job)
        document.update(changes=not plan.empty, summary=plan.summary(),
                        jobs=[_job(change, times) for change in plan.changes],
                        model_apply_s=sum(times.values()), dry_run=dry_run)
        if not plan.empty:
            console.print(_table(plan, times))
        say(plan.summary())
        if plan.empty:
            say("No changes: the running jobs are what the experiment describes.")
            return
        say(f"Modelled apply time (sim): {sum(times.values()):.3f} s, the jobs one after "
            "another" + (" (dry run: nothing executed)" if dry_run else ""))
        raise typer.Exit(ExitCode.CHANGES)


def _job(change, times: dict[str, float]) -> dict:
    """A change of the plan as --json shows it."""
    ops = change.after if change.action != DELETE else change.before
    return {"job": change.job, "action": change.action, "class": change.kind,
            "operators": [op.name for op in ops or ()], "instances": change.instances,
            "changes": [op.describe() for op in change.operators]
            if change.action not in (DEPLOY, DELETE) else [],
            "model_s": times[change.job]}


def _table(plan: Plan, times: dict[str, float]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title="plan", title_justify="left")
    for column in ("job", "action", "class", "operators", "instances", "changes", "model s"):
        table.add_column(column, no_wrap=column not in ("changes",))
    for change in plan.changes:
        ops = change.after if change.action != DELETE else change.before
        if change.action == DEPLOY:
            what = ", ".join(f"{op.name} on {len(op.nodes)}" for op in ops or ())
        elif change.action == DELETE:
            what = ", ".join(op.name for op in ops or ())
        else:
            what = "\n".join(op.describe() for op in change.operators)
        table.add_row(escape(change.job), change.action, change.kind or "",
                      str(len(ops or ())), str(change.instances), escape(what),
                      f"{times[change.job]:.3f}")
    return table


def show_plan(plan: Plan) -> None:
    """A plan's table as `foglab apply` prints it, with the model's times: what `foglab emu
    apply` shows (emu.cli.apply_command.use_plans), which cannot import sim."""
    from sim.apply_times import plan_time

    console.print(_table(plan, dict(plan_time(plan).per_job)))
