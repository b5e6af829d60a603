"""One mobility update for 10,000 users and 100 gateways: positions, handover and radio links.

    python benchmarks/mobility_step.py [--users 10000] [--gateways 100] [--steps 600]

Steps of 1 s of random waypoint movement over gateways on a square grid 500 m apart; `step_ms`
is the median processor time of one update (target: well under 10 ms), which a busy host does
not inflate the way it does wall time (`wall_ms`, also shown). The same run times a plain numpy
users x gateways distance matrix, `sqrt(((u[:, None] - g[None]) ** 2).sum(-1))`, so that `ratio`
(step / matrix) stays comparable across hosts.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sim.mobility import Handover, HandoverSpec, RadioModel, RadioSpec, build_movement
from workloads.mobility import RandomWaypointSpec


def _median_ms(samples: list[float]) -> float:
    return float(np.median(samples)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--gateways", type=int, default=100)
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    side = int(np.ceil(np.sqrt(args.gateways)))
    grid = np.stack(np.meshgrid(np.arange(side), np.arange(side)), axis=-1).reshape(-1, 2)
    gateways = grid[: args.gateways] * 500.0
    rng = np.random.default_rng(1)
    movement = build_movement(RandomWaypointSpec(speed=(1, 15)), args.users, gateways, rng)
    radio_spec = RadioSpec(range=400.0)
    handover = Handover(HandoverSpec(), gateways, radio_spec.range)
    radio = RadioModel(radio_spec)
    attached = np.full(args.users, -1)
    steps, walls, matrix, changes = [], [], [], 0
    for step in range(args.steps):
        t = float(step)
        wall, start = time.perf_counter(), time.process_time()
        positions = movement.positions(t)
        attached = handover.step(t, positions, attached)
        radio.link(handover.distance)
        middle = time.process_time()
        walls.append(time.perf_counter() - wall)
        np.sqrt(((positions[:, None, :] - gateways[None, :, :]) ** 2).sum(axis=-1))
        steps.append(middle - start)
        matrix.append(time.process_time() - middle)
        changes += len(handover.changed)
    step_ms, matrix_ms = _median_ms(steps), _median_ms(matrix)
    print(f"users={args.users} gateways={args.gateways} steps={args.steps} "
          f"attached={np.mean(attached >= 0):.2f} handovers_per_step={changes / args.steps:.1f}")
    print(f"step_ms={step_ms:.2f} (target < 10) p95_ms={np.percentile(steps, 95) * 1e3:.2f} "
          f"wall_ms={_median_ms(walls):.2f}")
    print(f"matrix_ms={matrix_ms:.2f} ratio={step_ms / matrix_ms:.3f}")


if __name__ == "__main__":
    main()
