"""The model's time to carry out a plan of jobs (workloads.apply): deploy, modify, delete.

SpecK's coordinator sends one request per job to the site that runs it, one job after
another, and its times grow linearly with the jobs (Figure 6: deploy, modify, delete of 1 to
100 jobs; modifying cheaper than deploying). The model does the same: a plan costs the sum of
its jobs' costs, and a job a fixed cost per request plus a cost per operator instance it
starts, changes or stops.

Per instance, the figures are foglab's own, measured by `benchmarks/deploy_timing.py` on the
emulation (its docstring): an install sent node after node took 0.069 s on 10 gateways
(6.9 ms a node, warm), and at 50 gateways an update took 0.61 and an uninstall 0.64 of an
install's time. The fixed costs per job (the request's round trip, the agent's and the
controller's work around it) are the emulation's apply's measure less those: `foglab emu
apply` of 1 to 100 one-instance jobs on three arm64 gateways (`benchmarks/apply.py --sweep`,
docs/jobs.md) took 21.5 ms a job to deploy, 10.0 to modify and 20.4 to delete, so a modify
is the cheapest and a delete costs nearly a deploy (SpecK's figure has a delete under a
deploy too; foglab's stop of an instance, its records flushed, is not much cheaper than its
start). A move pays a
start, a stop and the transfer of the operator's windows, assumed at 50 ms (sim.migration
models a transfer's time on the links when a run moves an operator; a plan has no run).
A Spark operator's JVM start is not modelled: it costs as a Python one.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.apply import DELETE, DEPLOY, IN_PLACE, MOVE, Change, Plan

# Measured (benchmarks/deploy_timing.py): a warm install on one gateway, sent serially.
START_INSTANCE = 0.069 / 10
# Measured: update and uninstall against install on 50 gateways (0.34 s, 0.36 s, 0.56 s).
MODIFY_INSTANCE = START_INSTANCE * 0.34 / 0.56
STOP_INSTANCE = START_INSTANCE * 0.36 / 0.56
# Measured (benchmarks/apply.py on the emulation: seconds per one-instance job, the slopes
# over 1 to 100 jobs on a quiet host), less the instance's own part above.
DEPLOY_JOB = 0.0215 - START_INSTANCE
MODIFY_JOB = 0.0100 - MODIFY_INSTANCE
DELETE_JOB = 0.0204 - STOP_INSTANCE
# Assumed: moving a window's state between nodes, beyond the stop and the start.
STATE_TRANSFER = 0.050


@dataclass(frozen=True)
class ApplyTime:
    """A plan's modelled time, in total and per job (in the plan's order)."""

    total: float
    per_job: tuple[tuple[str, float], ...]


def change_time(change: Change) -> float:
    """One job's modelled apply time, in seconds."""
    if change.action == DEPLOY:
        return DEPLOY_JOB + START_INSTANCE * change.instances
    if change.action == DELETE:
        return DELETE_JOB + STOP_INSTANCE * change.instances
    seconds = MODIFY_JOB
    for op in change.operators:
        before = len(op.before.nodes) if op.before else 0
        after = len(op.after.nodes) if op.after else 0
        if op.kind == IN_PLACE:
            seconds += MODIFY_INSTANCE * after
        elif op.kind == MOVE:
            seconds += (STOP_INSTANCE * before + START_INSTANCE * after
                        + STATE_TRANSFER * len(set(op.after.nodes) - set(op.before.nodes)))
        else:  # replace: stop what ran, start what is wanted
            seconds += STOP_INSTANCE * before + START_INSTANCE * after
    return seconds


def plan_time(plan: Plan) -> ApplyTime:
    """The plan's jobs one after another, as SpecK's coordinator applies them."""
    per_job = tuple((change.job, change_time(change)) for change in plan.changes)
    return ApplyTime(sum(t for _, t in per_job), per_job)
