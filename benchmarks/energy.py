"""The model's throughput with scenario.energy on, over the same run with it off, in one run.

benchmarks/sim_throughput.py's fog (1,000 devices at 1 msg/s, 20 gateways, a switch, a broker
and a cloud sink; every message crosses 4 links), simulated with energy off, on (the energy
table and facts, no batteries), and on with a battery on every device (each emission weighed
against it; capacities that last the run), in turns, several rounds. Each variant's figure is
its best round's delivered messages per CPU second (the least disturbed by the other workers
of a shared host). Prints each figure, the host's load beside them, and last
overhead_ratio= (on over off; the target is at least 0.95) and battery_ratio= (batteries over
off).

`--emu SECONDS` adds the model against the emulation (real containers): the quickstart
(200 sensors over four arm64 Pi gateways that range-filter, Mosquitto, a cloud VM) with a
pass-through sink in place of Spark, for SECONDS, with scenario.energy on the model
calibrated by the shipped `reference` profile and on the emulation; it prints
energy_rel_err= (the gateways' energy in all, model against emulation; issue 30's target:
within 10 %) and node_rel_err_max= (the largest of each gateway's and cloud VM's; within
15 %), each node's joules on both, the gateways' joules above their idle power on both (the
part their work drew, which the idle power's share can hide), and the emulation's host
pressure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from experiments.loader import parse_text
from experiments.model_settings import sim_settings
from sim.model import simulate

EXPERIMENT = """
name: energy-overhead
topology:
  name: bench-fog
  sites: [{{name: edge, position: [0, 0]}}, {{name: cloud, position: [0, 5000]}}]
  nodes:
    - {{name: device, kind: device, replicas: {devices}}}
    - {{name: gw, kind: gateway, replicas: 20, profile: rpi4, site: edge}}
    - {{name: edge, kind: switch, site: edge}}
    - {{name: broker-1, kind: broker, profile: vm.large, site: cloud}}
    - {{name: cloud-1, kind: cloud_vm, profile: vm.large, site: cloud}}
  links:
    - {{from: device-*, to: gw-*, mode: spread, latency: 5ms, bandwidth: 1Mbit}}
    - {{from: gw-*, to: edge, latency: 2ms, bandwidth: 100Mbit}}
    - {{from: edge, to: broker-1, latency: 10ms, bandwidth: 1Gbit}}
    - {{from: broker-1, to: cloud-1, latency: 1ms, bandwidth: 1Gbit}}
workload:
  name: steady
  streams:
    - {{name: readings, sources: device-*, rate: 1/s, arrivals: poisson, size: 200B}}
pipeline:
  - {{name: sink, on: cloud-1, reads: readings, cost: 20us}}
{scenario}
run: {{duration: {duration}, seed: 1}}
"""
VARIANTS = {
    "off": "",
    "on": "scenario:\n  energy: {}",
    # 10 kJ: a sensor's 0.066 W for an hour is 238 J; every emission is weighed all the same.
    "batteries": "scenario:\n  energy: {batteries: [{devices: device-*, joules: 10000}]}",
}


def measure(point) -> tuple[float, float, int, dict]:
    """One simulation: its wall and CPU seconds, delivered messages and facts."""
    settings = sim_settings(point.spec)
    start, cpu_start = time.perf_counter(), time.process_time()
    result = simulate(point.topology, point.spec.workload, point.spec.pipeline, settings)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    delivered = int((~result.tables["messages"]["lost"]).sum())
    return wall, cpu, delivered, result.facts


QUICKSTART = ["pipeline.1.engine=python", "pipeline.1.task=passthrough", "run.drain=5s",
              "run.repetitions=1", "scenario.energy={}"]


def emulated(seconds: float) -> None:
    """The quickstart's energy on the calibrated model against the emulation."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from experiments.loader import load
    from experiments.runner import run_experiment

    sets = [*QUICKSTART, f"run.duration={seconds:g}s"]
    facts, pressure = {}, None
    with tempfile.TemporaryDirectory(prefix="foglab-energy-") as out:
        for label, extra in (("sim", ["run.backend=sim", "run.calibration=reference"]),
                             ("emu", ["run.backend=emu"])):
            (outcome,) = run_experiment(load("quickstart", [*sets, *extra], []),
                                        Path(out) / label)
            if outcome.error:
                raise SystemExit(f"the {label} run failed: {outcome.error}")
            manifest = json.loads((Path(outcome.folder) / "manifest.json").read_text())
            facts[label] = manifest["facts"]["energy"]
            if label == "emu":
                pressure = (manifest["facts"].get("fidelity") or {}).get("host_pressure")
    from workloads.energy import EnergySpec, resolve_power

    topology = load("quickstart", sets, []).points[0].topology
    sim, emu = facts["sim"]["by_node"], facts["emu"]["by_node"]
    nodes = [n for n in emu if n.startswith(("gw-", "cloud-"))]
    # Above the idle power: what the nodes' work drew, which the idle power can hide.
    idle = {n: resolve_power(EnergySpec(), topology.nodes[n].profile_name).idle * seconds
            for n in nodes}
    errors = {n: (sim[n] - emu[n]) / emu[n] for n in nodes}
    gateways = [n for n in nodes if n.startswith("gw-")]
    total_sim, total_emu = (sum(sim[n] for n in gateways), sum(emu[n] for n in gateways))
    for node in nodes:
        print(f"node={node} sim_j={sim[node]:.2f} emu_j={emu[node]:.2f} "
              f"rel_err={errors[node]:+.3f}")
    above_sim = sum(sim[n] - idle[n] for n in gateways)
    above_emu = sum(emu[n] - idle[n] for n in gateways)
    print(f"gateways_above_idle_sim_j={above_sim:.2f} gateways_above_idle_emu_j="
          f"{above_emu:.2f} above_idle_rel_err={(above_sim - above_emu) / above_emu:+.3f}")
    print(f"emu_host_pressure={pressure} load_1m={os.getloadavg()[0]:.2f}")
    print(f"node_rel_err_max={max(abs(e) for e in errors.values()):.3f}")
    print(f"energy_rel_err={(total_sim - total_emu) / total_emu:+.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--duration", default="10m")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--emu", type=float, default=None, metavar="SECONDS",
                        help="also the quickstart's energy, model against emulation")
    args = parser.parse_args()
    points = {name: parse_text(EXPERIMENT.format(devices=args.devices, duration=args.duration,
                                                 scenario=scenario)).points[0]
              for name, scenario in VARIANTS.items()}
    best: dict[str, float] = {}
    delivered: dict[str, int] = {}
    facts: dict[str, dict] = {}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, point in points.items():
            wall, cpu, count, facts[name] = measure(point)
            best[name] = max(best.get(name, 0.0), count / cpu)
            delivered[name] = count
    load_after = os.getloadavg()
    print(f"devices={args.devices} duration={args.duration} rounds={args.rounds}")
    print(f"load_1m_before={load_before[0]:.2f} load_1m_after={load_after[0]:.2f} "
          f"cpus={os.cpu_count()}")
    for name in VARIANTS:
        print(f"{name}_delivered={delivered[name]} {name}_per_cpu_s={best[name]:.0f}")
    energy = facts["on"]["energy"]
    print(f"total_j={energy['total_j']:.1f} per_delivered_j={energy['per_delivered_j']:.4f} "
          f"cost={energy['cost']['total']:.6f}")
    print(f"battery_ratio={best['batteries'] / best['off']:.3f}")
    print(f"overhead_ratio={best['on'] / best['off']:.3f}")
    if args.emu:
        emulated(args.emu)


if __name__ == "__main__":
    main()
