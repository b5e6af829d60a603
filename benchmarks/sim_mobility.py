"""Mobility with migrations: simulated seconds per wall second for 10,000 moving users.

The metro topology's 10,000 sensors become users walking or riding (random waypoint, 1 to
15 m/s) among 100 gateways; each user has its own windowed operator instance on the edge
that follows it (latency-threshold policy, pause-and-transfer migration). Prints the counts
of messages, handovers and migrations and last `speedup=<simulated s / wall s>` (target >= 20).

Where the time goes: a message costs about 75 us of one core (a 2-core shared host: 12 to 15
times real time), and the run makes some 180 Python calls per message, spread over its source,
radio, about six links, the broker, the operator's window and the recorder; no function takes
more than a tenth of the run by itself (cProfile).

Measured against this model on one host, back to back: computing a leg's links at once, one
event per leg instead of one per link (a third of all events gone, and a change of the link
model: a channel would be reserved before the message reaches it), ran 1.04 times as fast;
compiling the ten modules of that path with mypyc ran 1.17 to 1.24 times as fast, with the
same results. Neither is in the model: the first changes what it computes, the second adds a
C build step, and the target needs about 1.45 times.
"""

from __future__ import annotations

import argparse
import time

from experiments.loader import parse_text
from experiments.model_settings import sim_settings
from sim.model import Model

EXPERIMENT = """
name: sim-mobility
topology: metro-10k
workload:
  name: telemetry
  streams:
    - {{name: telemetry, sources: sensor-*, rate: 1/10s, size: 200B, channel: exclusive}}
pipeline:
  - {{name: track, follow: users, on: gateways, reads: telemetry, cost: 50us,
     window: {{size: 10s}}}}
scenario:
  mobility:
    model: {{kind: random_waypoint, speed: [1, 15], pause: [0s, 30s]}}
    radio: {{range: 200, latency: [2ms, 10ms], bandwidth: [10Mbit, 1Mbit], loss: 1%}}
    handover: {{hysteresis: 20, min_dwell: 5s}}
  policy: {{operator: track, threshold: {threshold}, hysteresis: 2ms, capacity: 200,
           fallback: [vm-1]}}
  migration: {{strategy: pause_transfer, launch: 500ms}}
run: {{duration: {duration}, seed: 2}}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--duration", default="10m")
    parser.add_argument("--threshold", default="25ms",
                        help="the policy's latency budget: 10ms moves an instance at nearly every "
                             "handover, 25ms only when its user leaves the district")
    args = parser.parse_args()
    experiment = parse_text(EXPERIMENT.format(duration=args.duration, threshold=args.threshold),
                            overrides=[f"topology.nodes.0.replicas={args.users}"])
    point = experiment.points[0]
    spec = point.spec
    settings = sim_settings(spec)
    start, cpu_start = time.perf_counter(), time.process_time()
    model = Model(point.topology, spec.workload, spec.pipeline, settings)
    built, cpu_built = time.perf_counter(), time.process_time()
    result = model.run()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    simulated = spec.run.duration + spec.run.drain
    migrations = len(result.tables["migrations"]["id"])
    print(f"users={args.users} threshold={args.threshold} simulated_s={simulated:g} "
          f"wall_s={wall:.1f}")
    print(f"messages={result.facts['emitted']} handovers={result.facts['handovers']} "
          f"migrations={migrations}")
    print(f"build_s={built - start:.1f} run_s={wall - (built - start):.1f}")
    # On a shared host the CPU time is what one core of our own would have taken.
    print(f"cpu_s={cpu:.1f} (build {cpu_built - cpu_start:.1f}) speedup_cpu={simulated / cpu:.1f}")
    print(f"speedup={simulated / wall:.1f}")


if __name__ == "__main__":
    main()
