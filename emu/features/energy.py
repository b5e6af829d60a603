"""Energy and cost on the emulation (`scenario.energy`; workloads.energy says the model,
sim.features.energy how the model counts it): the same `energy` table and facts, from what
the run measures anyway, once its records are read.

- Nodes: each sample of the `nodes` table (emu.metrics: a container's cgroup CPU time over
  the interval, as a share of its CPU limit; a row spans from the node's previous sample, the
  first from one sample period before it, cut to the run) is turned into the emulated node's own
  utilisation by workloads.energy.hardware_share: the container's limit (the plan's
  nano_cpus) in host cores, each worth a reference vCPU natively, or the calibration's
  measured QEMU speed for an arm64 gateway, over the node's profile (its cores at its speed).
  At a time dilation K the share is of K host seconds per emulated second, which the limit
  stands for, so the same formula holds. The calibration is `scenario.energy.calibration`,
  else the shipped `reference` profile.
- Links: the `links` table's bytes per interval (the topology's links: not those to the
  ZooKeeper servers the cluster adds, testbed machinery); a link relay counts both directions
  together, so a link's bytes are charged (energy per bit, egress) as sent from its first
  end (the model counts each direction apart).
- Devices (the gateways' agents emulate them): their idle power for the run and their radio's
  energy per reading emitted (the drivers' records, `emitted_by_device`), and their radio
  link to their gateway with those readings' bytes.
Batteries are the model's only: the agents do not stop a device's readings (`validate`
refuses them on emu before anything starts). So is the offload (`offload`): it is the model's
decision, from the draw the model measures while it runs, and on emu no model runs (hybrid's
real-time model moves users only: it has no gateway's CPU to measure).
"""

from __future__ import annotations

import numpy as np

from emu.features.base import Feature, Run
from topologies.errors import SpecError
from topologies.routing import gateway_of
from workloads.calibration import load
from workloads.energy import EnergySpec, Ledger, hardware_share, load_prices, radio_energy

DEFAULT_CALIBRATION = "reference"


def host_speed(topology, node: str, calibration) -> float:
    """Reference vCPUs per host core of a node's container: the measured QEMU speed for an
    arm64 gateway (emu.cluster runs the arm64 image there only), 1 for a native one."""
    found = topology.nodes[node]
    if found.kind == "gateway" and found.profile.arch == "arm64":
        return calibration.gateway.speed
    return 1.0


class EnergyFeature(Feature):
    """The energy table and facts of an emulated run (see the module's docstring)."""

    key = "energy"

    @classmethod
    def validate(cls, experiment, topology, backend: str) -> None:
        energy = experiment.scenario.energy
        if energy is None:
            return
        if energy.batteries:
            raise SpecError(("scenario", "energy", "batteries"), len(energy.batteries),
                            "no batteries on emu: the gateways' agents do not stop a device's "
                            "readings when its battery is empty (run batteries on sim)")
        if energy.offload is not None:
            raise SpecError(("scenario", "energy", "offload"), energy.offload.gateways,
                            "no offload on emu: it is the model's decision, from the draw the "
                            "model measures while it runs, and no model runs on emu (run the "
                            "offload on sim)")
        name = energy.calibration or DEFAULT_CALIBRATION
        try:
            load(name)
        except SpecError as error:
            raise SpecError(("scenario", "energy", "calibration"), name,
                            f"a calibration profile, but {error}") from None

    def __init__(self, spec: EnergySpec) -> None:
        super().__init__(spec)

    def results(self, run: Run, tables: dict, facts: dict) -> None:
        topology, spec = run.topology, self.spec
        duration, interval = run.timing.duration, run.timing.sample
        calibration = load(spec.calibration or DEFAULT_CALIBRATION).calibration
        ledger = Ledger(spec, topology, duration)
        containers = run.plan.containers
        factor: dict[str, float] = {}
        last: dict[str, float] = {}  # each node's previous sample: its next one's start
        nodes = tables["nodes"]
        for t, name, share in zip(nodes["t"], nodes["node"], nodes["cpu"], strict=True):
            if name not in factor:
                factor[name] = hardware_share(containers[name].nano_cpus / 1e9,
                                              host_speed(topology, name, calibration),
                                              topology.nodes[name].profile)
            # The sampler's times are irregular (its first sample has no row, its last may
            # fall past the end): each row spans from the node's previous one, within the run.
            t = float(t)
            t0, t1 = max(0.0, last.get(name, t - interval)), min(t, duration)
            last[name] = t
            if t1 > t0:
                ledger.cpu(t0, t1, name, float(share) * factor[name])
        links, named = tables["links"], topology.nodes
        for t, src, dst, count in zip(links["t"], links["src"], links["dst"], links["bytes"],
                                      strict=True):
            if src in named and dst in named:  # not the testbed's own (ZooKeeper's)
                ledger.link(float(t) - interval, float(t), src, dst, int(count))
        sizes: dict[str, list[int]] = {}
        for stream in run.workload.streams:
            for device in topology.select(stream.sources):
                sizes.setdefault(device, []).append(stream.size)
        emitted = facts.get("emitted_by_device", {})
        for node in topology.of_kind("device"):
            mine = sizes.get(node.name) or [0]
            count = int(emitted.get(node.name, 0))
            size = sum(mine) / len(mine)  # the agents' records do not say which stream
            sent = int(round(count * size))
            ledger.device(node.name, sent, count * radio_energy(spec.radio, size))
            gateway = gateway_of(topology, node.name)
            if gateway is not None:
                ledger.link(0.0, duration, node.name, gateway, sent)
        tables["energy"] = ledger.table()
        facts["energy"] = ledger.facts(_delivered(run.messages), {},
                                       load_prices(spec.prices))
        facts["energy"]["calibration"] = spec.calibration or DEFAULT_CALIBRATION


def _delivered(messages) -> int:
    """The messages table's delivered rows."""
    if not messages or "state" not in messages:
        return 0
    return int(np.count_nonzero(np.asarray(messages["state"], dtype=object) == "delivered"))
