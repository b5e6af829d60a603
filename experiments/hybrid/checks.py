"""What a hybrid run needs, checked when the file is loaded, before anything starts: users
that move, simulated load on devices that stay and link to a gateway (experiments.hybrid.load),
and a start the emulation can deploy (each moving device on its gateway, each follow instance
where the policy places it). What the containers cannot do (strategies, faults) each emu
feature refuses (emu.features, through experiments.checks)."""

from __future__ import annotations

from topologies.errors import SpecError


def check_hybrid(spec, topology) -> None:
    from emu.cluster.deployment import agent_configs
    from experiments.hybrid.load import simulated_devices
    from experiments.hybrid.plan import emulated_topology, start

    scenario = spec.scenario
    if scenario.mobility is None:
        raise SpecError(("run", "backend"), "hybrid", "a backend for this file: hybrid's "
                        "model moves users over the emulation, and the file has no "
                        "scenario.mobility (run it on emu, or give it one)")
    load = simulated_devices(scenario, topology)  # before the start: none of them moves
    begin = start(topology, scenario, spec.pipeline, spec.run.seed)
    agent_configs(emulated_topology(spec.topology, begin), spec.workload, spec.pipeline,
                  spec.run.seed, 0.0, follow=begin.follow, load=load)
