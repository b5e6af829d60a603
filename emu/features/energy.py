"""Energy and cost on the emulation (`scenario.energy`; workloads.energy says the model,
sim.features.energy how the model counts it): the same `energy` table and facts, from what
the run measures anyway, once its records are read.

- Nodes: each sample of the `nodes` table (emu.host.metrics: a container's cgroup CPU time over
  the interval, as a share of its CPU limit; a row spans from the node's previous sample, the
  first from one sample period before it, cut to the run) is turned into the emulated node's own
  utilisation by workloads.energy_power.hardware_share: the container's limit (the plan's
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
refuses them on emu before anything starts).

The offload (`offload`) acts on the containers: emu.features.energy_offload watches each battery
gateway's container from the epoch and moves its operators by emu.features.moves.dispatch when
workloads.energy_offload's rule says so; its moves join the run's `migrations` table, its gauges'
rows are `facts.energy.offloads`, as on the model. Hybrid runs it the same way (its features
are the emulation's).
"""

from __future__ import annotations

from functools import cached_property
from types import SimpleNamespace

import numpy as np

from emu.features.base import Feature, Run, Setup
from emu.features.energy_offload import Gauge, OffloadWatcher
from topologies.errors import SpecError
from topologies.routing import gateway_of
from workloads.calibration import load
from workloads.energy import EnergySpec, resolve_power
from workloads.energy_ledger import Ledger
from workloads.energy_offload import offload_target
from workloads.energy_power import hardware_share, radio_energy
from workloads.energy_prices import load_prices
from workloads.pipeline import placement

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
            _check_offload_on_containers(experiment, topology, energy.offload)
        name = energy.calibration or DEFAULT_CALIBRATION
        try:
            load(name)
        except SpecError as error:
            raise SpecError(("scenario", "energy", "calibration"), name,
                            f"a calibration profile, but {error}") from None

    def __init__(self, spec: EnergySpec) -> None:
        super().__init__(spec)
        self.settings = None
        self.strategy = "pause_transfer"
        self.watcher: OffloadWatcher | None = None
        self.records: list = []

    @cached_property
    def calibration(self):
        """The profile whose QEMU speed turns a gateway container's CPU into the Pi's (read
        once: the offload's gauges and the table use it)."""
        return load(self.spec.calibration or DEFAULT_CALIBRATION).calibration

    # -- the offload (emu.features.energy_offload)
    # ---------------------------------------------------

    def prepare(self, setup: Setup) -> None:
        offload = self.spec.offload
        if offload is None:
            return
        self.settings = setup.scenario.get("migration")
        self.strategy = offload.strategy or getattr(self.settings, "strategy",
                                                    "pause_transfer")
        gateways = set(setup.topology.select(offload.gateways))
        moved = [op.name for op in setup.pipeline
                 if gateways & set(placement(setup.topology, op.on))]
        setup.moving |= set(moved)  # their input sessions are their own: a target takes them
        if len(setup.topology.of_kind("broker")) > 1:
            target = offload_target(offload, setup.topology)
            plans = [SimpleNamespace(operator=name, source=None, target=target,
                                     strategy=self.strategy) for name in moved]
            setup.checks.append(lambda cluster, configs: _offload_targets(
                plans, self.settings, cluster, configs))

    def start(self, run: Run, epoch: float) -> None:
        offload = self.spec.offload
        if offload is None:
            return
        topology = run.topology
        calibration = self.calibration
        gauges = []
        for gateway in topology.select(offload.gateways):
            node = topology.nodes[gateway]
            limit = run.plan.containers[gateway].nano_cpus / 1e9
            gauges.append(Gauge(
                gateway, run.status[gateway].container, limit,
                hardware_share(limit, host_speed(topology, gateway, calibration),
                               node.profile),
                resolve_power(self.spec, node.profile_name), offload.capacity,
                [op.name for op in run.configs[gateway].operators]))
        self.watcher = OffloadWatcher(run.control, offload, gauges,
                                      offload_target(offload, topology), self.strategy,
                                      self.settings, run.clock, run.timing.duration,
                                      node_control=run.cluster.node)
        self.watcher.start(epoch)

    def stop(self) -> None:
        if self.watcher is not None:
            self.records = self.watcher.finish()

    def left(self, node: str, incarnation: int) -> set[str]:
        return self.watcher.left(node) if self.watcher is not None else set()

    def migrations(self) -> list:
        return self.records

    def results(self, run: Run, tables: dict, facts: dict) -> None:
        topology, spec = run.topology, self.spec
        duration, interval = run.timing.duration, run.timing.sample
        calibration = self.calibration
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
        ledger.unsampled()
        tables["energy"] = ledger.table()
        facts["energy"] = ledger.facts(_delivered(run.messages), {},
                                       load_prices(spec.prices))
        facts["energy"]["calibration"] = spec.calibration or DEFAULT_CALIBRATION
        if self.watcher is not None:
            facts["energy"]["offloads"] = self.watcher.facts()


def _delivered(messages) -> int:
    """The messages table's delivered rows."""
    if not messages or "state" not in messages:
        return 0
    return int(np.count_nonzero(np.asarray(messages["state"], dtype=object) == "delivered"))


def _check_offload_on_containers(experiment, topology, offload) -> None:
    """What the containers add to workloads.energy's checks of an offload (made at load on
    every backend): each operator it moves runs on one node (emu.features.moves.dispatch moves one
    instance between two agents; two gateways sending one operator's instances to one VM would start
    it there twice)."""
    gateways = set(topology.select(offload.gateways))
    for op in experiment.pipeline:
        placed = placement(topology, op.on)
        if gateways & set(placed) and len(placed) > 1:
            raise SpecError(("scenario", "energy", "offload", "gateways"), offload.gateways,
                            f"on emu, gateways whose operators run on one node each: "
                            f"{op.name} runs on {len(placed)} ({', '.join(placed)}), and the "
                            "emulation moves one instance to a node that does not run it "
                            "(the model moves them in turn: run it on sim)")


def _offload_targets(plans: list, settings, cluster, configs: dict) -> None:
    """emu.features.migrations.check_targets for the offload's moves, the refusal placed at
    the offload's `to`."""
    from emu.features.migrations import check_targets

    try:
        check_targets(plans, settings, cluster, configs)
    except SpecError as error:
        raise SpecError(("scenario", "energy", "offload", "to"), error.value,
                        error.expected) from None
