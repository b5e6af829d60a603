"""The model's throughput with scenario.energy on, over the same run with it off, in one run.

benchmarks/sim_throughput.py's fog (1,000 devices at 1 msg/s, 20 gateways, a switch, a broker
and a cloud sink; every message crosses 4 links), simulated with energy off, on (the energy
table and facts, no batteries), and on with a battery on every device (each emission weighed
against it; capacities that last the run), in turns, several rounds. Each variant's figure is
its best round's delivered messages per CPU second (the least disturbed by the other workers
of a shared host). Prints each figure, the host's load beside them, and last
overhead_ratio= (on over off; the target is at least 0.95) and battery_ratio= (batteries over
off).
"""

from __future__ import annotations

import argparse
import os
import time

from experiments.backends import sim_settings
from experiments.loader import parse_text
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--duration", default="10m")
    parser.add_argument("--rounds", type=int, default=3)
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


if __name__ == "__main__":
    main()
