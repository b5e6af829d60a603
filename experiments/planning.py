"""The capacity planner's inputs from the experiment layer: the calibrated model's predicted
demand (experiments.dilation, the figures `run.dilation: auto` reads) handed to
emu.cluster.capacity, which emu cannot compute itself (it imports neither sim nor this layer); and
the prediction `foglab run` prints on emu before it starts (`announce`)."""

from __future__ import annotations

from collections.abc import Callable

from experiments.dilation import Choice, choose, demand_of, host_cores


def prediction(spec, topology) -> tuple[dict[str, float], float | str]:
    """Each container's host cores at K = 1 (and the testbed's `relays`, `engine`), and the
    dilation to plan at: `auto` as asked, `real-speed` as the number it comes to, a number."""
    asked = spec.run.dilation
    dilation = choose(spec, topology).dilation if asked == "real-speed" else asked
    return demand_of(spec, topology), dilation


def announce(spec, topology, choice: Choice, say: Callable[[str], None],
             warn: Callable[[str], None]):
    """Before an emu run: the planner's prediction for this host at the run's K (one line),
    and a warning when it predicts a pressure above the bound `auto` keeps. The demand is
    `auto`'s own when it chose K (choice.demand), else predicted here. Returns the plan."""
    from emu.cluster.capacity import TARGET_PRESSURE, CapacityRefused, host_memory, plan_experiment

    demand = choice.demand or demand_of(spec, topology)
    try:
        plan = plan_experiment(topology, spec.workload, spec.pipeline, spec.run.seed, demand,
                               1, host_cores(), host_memory(), choice.dilation)
    except CapacityRefused as refused:
        warn(f"capacity: {refused}")
        return None
    host = plan.hosts[0]
    say(f"capacity: {host.demand:.2f} of {plan.cores:g} host cores predicted at "
        f"K={plan.dilation:g}, pressure {host.pressure:.2f}, start-up ~{plan.start_s:.0f} s, "
        f"{host.memory / 2**30:.1f} GiB resident")
    if plan.saturated:
        needed = plan.hosts_needed
        warn(f"capacity: predicted pressure {plan.max_pressure:.2f} > {TARGET_PRESSURE:g}: "
             f"the emulated figures will be partly the testbed's; dilate (run.dilation=auto) "
             f"or use "
             f"{needed if needed else 'more'} hosts (foglab emu plan)")
    return plan
