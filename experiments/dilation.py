"""How much an emulated run is dilated: `run.dilation` as a number K, `auto` or `real-speed`.

- A number: that K (1: real time).
- `auto`: the model predicts each container's CPU demand at K = 1, in host cores (the
  calibrated model stands for the emulation: sim.costs), and K is the smallest multiple of
  1/2 that keeps the predicted demand at most TARGET_PRESSURE of the host's cores. The
  prediction runs the model for the run's first AUTO_MODEL_S seconds.
- `real-speed`: each emulated node runs at its hardware profile's speed. An arm64 gateway under
  QEMU runs at the calibration's `gateway.speed` per host core (0.068 of the reference vCPU on
  the host it was measured on) where its profile says, say, 0.45 (`rpi4`): K = 0.45 / 0.068
  makes one of its emulated seconds get the CPU a Pi 4 core gives in one second. K is the
  largest such ratio among the topology's QEMU gateways (at least 1).

Both need a calibration (the run's `calibration`, else the shipped `reference` profile);
`choose` says which it used, for the manifest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

# One bound and one formula for `auto` and the capacity planner.
from emu.cluster.capacity import TARGET_PRESSURE, auto_dilation
from experiments.model_settings import sim_settings
from workloads.calibration import Calibration, load

AUTO_MODEL_S = 60.0
# The testbed's own CPU beside the containers' (docs/host-cpu.md, measured on the reference
# 2-core host): the link relays' per message and relayed leg (a publish to the broker, a
# delivery from it: benchmarks/relay_cpu.py, 130-160 us), and the container engine's.
RELAY_CPU_PER_LEG_S = 150e-6
ENGINE_CORES = 0.006
FALLBACK_CALIBRATION = "reference"


@dataclass(frozen=True)
class Choice:
    """K and how it was chosen (the manifest's `dilation_choice`)."""

    dilation: float
    asked: float | str
    why: dict = field(default_factory=dict)
    # `auto`'s predicted demand (predicted_demand), for the capacity planner to reuse.
    demand: dict = field(default_factory=dict, compare=False, repr=False)

    def facts(self) -> dict:
        return {"dilation": self.dilation, "asked": self.asked, **self.why}


def host_cores() -> int:
    return len(os.sched_getaffinity(0))


def choose(spec, topology, cores: int | None = None) -> Choice:
    """K for an experiment (an ExperimentSpec, at one sweep point) on its topology."""
    asked = spec.run.dilation
    if not isinstance(asked, str):
        return Choice(float(asked), asked)
    name, calibration = calibration_of(spec)
    if asked == "real-speed":
        return _real_speed(topology, calibration, name)
    return _auto(spec, topology, calibration, name, cores or host_cores())


def _real_speed(topology, calibration: Calibration, name: str) -> Choice:
    ratios = {node.name: node.profile.speed / calibration.gateway.speed
              for node in topology.nodes.values()
              if node.kind == "gateway" and node.profile.arch == "arm64"}
    k = max(1.0, *ratios.values()) if ratios else 1.0
    return Choice(round(k, 3), "real-speed", {
        "calibration": name, "emulated_gateway_speed": calibration.gateway.speed,
        "profile_speeds": sorted({topology.nodes[n].profile.speed for n in ratios})})


def calibration_of(spec) -> tuple[str, Calibration]:
    """The calibration the prediction uses: the run's, else the shipped FALLBACK_CALIBRATION."""
    name = spec.run.calibration or FALLBACK_CALIBRATION
    return name, load(name).calibration


def demand_of(spec, topology) -> dict[str, float]:
    """predicted_demand with the run's calibration (calibration_of): what `auto` and the
    capacity planner (emu.cluster.capacity, `foglab emu plan`) both read."""
    return predicted_demand(spec, topology, calibration_of(spec)[1])


def predicted_demand(spec, topology, calibration: Calibration) -> dict[str, float]:
    """Each container's host cores at K = 1, as the calibrated model predicts: its mean `cpu`,
    a share of the container's CPU limit (sim.costs.Costs.capacity: model cores, each a host
    core on a measured node, a QEMU gateway or a broker, and `speed` host cores on another);
    and the testbed's own: `relays` (two relayed legs per message that crossed the broker)
    and `engine`."""
    from sim.costs import CONTAINERS, Costs
    from sim.model import simulate

    settings = sim_settings(spec, duration=min(spec.run.duration, AUTO_MODEL_S),
                            calibration=calibration, drain=min(spec.run.drain, 5.0),
                            dilation=1.0)
    result = simulate(topology, spec.workload, spec.pipeline, settings)
    nodes, messages = result.tables["nodes"], result.tables["messages"]
    costs = Costs(topology, spec.run.driver_cost, calibration)
    demand: dict[str, float] = {}
    for name, node in topology.nodes.items():
        if node.kind not in CONTAINERS:
            continue
        cpu = costs.cpu(node)
        mask = nodes["node"] == name
        if not mask.any():
            continue
        measured = costs.qemu(name) or node.kind == "broker"
        host_cores = cpu.capacity * (1.0 if measured else cpu.speed)
        demand[name] = float(nodes["cpu"][mask].mean()) * host_cores
    relayed = int((messages["hops"] > 1).sum())  # the device's link is the agent's own
    demand["relays"] = RELAY_CPU_PER_LEG_S * 2 * relayed / settings.duration
    demand["engine"] = ENGINE_CORES
    return demand


def _auto(spec, topology, calibration: Calibration, name: str, cores: int) -> Choice:
    demand = predicted_demand(spec, topology, calibration)
    total = sum(demand.values())
    k = auto_dilation(total, cores)
    busiest = max(demand, key=demand.get) if demand else None
    return Choice(k, "auto", {
        "calibration": name, "host_cores": cores, "target_pressure": TARGET_PRESSURE,
        "predicted_host_cores": round(total, 3), "busiest": busiest,
        "busiest_host_cores": round(demand[busiest], 3) if busiest else 0.0}, demand)
