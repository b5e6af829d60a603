"""Parity on topologies no one wrote: generated small topologies on sim and emu, checked alike.

Each topology is drawn from a seed (`experiment(random.Random(seed))`): one to three brokers
meeting at a core switch, one to three gateway groups of one or two gateways with mixed
profiles (Raspberry Pis under QEMU, amd64 VMs), each group behind a broker of its own choice,
its devices spread over the group or pinned to its first gateway, links with latency and
jitter, a cloud VM behind the first broker, and one or two operators (a sink on the cloud VM,
and maybe a filter on every gateway before it). Periodic devices: on both backends a device
emits its rate times the run's length, give or take the one at the end.

Per topology, both backends run it for a few seconds and three checks are made:
- `failed_nodes`: the emulation's run is `ok`, every node started (none failed);
- `placement`: every device is on the same gateway and behind the same broker on both (sim:
  the model's device path and Model.broker_for; emu: the agent whose drivers emulate it and
  the broker its plan gives that agent);
- `emitted`: every device emitted the same count on both, within one reading (sim: its
  source's count; emu: the manifest's facts.messages.emitted_by_device);
and `unheard`: the gateways whose devices a sink heard on sim and none on emu (readings that
did not cross to a broker they should have, say).

Usage: `.venv/bin/python benchmarks/parity.py [--topologies 20] [--seed 1] [--duration 4]`
(root and a Docker Engine: it runs containers). One line per topology with its shape and
the checks, then `topologies=N failed_nodes=F emitted_equal=E placement_equal=P
unheard_gateways=U`; exit 1 unless every topology passed every check.

Measured on the 2-core development host (2026-11-27, `--topologies 20 --seed 1`, 4 s runs,
five other sessions sharing it): 20 topologies (12 with two or three brokers, 9 with Pis under
QEMU), 4 minutes, `topologies=20 failed_nodes=0 emitted_equal=20 placement_equal=20
unheard_gateways=0`. The checks catch what issue 31 found: with the run's controller on the
first broker alone, seed 13 ends degraded (g2-1 never answers `set run.epoch`, its devices
emit 0 against sim's 8) and seed 20 with four nodes failed; with readers reading their own
broker only, seeds 13 and 20 run `ok` but a sink hears none of the gateways behind the other
brokers (unheard_gateways g2-1; g2-1, g2-2, g3-1).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parents[1]
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

GATEWAY_PROFILES = ("vm.small", "rpi4", "rpi3b")
DURATION_S, DRAIN_S = 4.0, 1.0
# A periodic device's last reading may slip past the run's end on emu (a late scheduler).
EMITTED_SLACK = 1


def experiment(rng: random.Random, duration: float = DURATION_S) -> dict:
    """A small valid experiment (an experiment file's mapping) drawn from `rng`."""
    brokers = rng.randint(1, 3)
    groups = rng.randint(1, 3)
    nodes: list[dict] = [{"name": "core", "kind": "switch"},
                         {"name": "broker", "kind": "broker", "replicas": brokers},
                         {"name": "cloud", "kind": "cloud_vm", "profile": "vm.small"}]
    # A node with replicas is named <name>-<n>, one replica too.
    links: list[dict] = [{"from": "broker-*", "to": "core", "latency": f"{rng.randint(1, 3)}ms"},
                         {"from": "cloud", "to": "broker-1", "latency": "1ms"}]
    # Raspberry Pis run under QEMU: one group of them at most keeps a run short.
    profiles = ["vm.small", *rng.sample(GATEWAY_PROFILES[1:], 1)]
    for group in range(1, groups + 1):
        gateways = rng.randint(1, 2)
        devices = rng.randint(1, 3)
        profile = profiles[0] if group > 1 else rng.choice(profiles)
        broker = rng.randint(1, brokers)
        nodes += [{"name": f"g{group}", "kind": "gateway", "profile": profile,
                   "replicas": gateways},
                  {"name": f"dev{group}", "kind": "device", "replicas": devices}]
        pinned = rng.random() < 0.3
        links += [{"from": f"dev{group}-*", "to": f"g{group}-1" if pinned else f"g{group}-*",
                   "mode": "all" if pinned else "spread", "latency": f"{rng.randint(1, 5)}ms",
                   "jitter": f"{rng.choice([0, 0.5, 1])}ms"},
                  {"from": f"g{group}-*", "to": f"broker-{broker}",
                   "latency": f"{rng.randint(2, 10)}ms", "jitter": f"{rng.choice([0, 1, 2])}ms"}]
    pipeline = [{"name": "sink", "on": "cloud", "reads": "city"}]
    if rng.random() < 0.5:
        pipeline = [{"name": "filter", "on": "gateways", "reads": "city", "writes": "clean",
                     "selectivity": 0.5},
                    {"name": "sink", "on": "cloud", "reads": "clean"}]
    return {"name": "parity", "topology": {"name": "parity", "nodes": nodes, "links": links},
            "workload": {"name": "w", "streams": [
                {"name": "city", "sources": "dev*", "rate": f"{rng.randint(2, 5)}/s",
                 "arrivals": "periodic", "qos": 1}]},
            "pipeline": pipeline,
            "run": {"backend": "sim", "duration": f"{duration:g}s", "drain": f"{DRAIN_S:g}s",
                    "sample": "1s", "seed": rng.randint(1, 1000)}}


def shape(document: dict) -> str:
    """A topology's shape in one token: brokers, gateway groups (count x profile @ broker,
    devices, spread or pinned), operators."""
    topology = document["topology"]
    brokers = next(n.get("replicas", 1) for n in topology["nodes"] if n["kind"] == "broker")
    gateways = {n["name"]: n for n in topology["nodes"] if n["kind"] == "gateway"}
    devices = {n["name"]: n["replicas"] for n in topology["nodes"] if n["kind"] == "device"}
    groups = []
    for name, node in gateways.items():
        group = name[1:]
        device_link = next(link for link in topology["links"]
                           if link["from"] == f"dev{group}-*")
        uplink = next(link for link in topology["links"] if link["from"] == f"{name}-*")
        groups.append(f"{node['replicas']}x{node['profile']}@{uplink['to'].split('-')[-1]}"
                      f"/{devices[f'dev{group}']}{'p' if device_link['mode'] == 'all' else 's'}")
    operators = "+".join(op["name"] for op in document["pipeline"])
    return f"brokers={brokers} groups={','.join(groups)} pipeline={operators}"


@dataclass
class Checked:
    """One topology's checks: the emulation's failed nodes and its status, and the devices
    whose placement or emitted count differ between the backends (device -> (sim, emu))."""

    shape: str
    status: str = "?"
    failed: dict[str, str] = field(default_factory=dict)
    placement: dict[str, tuple] = field(default_factory=dict)
    emitted: dict[str, tuple] = field(default_factory=dict)
    unheard: list[str] = field(default_factory=list)  # gateways heard on sim, not on emu
    error: str | None = None

    @property
    def ok(self) -> bool:
        return (self.error is None and self.status == "ok" and not self.failed
                and not self.placement and not self.emitted and not self.unheard)

    def line(self) -> str:
        return (f"{self.shape} status={self.status} failed_nodes={len(self.failed)} "
                f"placement_equal={int(not self.placement and self.error is None)} "
                f"emitted_equal={int(not self.emitted and self.error is None)} "
                f"unheard={len(self.unheard)}"
                + (f" placement_diff={self.placement}" if self.placement else "")
                + (f" emitted_diff={self.emitted}" if self.emitted else "")
                + (f" unheard_gateways={self.unheard}" if self.unheard else "")
                + (f" failed={sorted(self.failed)}" if self.failed else "")
                + (f" error={self.error!r}" if self.error else ""))


def sim_facts(loaded) -> tuple[dict[str, tuple[str, str]], dict[str, int], set[str]]:
    """The model's placement (device -> (gateway, broker)), emitted counts per device, and
    the devices a sink heard."""
    from experiments.model_settings import sim_settings
    from sim.model import Model

    point = loaded.points[0]
    spec = point.spec
    model = Model(point.topology, spec.workload, spec.pipeline, sim_settings(spec))
    messages = model.run().tables["messages"]
    heard = {str(d) for d, state in zip(messages["source"], messages["state"], strict=True)
             if state == "delivered"}
    names = {index: name for name, index in model.node_index.items()}
    placement, emitted = {}, {}
    for source in model.sources:
        device = names[source.device_index]
        gateway = source.path[-1].dst if source.path else device
        placement[device] = (gateway, model.broker_for(gateway))
        emitted[device] = emitted.get(device, 0) + source.emitted
    return placement, emitted, heard


def emu_placement(loaded) -> dict[str, tuple[str, str]]:
    """Where the emulation runs each device: the agent whose drivers emulate it and the
    broker its cluster's plan gives that agent."""
    from emu.cluster.deployment import agent_configs
    from emu.cluster.plan import plan_cluster

    point = loaded.points[0]
    spec = point.spec
    configs = agent_configs(point.topology, spec.workload, spec.pipeline)
    plan = plan_cluster(point.topology, "parity", agents=configs)
    return {device: (agent.node, plan.brokers[agent.node]) for agent in plan.agents()
            for driver in agent.agent.drivers for device in driver.devices}


def check(document: dict, out: Path) -> Checked:
    """Run one experiment on both backends and make the three checks."""
    from experiments.loader import parse_text
    from experiments.results import load_run
    from experiments.runner import run_experiment

    checked = Checked(shape(document))
    text = yaml.safe_dump(document, sort_keys=False)
    try:
        placed, counts, heard = sim_facts(parse_text(text))
        loaded = parse_text(text, overrides=["run.backend=emu"])
        emu_placed = emu_placement(loaded)
        (outcome,) = run_experiment(loaded, out, sweep_id="emu")
    except Exception as error:  # noqa: BLE001 - said on the topology's line, the others go on
        checked.error = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        return checked
    checked.status, checked.failed = outcome.status, dict(outcome.failed)
    if outcome.error:
        checked.error = outcome.error.splitlines()[0]
        return checked
    run = load_run(outcome.folder)
    facts = run.manifest.get("facts") or {}
    emitted = (facts.get("messages") or {}).get("emitted_by_device") or {}
    messages = run.messages
    # By gateway: a filter's running credit may pass one device's readings on sim and its
    # neighbour's on emu, where they arrive in another order.
    heard_there = {placed[d][0] for d in set(messages[messages["state"] == "delivered"]["source"])
                   if d in placed}
    checked.unheard = sorted({placed[d][0] for d in heard} - heard_there)
    for device in sorted(set(placed) | set(emu_placed)):
        if placed.get(device) != emu_placed.get(device):
            checked.placement[device] = (placed.get(device), emu_placed.get(device))
        sim, emu = counts.get(device, 0), emitted.get(device, 0)
        if abs(sim - emu) > EMITTED_SLACK:
            checked.emitted[device] = (sim, emu)
    return checked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", type=int, default=20, help="how many to generate")
    parser.add_argument("--seed", type=int, default=1, help="the first topology's seed")
    parser.add_argument("--duration", type=float, default=DURATION_S, help="seconds per run")
    args = parser.parse_args()
    if args.topologies < 1 or args.duration <= 0:
        parser.error(f"--topologies must be >= 1 and --duration > 0, got {args.topologies} "
                     f"and {args.duration:g}")
    from experiments.compare import emu_unavailable

    if why := emu_unavailable():
        print(f"parity: cannot run the emulation: {why}", file=sys.stderr)
        return 1
    results = []
    with tempfile.TemporaryDirectory(prefix="foglab-parity-") as scratch:
        for number in range(args.topologies):
            seed = args.seed + number
            document = experiment(random.Random(seed), args.duration)
            checked = check(document, Path(scratch) / str(seed))
            results.append(checked)
            print(f"topology={number + 1} seed={seed} {checked.line()}", flush=True)
    failed = sum(len(c.failed) for c in results)
    emitted = sum(1 for c in results if c.error is None and not c.emitted)
    placed = sum(1 for c in results if c.error is None and not c.placement)
    unheard = sum(len(c.unheard) for c in results)
    print(f"topologies={len(results)} failed_nodes={failed} emitted_equal={emitted} "
          f"placement_equal={placed} unheard_gateways={unheard}")
    return 0 if all(c.ok for c in results) else 1


if __name__ == "__main__":
    sys.exit(main())
