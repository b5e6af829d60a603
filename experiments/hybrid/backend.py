"""One hybrid run: the emulation of the experiment, and the model moving its users in real time.

Before any container: where each moving device starts (experiments.hybrid.plan). Then the
emulation runs as `emu` does (emu.run.emulate), and as its run begins, the model starts on a
thread of its own at the run's epoch (experiments.hybrid.realtime): sim.mobile's movement,
radio and handover, the same code `sim` runs, coupled to the containers by the links and
handover couplings, whose actions a worker carries out in order (experiments.hybrid.actions).
The run writes the emulation's tables, the model's `positions`, and `handovers`; its manifest
gets the model's lag and the couplings' counts. A model that falls too far behind stops the
run with a LagError (nothing is left running: the emulation's clean-up runs as for any error).
"""

from __future__ import annotations

import numpy as np

from experiments.backends import RunOutput, RunPlan
from experiments.hybrid.actions import Actions
from experiments.hybrid.handover import Handovers
from experiments.hybrid.links import RadioLinks
from experiments.hybrid.plan import emulated_topology, start
from experiments.hybrid.realtime import WARN_S, RealTime


class _Coupled:
    """The model and its couplings for one run: made when the emulation's run begins."""

    def __init__(self, plan: RunPlan, begin, control, epoch: float) -> None:
        from sim.mobile import Mobility

        spec = plan.spec
        self.mobility_spec = spec.scenario.mobility
        self.actions = Actions()
        self.parts: dict = {}
        gateways = plan.topology.of_kind("gateway")
        names = [g.name for g in gateways]

        def build(env) -> None:
            mobility = Mobility(env, gateways, self.mobility_spec, begin.devices, plan.seed)
            links = RadioLinks(mobility, self.actions, control, names)
            handovers = Handovers(mobility, self.actions, control, begin.gateway,
                                  moved=links.forget)
            mobility.on_attach = handovers.attach
            mobility.on_step = links.step
            self.parts.update(mobility=mobility, links=links, handovers=handovers)
            mobility.start()

        self.model = RealTime(build, spec.run.duration)
        self.model.start(epoch)

    def check(self) -> None:
        """Raise what stopped the model (its lag error), from the emulation's thread."""
        if self.model.failed is not None:
            raise self.model.failed

    def finish(self) -> None:
        self.model.stop()
        try:
            self.lag = self.model.join(30.0)
        finally:
            self.done = self.actions.close()

    def handovers(self) -> dict[str, list[str]]:
        """Each device handed over: the gateways it went to, in order (emu reads the
        messages' paths with them)."""
        moved: dict[str, list[str]] = {}
        for action, _old, new in self.parts["handovers"].moves if self.parts else []:
            if action.ok:
                moved.setdefault(action.subject, []).append(new)
        return moved

    def tables(self) -> dict[str, dict]:
        parts = self.parts
        tables = {"handovers": parts["handovers"].table()} if parts else {}
        if parts and self.mobility_spec.record is not None:
            tables["positions"] = parts["mobility"].positions.columns()
        return tables

    def facts(self) -> dict:
        lag = self.lag
        delays = [a.decision_to_action for a in self.done]
        failed = [a for a in self.done if not a.ok]
        return {"lag": lag.facts(), "lag_warning": lag.p99 > WARN_S,
                "couplings": ["links", "handover"],
                "actions": len(self.done), "actions_failed": len(failed),
                "first_failures": [f"{a.kind} {a.subject}: {a.error}" for a in failed[:5]],
                "decision_to_action_ms_p95": (round(float(np.percentile(delays, 95)) * 1e3, 3)
                                              if delays else None),
                "link_updates": self.parts["links"].updates if self.parts else 0,
                "handovers": len(self.parts["handovers"].moves) if self.parts else 0}


class HybridBackend:
    """The emulation, with a real-time model moving its users (see the module docstring)."""

    name = "hybrid"

    def run(self, plan: RunPlan, progress) -> RunOutput:
        from emu.run import Timing, emulate

        spec = plan.spec
        run = spec.run
        begin = start(plan.topology, spec.scenario.mobility, plan.seed)
        topology = emulated_topology(spec.topology, begin)
        coupled: list[_Coupled] = []

        def during(control, epoch: float) -> _Coupled:
            coupled.append(_Coupled(plan, begin, control, epoch))
            return coupled[0]

        def watched(seconds: float) -> None:
            if coupled:
                coupled[0].check()
            progress(seconds)

        watched.stage = getattr(progress, "stage", lambda text: None)
        result = emulate(topology, spec.workload, spec.pipeline,
                         Timing(run.duration, run.sample, run.drain), plan.seed, watched,
                         scenario=spec.scenario, during=during)
        if not coupled:
            raise RuntimeError("the emulation ended before its run began")
        hybrid = coupled[0]
        if hybrid.lag.p99 > WARN_S:
            from topologies.terminal import warning

            warning(f"the real-time model lagged {hybrid.lag.p99 * 1e3:.0f} ms at p99 behind "
                    f"the wall clock (over {WARN_S * 1e3:.0f} ms): its couplings acted late")
        return RunOutput({**result.tables, **hybrid.tables()},
                         {**result.facts, "hybrid": hybrid.facts()}, result.failed)
