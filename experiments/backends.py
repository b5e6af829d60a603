"""The backends: each turns one run into result tables (the seam: experiments.run_plan)."""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, replace

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


@dataclass(frozen=True)
class Registered:
    """A backend by `run.backend`: its class as `module:Class`, imported on first use (the
    hybrid backend's modules, and the emulation's, only where a run needs them), and what is
    known of it without importing it: `in_process`, its run is this process's alone (virtual
    time, no containers, ports or host cores held), so that runs go side by side in worker
    processes (`foglab run -j`) and its memory is this process's (experiments.estimate)."""

    where: str
    in_process: bool


BACKENDS = {"sim": Registered(f"{__name__}:SimBackend", in_process=True),
            "emu": Registered(f"{__name__}:EmuBackend", in_process=False),
            "hybrid": Registered("experiments.hybrid.backend:HybridBackend", in_process=False)}


def registered(name: str) -> Registered:
    found = BACKENDS.get(name)
    if found is None:
        # experiments.checks refuses any other backend when the experiment is loaded.
        raise ValueError(f"no backend {name!r}")
    return found


def backend(name: str) -> Backend:
    module, _, attribute = registered(name).where.partition(":")
    return getattr(importlib.import_module(module), attribute)()
