"""foglab.jobs: jobs files from Python, as `foglab apply` reads them: a file's expansion into
its jobs' operators, the plan from one version to another, and the model's apply time.

    from foglab import jobs

    experiment, composed = jobs.expand("speck-jobs")     # job -> its operators
    plan = jobs.plan("old.yaml", "new.yaml")             # plan.changes, plan.summary()
    jobs.apply_time(plan).total                          # seconds, as sim models them

It names the experiment layer's own pieces (experiments.apply_cli, experiments.catalog,
sim.apply_times, workloads.pipeline) and decides nothing of its own.
"""

from __future__ import annotations

from pathlib import Path

from experiments.apply_cli import load_composed, plan_between
from experiments.catalog import experiment_path
from experiments.loader import Experiment
from sim import apply_times
from sim.apply_times import ApplyTime, plan_time
from topologies.model import Topology
from workloads.apply import Plan
from workloads.pipeline import OperatorSpec, placement

__all__ = ["ApplyTime", "Plan", "apply_time", "costs", "expand", "file", "nodes", "plan"]


def file(source: str | Path) -> Path:
    """The experiment file a catalog name (`speck-jobs`) or a path names."""
    return experiment_path(source)


def expand(source: str | Path) -> tuple[Experiment, dict[str, list[OperatorSpec]]]:
    """An experiment and its jobs (job name -> the operators it expands to, in the validated
    pipeline); a flat pipeline is one job per operator (experiments.apply_cli.load_composed)."""
    return load_composed(source)


def plan(old: str | Path, new: str | Path) -> Plan:
    """The plan from experiment `old` (what runs) to `new` (what is wanted): what
    `foglab apply NEW --against OLD --dry-run` prints (experiments.apply_cli.plan_between)."""
    return plan_between(old, new)


def apply_time(plan: Plan) -> ApplyTime:
    """The model's time to carry out a plan, its jobs one after another: `.total` and
    `.per_job` in seconds (sim.apply_times.plan_time)."""
    return plan_time(plan)


def costs() -> dict[str, float]:
    """The model's apply costs in seconds (sim.apply_times): per job request and per
    instance started, changed or stopped."""
    return {"deploy job": apply_times.DEPLOY_JOB, "modify job": apply_times.MODIFY_JOB,
            "delete job": apply_times.DELETE_JOB,
            "start instance": apply_times.START_INSTANCE,
            "modify instance": apply_times.MODIFY_INSTANCE,
            "stop instance": apply_times.STOP_INSTANCE}


def nodes(topology: Topology, on: list[str]) -> list[str]:
    """The nodes an operator's `on` names in a topology (`site:north`: that district's
    gateways and cloud VMs; workloads.pipeline.placement)."""
    return placement(topology, on)
