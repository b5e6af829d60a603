"""One hybrid run: the emulation of the experiment, and the model moving its users in real time.

Before any container: where each moving device starts (experiments.hybrid.plan). Then the
emulation runs as `emu` does (emu.run.emulate.emulate), and as its run begins, the model starts on a
thread of its own at the run's epoch (experiments.hybrid.realtime): sim.mobile's movement,
radio and handover, the same code `sim` runs, coupled to the containers by the links and
handover couplings, whose actions a worker carries out in order (experiments.hybrid.actions).
Devices named in `scenario.load` are not emulated: a generator on the host publishes their
readings into their gateways on the same schedule (experiments.hybrid.load), from before the
epoch until the run's time is over. The run writes the emulation's tables, the model's
`positions`, and `handovers`; its manifest gets the model's lag, the couplings' counts, the
decision-to-action p95 over the actions that began (with their count; why not, when none did:
experiments.hybrid.figures), the failed actions by cause and the load generator's facts. A
model that falls too far behind stops the run with a LagError (nothing is left running: the
emulation's clean-up runs as for any error).

At a dilation K (`run.dilation`, resolved by experiments.dilation; the emulated run's `clock`,
emu.agent.timebase) the whole hybrid side runs on the run's clock: the model K times slower
than the host's (its lag in emulated seconds), the load generator's schedule, the actions'
decision and action times (decision to action in emulated seconds), the policy's migration
records, and the couplings' request timeouts (the controller waits K times as long).
"""

from __future__ import annotations

import logging

from emu.agent.timebase import UNDILATED, TimeBase
from emu.cluster.tls import tls_login
from emu.features.base import Feature
from experiments.hybrid.actions import Actions, failures
from experiments.hybrid.figures import Measured
from experiments.hybrid.handover import Handovers
from experiments.hybrid.links import RadioLinks
from experiments.hybrid.load import RECORDS, LoadGenerator, simulated_devices, targets_of
from experiments.hybrid.migrations import PolicyMigrations
from experiments.hybrid.plan import emulated_topology, follow_policy, start
from experiments.hybrid.realtime import WARN_S, RealTime
from experiments.run_plan import RunOutput, RunPlan


class _Coupled:
    """The model and its couplings for one run: made when the emulation's run begins."""

    def __init__(self, plan: RunPlan, begin, control, epoch: float, cluster=None,
                 load: bool = False, clock: TimeBase = UNDILATED) -> None:
        self.clock = clock
        # The simulated load first: connected before the epoch, stopped if the model fails.
        self.load = (LoadGenerator(targets_of(cluster), epoch, cluster.records_root / RECORDS,
                                   timebase=clock, credentials=tls_login(cluster.plan)).start()
                     if load else None)
        try:
            self._couple(plan, begin, control, epoch)
        except BaseException:
            if self.load is not None:
                self.load.stop()
            raise

    def _couple(self, plan: RunPlan, begin, control, epoch: float) -> None:
        from sim.mobile import Mobility

        spec = plan.spec
        self.mobility_spec = spec.scenario.mobility
        self.actions = Actions(self.clock.now)
        self.parts: dict = {}
        gateways = plan.topology.of_kind("gateway")

        scenario = spec.scenario

        def build(env) -> None:
            # Users move, hand over and have the policy decide until the run's end, not in
            # its drain (the model stops there too).
            mobility = Mobility(env, gateways, self.mobility_spec, begin.devices, plan.seed,
                                spec.run.duration)
            handovers = Handovers(mobility, self.actions, control, begin.gateway)
            links = RadioLinks(mobility, self.actions, control, handovers.where)
            handovers.moved = links.forget
            mobility.on_attach = handovers.attach
            # Everyone attached at time 0 before the policies place the instances, as on sim
            # and in the plan (the policy places by the users' gateways); this first step's
            # couplings run below, once they are all wired.
            mobility.start()
            steps = [links.step]
            movers = []
            for operator, where in begin.follow.items():
                mover = PolicyMigrations(mobility, self.actions, control, operator, where,
                                         scenario.migration,
                                         len(scenario.migrations) + 1000 * len(movers),
                                         self.clock, until=epoch + spec.run.duration)
                policy = follow_policy(scenario, operator, mobility, plan.topology,
                                       mover.start)
                if policy is None:
                    continue
                # The run's policy starts as the plan's did: the same model at time 0.
                placed = {d: policy.initial(u) for u, d in enumerate(begin.devices)}
                assert placed == where, "the policy placed instances unlike its plan"
                movers.append(mover)
                steps += [mover.settle, policy.check]

            def step_all(t: float) -> None:  # after each mobility step, in this order
                for step in steps:
                    step(t)

            mobility.on_step = step_all
            self.parts.update(mobility=mobility, links=links, handovers=handovers,
                              movers=movers)
            step_all(env.now)

        self.model = RealTime(build, spec.run.duration, clock=self.clock)
        self.model.start(epoch)

    def check(self) -> None:
        """Raise what stopped the model (its lag error), from the emulation's thread."""
        if self.model.failed is not None:
            raise self.model.failed

    def finish(self) -> None:
        try:
            self.model.stop()
            try:
                self.lag = self.model.join(30.0)
            finally:
                host = self.clock.host_seconds  # what is queued acts in emulated time too
                self.done = self.actions.close(host(30.0), host(5.0))
        finally:
            if self.load is not None:
                self.load.stop()

    def migrations(self) -> list:
        """The records of the moves the policy decided (emu.features.moves.dispatch's)."""
        return [record for mover in self.parts.get("movers", []) for record in mover.closed()]

    def handovers(self) -> dict[str, list[str]]:
        """Each device handed over: the gateways it went to, in order (emu reads the
        messages' paths with them)."""
        moved: dict[str, list[str]] = {}
        # Every handover decided, not only those that ended well: one that timed out, or
        # was still queued when the run ended (its worker carries on), may yet have sent
        # from its new gateway.
        for action, _old, new in self.parts["handovers"].moves if self.parts else []:
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
        failed = [a for a in self.done if not a.ok]
        movers = self.parts.get("movers", []) if self.parts else []
        return {"lag": lag.facts(), "lag_warning": lag.p99 > WARN_S,
                "couplings": ["links", "handover"] + (["migration"] if movers else [])
                + (["load"] if self.load is not None else []),
                "load": self.load.facts() if self.load is not None else None,
                "actions": len(self.done), "actions_failed": len(failed),
                "action_failures": failures(self.done),
                # From a policy's decision to the migration's first step on the containers
                # (or, with no policy, any coupling's decision to its first command).
                **decision_to_action(self.done, "decision_to_action",
                                     ("migration",) if movers else ("handover", "link")),
                **decision_to_action(self.done, "handover_decision_to_action", ("handover",)),
                "migrations": sum(len(m.moves) for m in movers),
                "link_updates": self.parts["links"].updates if self.parts else 0,
                "handovers": len(self.parts["handovers"].moves) if self.parts else 0}


def decision_to_action(done: list, name: str, kinds: tuple[str, ...]) -> dict:
    """`<name>_ms_p95` over the actions of `kinds` that began (failed or not: each waited
    that long for its first command), with their count (`<name>_n`) and how many never began
    (`<name>_not_begun`: still queued when the run ended, their wait cut short by it: no
    measure, not in the p95). None with `<name>_unmeasured`, why, when none began."""
    chosen = [a for a in done if a.kind in kinds]
    if not chosen:
        why = f"no {' or '.join(f'{kind}s' for kind in kinds)} decided"
    else:
        label = " or ".join(f"{kind}s" for kind in kinds if any(a.kind == kind for a in chosen))
        causes = ", ".join(f"{cause} x{found['count']}"
                           for cause, found in failures(chosen).items())
        why = f"none of the {len(chosen)} {label} decided began ({causes})"
    delays = Measured.of([a.decision_to_action for a in chosen], why)
    facts = {f"{name}_ms_p95": delays.percentile(95, 1e3, 3), f"{name}_n": delays.n,
             f"{name}_not_begun": delays.dropped}
    if delays.reason:
        facts[f"{name}_unmeasured"] = delays.reason
    return facts


class _Coupling(Feature):
    """The couplings as one more feature of the emulated run (emu.features.base): the model
    and the load generator start at its epoch, stop with it; its policy's migrations and its
    handovers go into the run's tables."""

    key = "hybrid"

    def __init__(self, plan: RunPlan, begin, load: bool) -> None:
        super().__init__(None)
        self.plan, self.begin, self.load = plan, begin, load
        self.coupled: _Coupled | None = None
        self._running = False

    def start(self, run, epoch: float) -> None:
        self.coupled = _Coupled(self.plan, self.begin, run.control, epoch, run.cluster,
                                self.load, run.clock)
        self._running = True

    def poll(self) -> None:
        if self._running:  # what stopped the model stops the run, while it runs
            self.coupled.check()

    def stop(self) -> None:
        if self.coupled is not None and self._running:
            self._running = False
            self.coupled.finish()

    def migrations(self) -> list:
        return self.coupled.migrations() if self.coupled is not None else []

    def handovers(self) -> dict[str, list[str]]:
        return self.coupled.handovers() if self.coupled is not None else {}


class HybridBackend:
    """The emulation, with a real-time model moving its users (see the module docstring)."""

    name = "hybrid"

    def run(self, plan: RunPlan, progress) -> RunOutput:
        from emu.run.emulate import emulate
        from experiments.backends import EmuBackend

        spec = plan.spec
        begin = start(plan.topology, spec.scenario, spec.pipeline, plan.seed)
        topology = emulated_topology(spec.topology, begin)
        load = simulated_devices(spec.scenario, plan.topology)
        coupling = _Coupling(plan, begin, bool(load))
        result = emulate(EmuBackend.request(plan, topology, follow=begin.follow, load=load),
                         progress, features=[coupling])
        coupled = [coupling.coupled] if coupling.coupled is not None else []
        if not coupled:
            raise RuntimeError("the emulation ended before its run began")
        hybrid = coupled[0]
        warning = logging.getLogger(__name__).warning
        if hybrid.lag.p99 > WARN_S:
            warning(f"the real-time model lagged {hybrid.lag.p99 * 1e3:.0f} ms at p99 behind "
                    f"the wall clock (over {WARN_S * 1e3:.0f} ms): its couplings acted late")
        load_lag = hybrid.load.facts()["lag_ms"]["p99"] if hybrid.load is not None else None
        if load_lag is not None and load_lag > WARN_S * 1e3:
            warning(f"the simulated load's generator lagged {load_lag:.0f} ms at p99 behind its "
                    f"schedule (over {WARN_S * 1e3:.0f} ms): its devices sent late, and more "
                    "than 1 s late they skip emissions (facts.hybrid.load)")
        return RunOutput({**result.tables, **hybrid.tables()},
                         {**result.facts, "hybrid": hybrid.facts()}, result.failed)
