"""Simulator throughput: delivered messages per wall second, against SimPy's own Store loop.

1,000 devices at 1 msg/s, 20 gateways, a switch, 1 broker and 1 cloud sink: every message
crosses 4 links (device-gateway-switch-broker-cloud). One hour simulated by default.
Prints delivered_per_s, simpy_store_per_s measured in the same process, and last the ratio.
"""

from __future__ import annotations

import argparse
import time

import simpy

from experiments.loader import parse_text
from experiments.model_settings import sim_settings
from sim.model import simulate

EXPERIMENT = """
name: sim-throughput
topology:
  name: bench-fog
  nodes:
    - {{name: device, kind: device, replicas: {devices}}}
    - {{name: gw, kind: gateway, replicas: 20, profile: rpi4}}
    - {{name: edge, kind: switch}}
    - {{name: broker-1, kind: broker, profile: vm.large}}
    - {{name: cloud-1, kind: cloud_vm, profile: vm.large}}
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
run: {{duration: {duration}, seed: 1}}
"""


def simpy_store_rate(items: int = 300_000, clock=time.perf_counter) -> float:
    """Items per second through a bare simpy.Store between one producer and one consumer."""
    env = simpy.Environment()
    store = simpy.Store(env)

    def producer():
        for i in range(items):
            yield store.put(i)

    def consumer():
        for _ in range(items):
            yield store.get()

    env.process(producer())
    env.process(consumer())
    start = clock()
    env.run()
    return items / (clock() - start)


def baseline() -> tuple[float, float]:
    """The Store loop's rate by wall clock and by CPU time."""
    wall = simpy_store_rate()
    return wall, simpy_store_rate(clock=time.process_time)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--duration", default="1h")
    args = parser.parse_args()
    experiment = parse_text(EXPERIMENT.format(devices=args.devices, duration=args.duration))
    point = experiment.points[0]
    run = point.spec.run
    settings = sim_settings(point.spec)
    # The baseline is measured before and after the model, on a shared host its mean is
    # closer to the conditions the model ran in than either alone.
    before = baseline()
    start, cpu_start = time.perf_counter(), time.process_time()
    result = simulate(point.topology, point.spec.workload, point.spec.pipeline, settings)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    after = baseline()
    messages = result.tables["messages"]
    delivered = int((~messages["lost"]).sum())
    hops = messages["hops"][~messages["lost"]]
    delivered_per_s = delivered / wall
    store_per_s = (before[0] + after[0]) / 2
    store_per_cpu_s = (before[1] + after[1]) / 2
    print(f"devices={args.devices} simulated_s={run.duration:g} wall_s={wall:.2f}")
    print(f"emitted={result.facts['emitted']} delivered={delivered} min_hops={int(hops.min())}")
    print(f"delivered_per_s={delivered_per_s:.0f}")
    print(f"simpy_store_per_s={store_per_s:.0f} (before {before[0]:.0f}, after {after[0]:.0f})")
    print(f"cpu: delivered_per_cpu_s={delivered / cpu:.0f} simpy_store_per_cpu_s="
          f"{store_per_cpu_s:.0f} ratio_cpu={delivered / cpu / store_per_cpu_s:.3f}")
    print(f"ratio={delivered_per_s / store_per_s:.3f}")


if __name__ == "__main__":
    main()
