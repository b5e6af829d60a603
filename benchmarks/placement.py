"""Placement policies: how long each takes to decide, and how far the heuristics are from the
optimum.

Decision time: each policy's `place` on synthetic problems of 10, 100 and 1,000 operators (a
few chains, now and then reading each other, fed by device flows at the gateways) on a
3-level tree of 50 nodes (40 gateways, 8 aggregation nodes, 2 cloud VMs, every node
publishing through the broker beside its cloud VM), median of the runs, wall and CPU.
`decision_ms_1000` is the slowest of the greedy policies (latency-, network-, energy-aware)
and edge-ward at 1,000 operators, to hold against 10 ms, with its floor and the host's load
beside it (the figures move with the load, and on this 2-core host by a tenth or more between
runs). Floors, measured in the same run: `floor_tables_ms`, the problem as
arrays (workloads.placement.tables' Tables.of, where every policy starts; the arrays that only
some policies read, such as the devices' flows, are made on first use and count in their
times); `floor_greedy_ms`, that plus
1,000 numpy argmins over 50 floats (the least a per-operator numpy greedy does);
`floor_walk_ms`, that plus the least a path-by-path walk does (per flow's path and device on
it, one Python iteration and one look-up of the path's operators there: the bits of an int,
as edge-ward's walk keeps them).

Quality: on small seeded instances (chains on 4 gateways, an aggregation node and a cloud VM,
through the broker beside the cloud VM)
each heuristic's objective over the optimum's (workloads.placement.optimal), and `gap_max`,
the largest of those ratios minus 1. Edge-ward can go below 1: its several instances per
operator are outside the optimum's one-instance space. Then the optimum's time and gap on 50
operators on those 6 nodes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from workloads.placement import synthetic
from workloads.placement.edgeward import Walk
from workloads.placement.evaluate import metrics
from workloads.placement.policy import POLICIES, decide, make_policy, policy_class
from workloads.placement.problem import Problem, Weights
from workloads.placement.tables import Tables

GREEDY = ("latency-aware", "network-aware", "energy-aware", "edge-ward")
SIZES = (10, 100, 1000)


def host_load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load_1m={one:.2f} load_5m={five:.2f} load_15m={fifteen:.2f} cpus={os.cpu_count()}"


def timed(work, runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `work()` over `runs` runs."""
    wall, cpu = [], []
    for _ in range(runs):
        start, cpu_start = time.perf_counter(), time.process_time()
        work()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return statistics.median(wall), statistics.median(cpu)


def floor(runs: int) -> float:
    """Median wall seconds of 1,000 argmins over 50 floats each."""
    rows = np.random.default_rng(0).random((1000, 50))
    return timed(lambda: [row.argmin() for row in rows], runs)[0]


def walk_floor(problem: Problem, runs: int) -> tuple[float, float]:
    """Median wall seconds of Tables.of(problem), and of one pass over the flows' paths with
    one look-up of the path's operators per device (the walk's plans made beforehand)."""
    tables = Tables.of(problem)
    walk = Walk(tables)
    paths = [(walk.plan(j)[4], walk.devices(tables.index[flow.at]))
             for j, op in enumerate(problem.operators) for flow in op.flows]

    def least() -> None:
        for reached, devices in paths:
            for device in devices:
                _ = walk.bits_on[device] & reached

    return timed(lambda: Tables.of(problem), runs)[0], timed(least, runs)[0]


def big(operators: int, seed: int = 1) -> Problem:
    """Chains needing 10 % of the tree's capacity: at 15 % edge-ward's walk fills the one
    cloud VM above half the gateways (it never uses the other) and cannot place 1,000."""
    nodes, latency, joules = synthetic.tree(brokers=True)
    return synthetic.chains(operators, nodes, latency, joules,
                            chains=max(2, min(8, operators // 25)), seed=seed,
                            utilisation=0.1)


def small(seed: int, operators: int = 8) -> Problem:
    nodes, latency, joules = synthetic.tree(gateways=4, aggregations=1, clouds=1,
                                            battery_every=3, cloud_cores=8, brokers=True)
    return synthetic.chains(operators, nodes, latency, joules, chains=2 + seed % 2, seed=seed,
                            utilisation=0.3, rates=(50.0, 500.0),
                            weights=Weights(1.0, 1e-5, 1e-3))


def decision_times(runs: int, base: float) -> dict[tuple[str, int], float]:
    heuristics = sorted(name for name in POLICIES if name != "optimal")
    times = {}
    for operators in SIZES:
        problem = big(operators)
        for name in heuristics:
            policy = make_policy(name)
            policy.place(problem)                       # warm: imports, caches
            wall, cpu = timed(lambda p=policy, q=problem: p.place(q), runs)
            times[name, operators] = wall
            figures = metrics(problem, decide(policy, problem))
            print(f"ops={operators} nodes={len(problem.nodes)} policy={name} "
                  f"decision_ms={wall * 1e3:.2f} cpu_ms={cpu * 1e3:.2f} "
                  f"per_floor={wall / base:.1f} latency_s={figures.latency:.4f} "
                  f"overload={figures.overload:.3f}", flush=True)
    return times


def quality(seeds: int) -> None:
    """Each heuristic's objective over the optimum's; `gap_max` the largest minus 1, and
    beside it the largest over the answers without overload (an overloaded answer scores
    above any feasible one: edge-ward's walk books a path's load where the path goes north,
    the backends share a broker's messages over every instance)."""
    ratios: dict[str, list[float]] = {}
    feasible: list[float] = []
    below = overloaded = 0
    for seed in range(seeds):
        problem = small(seed)
        best = decide(make_policy("optimal"), problem)
        for name in sorted(POLICIES):
            if name != "optimal":
                decision = decide(make_policy(name), problem)
                ratio = decision.objective / best.objective
                ratios.setdefault(name, []).append(ratio)
                below += name == "edge-ward" and ratio < 1
                over = metrics(problem, decision).overload > 0
                overloaded += over
                feasible += [] if over else [ratio]
    for name, values in ratios.items():
        print(f"policy={name} objective_over_optimum_mean={statistics.mean(values):.3f} "
              f"max={max(values):.3f} min={min(values):.3f} instances={len(values)}")
    print(f"edge_ward_below_optimum={below}/{seeds} overloaded_answers={overloaded}/"
          f"{seeds * len(ratios)}")
    print(f"gap_max={max(max(v) for v in ratios.values()) - 1:.3f} "
          f"gap_max_without_overload={max(feasible, default=1.0) - 1:.3f} {host_load()}")


def optimum_at_fifty(time_limit: float) -> None:
    problem = small(7, operators=50)
    start = time.perf_counter()
    decision = decide(make_policy("optimal", {"time_limit": time_limit}), problem)
    wall = time.perf_counter() - start
    print(f"optimal_ops=50 optimal_nodes={len(problem.nodes)} optimal_s={wall:.2f} "
          f"optimal_solve_s={decision.seconds:.2f} optimal_gap={decision.gap:.2g} "
          f"optimal_reason=\"{next(iter(decision.reasons.values()))}\"")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 runs, 3 small instances")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--time-limit", type=float, default=5.0)
    args = parser.parse_args()
    runs, seeds = (3, 3) if args.quick else (args.runs, args.seeds)
    policy_class("optimal")                             # the shipped policies registered
    print(f"runs={runs} seeds={seeds} {host_load()}", flush=True)
    base = floor(runs)
    print(f"floor_argmin_1000_ms={base * 1e3:.3f}", flush=True)
    times = decision_times(runs, base)
    slowest = max(GREEDY, key=lambda name: times[name, 1000])
    tables, walk = walk_floor(big(1000), runs)
    quality(seeds)
    optimum_at_fifty(args.time_limit)
    after = floor(runs)
    print(f"floor_argmin_1000_ms_after={after * 1e3:.3f} {host_load()}")
    print(f"floor_tables_ms={tables * 1e3:.2f} floor_greedy_ms={(tables + base) * 1e3:.2f} "
          f"floor_walk_ms={(tables + walk) * 1e3:.2f}")
    for name in GREEDY:
        print(f"{name.replace('-', '_')}_ms_1000={times[name, 1000] * 1e3:.2f}")
    floor_ms = (tables + (walk if slowest == "edge-ward" else base)) * 1e3
    print(f"decision_ms_1000={times[slowest, 1000] * 1e3:.2f} slowest={slowest} "
          f"floor_ms={floor_ms:.2f} per_floor={times[slowest, 1000] * 1e3 / floor_ms:.1f} "
          f"{host_load()}")


if __name__ == "__main__":
    main()
