"""What the model (sim) runs for an experiment: its settings, and the written costs it will not
charge. The sim backend, `run.dilation: auto` (experiments.dilation) and the benchmarks read
these, so the model runs alike wherever it stands in."""

from __future__ import annotations

from experiments.spec import ExperimentSpec
from topologies.model import Topology


def sim_settings(spec: ExperimentSpec, seed: int | None = None, **changes):
    """The simulator's settings for a spec (its own seed unless another is given)."""
    from sim.features import FEATURES
    from sim.model import Settings
    from workloads.calibration import load

    run, scenario = spec.run, spec.scenario
    # The model's features present in the scenario (an empty list, None: absent).
    present = {key: value for key in FEATURES
               if (value := getattr(scenario, key, None))}
    values = dict(duration=run.duration, seed=run.seed if seed is None else seed,
                  sample=run.sample, drain=run.drain, driver_cost=run.driver_cost,
                  calibration=load(run.calibration).calibration if run.calibration else None,
                  migration=scenario.migration, mobility=scenario.mobility,
                  policy=scenario.policy, scenario=present)
    values.update(changes)
    return Settings(**values)


def unused_costs(spec: ExperimentSpec, topology: Topology) -> list[str]:
    """The operators' written `cost`s that the run will not charge, each with where and why
    (`foglab validate` says them): on sim those a calibration's measure replaces (sim.costs);
    on the containers every one (the agents run the tasks; the model, which `run.dilation:
    auto` and `foglab compare` run, still charges them)."""
    written = [f"pipeline[{i}] ({op.name})" for i, op in enumerate(spec.pipeline)
               if op.cost is not None]
    if spec.run.backend != "sim":
        if not written:
            return []
        return [f"{', '.join(written)}: cost is not charged on {spec.run.backend}: the "
                "containers run the tasks (the model still charges it, as run.dilation: auto "
                "and foglab compare run it)"]
    from sim.costs import Costs
    from workloads.calibration import load

    calibration = load(spec.run.calibration).calibration if spec.run.calibration else None
    return Costs(topology, spec.run.driver_cost, calibration).unused_written(spec.pipeline)
