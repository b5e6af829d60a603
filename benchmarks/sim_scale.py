"""Simulator scale: 100,000 devices and a million messages; wall time and peak memory.

The catalog's metro topology (gateways, district switches, two brokers, a cloud) with its
sensors raised to --devices, each sending 1 msg/s for --duration simulated seconds. Targets:
<= 60 s wall, <= 2 GB peak resident memory, for the whole run: validation, building, simulating
and turning the records into tables.
"""

from __future__ import annotations

import argparse
import resource
import time

from experiments.loader import parse_text
from experiments.model_settings import sim_settings
from experiments.schema import to_table
from sim.model import simulate

EXPERIMENT = """
name: sim-scale
topology: metro-10k
workload:
  name: metro
  streams:
    - {{name: readings, sources: sensor-*, rate: 1/s, arrivals: poisson, size: 120B}}
pipeline:
  - {{name: store, on: vm-*, reads: readings, cost: 10us}}
run: {{duration: {duration}s, seed: 3, drain: 5s}}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--duration", type=float, default=10.0)
    args = parser.parse_args()
    start, cpu_start = time.perf_counter(), time.process_time()
    experiment = parse_text(EXPERIMENT.format(duration=args.duration),
                            overrides=[f"topology.nodes.0.replicas={args.devices}"])
    point = experiment.points[0]
    loaded = time.perf_counter()
    result = simulate(point.topology, point.spec.workload, point.spec.pipeline,
                      sim_settings(point.spec))
    simulated = time.perf_counter()
    tables = {name: to_table(name, columns) for name, columns in result.tables.items()}
    done = time.perf_counter()
    messages = tables["messages"]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"devices={args.devices} emitted={result.facts['emitted']} rows={messages.num_rows}")
    print(f"load_s={loaded - start:.1f} simulate_s={simulated - loaded:.1f} "
          f"tables_s={done - simulated:.1f}")
    print(f"cpu_s={time.process_time() - cpu_start:.1f} (what one core of our own would take)")
    print(f"wall_s={done - start:.1f} (target <= 60)")
    print(f"peak_rss_mb={peak_mb:.0f} (target <= 2048)")


if __name__ == "__main__":
    main()
