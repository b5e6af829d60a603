"""What a hybrid run needs and what it does not run yet: refused when the file is checked,
before anything starts, with the field and the reason."""

from __future__ import annotations

from topologies.errors import SpecError


def check_hybrid(spec, topology) -> None:
    from emu.deployment import agent_configs
    from emu.migration import STRATEGIES
    from experiments.hybrid.plan import emulated_topology, start

    scenario = spec.scenario
    if scenario.mobility is None:
        raise SpecError(("run", "backend"), "hybrid", "a backend for this file: hybrid's "
                        "model moves users over the emulation, and the file has no "
                        "scenario.mobility (run it on emu, or give it one)")
    if scenario.policy is not None:
        raise SpecError(("scenario", "policy"), "...", "no migration policy on hybrid yet: "
                        "its decisions do not drive the emulated migration yet (run it on sim)")
    for i, op in enumerate(spec.pipeline):
        if op.follow:
            raise SpecError(("pipeline", i, "follow"), op.follow, "no follow operators on "
                            "hybrid yet (run the file on sim)")
    default = scenario.migration.strategy if scenario.migration else "pause_transfer"
    for i, plan in enumerate(scenario.migrations):
        strategy = plan.strategy or default
        if strategy not in STRATEGIES:
            path = (("scenario", "migrations", i, "strategy") if plan.strategy
                    else ("scenario", "migration", "strategy"))
            raise SpecError(path, strategy, f"a strategy the emulation runs ("
                            f"{', '.join(STRATEGIES)})")
    begin = start(topology, scenario.mobility, spec.run.seed)
    agent_configs(emulated_topology(spec.topology, begin), spec.workload, spec.pipeline,
                  spec.run.seed, 0.0)
