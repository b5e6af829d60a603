"""The backends: each turns one run into result tables (the seam: experiments.run_plan)."""

from __future__ import annotations

import importlib
import logging
from dataclasses import replace

from experiments.model_settings import sim_settings
from experiments.run_plan import Backend, RunOutput, RunPlan

log = logging.getLogger(__name__)


class SimBackend:
    """The SimPy model: virtual time, as fast as the host allows."""

    name = "sim"

    def run(self, plan: RunPlan, progress) -> RunOutput:
        from experiments.dilation import choose
        from sim.model import simulate

        spec = plan.spec
        # A calibrated model stands for the emulation at the run's dilation (sim.costs).
        dilation = choose(spec, plan.topology).dilation if spec.run.calibration else 1.0
        settings = sim_settings(spec, plan.seed, dilation=dilation)
        if plan.replanning is not None:  # the model's feature that re-places (sim.features)
            settings = replace(settings, scenario={**settings.scenario,
                                                   "replacement": plan.replanning.planner()})
        result = simulate(plan.topology, spec.workload, spec.pipeline, settings, progress)
        return RunOutput(result.tables, result.facts)


class EmuBackend:
    """Real containers in real time: arm64 gateways under QEMU, Mosquitto, ZooKeeper, Spark."""

    name = "emu"

    def run(self, plan: RunPlan, progress) -> RunOutput:
        from emu.run.emulate import emulate

        features = []
        if plan.replanning is not None:  # placement.replace: the planner, as the model's
            from emu.features.replacement import ReplacementFeature
            features.append(ReplacementFeature(plan.replanning.planner()))
        result = emulate(self.request(plan), progress, features=features)
        return RunOutput(result.tables, result.facts, result.failed)

    @staticmethod
    def request(plan: RunPlan, topology=None, **extra):
        """What emu runs for a run plan (emu.run.emulate.Request): its scenario as key -> spec, the
        keys it sets; `topology` instead of the plan's, `extra`: the request's other fields."""
        from emu.run.emulate import Request, Timing
        from experiments.dilation import choose
        from experiments.planning import announce

        spec, run = plan.spec, plan.spec.run
        # run.dilation `auto` and `real-speed` from the model of the run's own topology.
        dilation = choose(spec, plan.topology)
        # The capacity planner's prediction for this host, printed before the run starts
        # (a warning when it predicts the host saturated); auto's own demand when it chose K.
        # Not for hybrid: its containers are a part of the topology the model couples to.
        capacity = (announce(spec, plan.topology, dilation, log.info, log.warning)
                    if run.backend == "emu" else None)
        return Request(topology or plan.topology, spec.workload, spec.pipeline,
                       Timing(run.duration, run.sample, run.drain, dilation.dilation),
                       plan.seed, dict(spec.scenario),
                       facts={"dilation_choice": dilation.facts(), "access": run.access,
                              "capacity": capacity.figures() if capacity else None},
                       closed=run.access == "closed", tls=run.tls, engine=run.engine,
                       swarm_encrypted=run.swarm_encrypted,
                       **extra)


# The backends by `run.backend`, each a class as `module:Class`, imported on first use (the
# hybrid backend's modules, and the emulation's, only where a run needs them).
BACKENDS = {"sim": f"{__name__}:SimBackend", "emu": f"{__name__}:EmuBackend",
            "hybrid": "experiments.hybrid.backend:HybridBackend"}


def backend(name: str) -> Backend:
    where = BACKENDS.get(name)
    if where is None:
        # experiments.checks refuses any other backend when the experiment is loaded.
        raise ValueError(f"no backend {name!r}")
    module, _, attribute = where.partition(":")
    return getattr(importlib.import_module(module), attribute)()
