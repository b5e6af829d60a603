"""The seam between an experiment and what runs it: a backend turns one run into result tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from experiments.spec import ExperimentSpec
from topologies.model import Topology


@dataclass
class RunPlan:
    """Everything one run needs, resolved: the spec of its sweep point and its own seed."""

    spec: ExperimentSpec
    topology: Topology
    seed: int
    repetition: int


@dataclass
class RunOutput:
    """Columns per table (see experiments.schema), facts for the manifest, and the nodes that
    failed during the run (node -> what happened): a run with failed nodes still writes what
    it measured, and ends `degraded`."""

    tables: dict[str, dict]
    facts: dict = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def run(self, plan: RunPlan, progress) -> RunOutput:
        """Run; call `progress(seconds_done)` now and then; raise on failure after cleaning up."""
        ...


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


class SimBackend:
    """The SimPy model: virtual time, as fast as the host allows."""

    name = "sim"

    def run(self, plan: RunPlan, progress) -> RunOutput:
        from experiments.dilation import choose
        from sim.model import simulate

        spec = plan.spec
        # A calibrated model stands for the emulation at the run's dilation (sim.costs).
        dilation = choose(spec, plan.topology).dilation if spec.run.calibration else 1.0
        result = simulate(plan.topology, spec.workload, spec.pipeline,
                          sim_settings(spec, plan.seed, dilation=dilation), progress)
        return RunOutput(result.tables, result.facts)


class EmuBackend:
    """Real containers in real time: arm64 gateways under QEMU, Mosquitto, ZooKeeper, Spark."""

    name = "emu"

    def run(self, plan: RunPlan, progress) -> RunOutput:
        from emu.run import emulate

        result = emulate(self.request(plan), progress)
        return RunOutput(result.tables, result.facts, result.failed)

    @staticmethod
    def request(plan: RunPlan, topology=None, **extra):
        """What emu runs for a run plan (emu.run.Request): its scenario as key -> spec, the
        keys it sets; `topology` instead of the plan's, `extra`: the request's other fields."""
        from emu.run import Request, Timing
        from experiments.dilation import choose
        from experiments.planning import announce
        from topologies.terminal import say, warning

        spec, run = plan.spec, plan.spec.run
        # run.dilation `auto` and `real-speed` from the model of the run's own topology.
        dilation = choose(spec, plan.topology)
        # The capacity planner's prediction for this host, printed before the run starts
        # (a warning when it predicts the host saturated); auto's own demand when it chose K.
        # Not for hybrid: its containers are a part of the topology the model couples to.
        capacity = (announce(spec, plan.topology, dilation, say, warning)
                    if run.backend == "emu" else None)
        return Request(topology or plan.topology, spec.workload, spec.pipeline,
                       Timing(run.duration, run.sample, run.drain, dilation.dilation),
                       plan.seed, dict(spec.scenario),
                       facts={"dilation_choice": dilation.facts(), "access": run.access,
                              "capacity": capacity.figures() if capacity else None},
                       closed=run.access == "closed", tls=run.tls, engine=run.engine,
                       swarm_encrypted=run.swarm_encrypted,
                       **extra)


def backend(name: str) -> Backend:
    if name == "sim":
        return SimBackend()
    if name == "emu":
        return EmuBackend()
    if name == "hybrid":
        from experiments.hybrid.backend import HybridBackend

        return HybridBackend()
    # experiments.checks refuses any other backend when the experiment is loaded.
    raise ValueError(f"no backend {name!r}")
