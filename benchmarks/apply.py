"""`foglab emu apply`'s time: one job changed among N running, against all N deployed; and
SpecK's figure, deploy, modify and delete times over 1..N jobs.

    python benchmarks/apply.py [--jobs 100] [--sweep 1,10,50,100] [--gateways 3]
                               [--repetitions 3]

One cluster (three arm64 gateways under QEMU, profile rpi4, one broker, ZooKeeper; two sensors
at one reading a second on gw-1) brought up with one job (`keep`), as `foglab emu up
--experiment` does. Each figure is an apply as `foglab emu apply` makes it (emu.live.apply): the
agents' state read back (`operators.list`), the plan, its requests job after job, the state
read back again and checked equal to the experiment's; the time is all of it.

- `apply_all_s=` (the median of `--repetitions` rounds, as `apply_one_s`): the N jobs
  deployed at once (each a range filter of the stream, on the
  gateways in turn), the baseline measured in the same run;
- `apply_one_s=`: then one of the N jobs' parameter changed (an in-place update);
- `ratio=` apply_one_s / apply_all_s (targets: apply_one_s at most 1 s, ratio at most 0.05);
- with `--sweep`: per number of jobs n, `deploy_s_<n>=` (n jobs deployed beside `keep`),
  `modify_s_<n>=` (the n jobs' parameter changed: n in-place rows), `delete_s_<n>=` (the n
  jobs deleted), then the rows as a table and a linear fit's slope per job of each.

`load=` is the host's load average (1, 5, 15 min) before and after: the host's two cores run
every emulated gateway and whatever else runs, so the figures are the testbed's under that
load.

Measured on the 2-core development host, shared with other work (load in the figures' line),
agents forked from the zygote: see docs/jobs.md ("On the emulation").
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HEADER = """name: apply-bench
topology:
  name: apply-bench
  nodes:
    - {{name: sensor, kind: device, replicas: 2}}
    - {{name: gw, kind: gateway, replicas: {gateways}, profile: rpi4}}
    - {{name: broker, kind: broker}}
  links:
    - {{from: sensor-*, to: gw-1, latency: 2ms}}
    - {{from: gw-*, to: broker, latency: 2ms}}
workload:
  name: readings
  streams: [{{name: s, sources: sensor-*, rate: 1/s, arrivals: periodic, size: 100B}}]
run: {{duration: 10m, seed: 1}}
jobs:
  - {{name: keep, on: gw-1, reads: s}}
"""
JOB = ("  - {{name: j{i:03d}, task: range_filter, on: gw-{node}, reads: s, "
       "params: {{ranges: {{temperature: [-20, {high}]}}}}}}\n")


def experiment(folder: Path, label: str, gateways: int, jobs: int,
               high: dict[int, int] | None = None) -> Path:
    """An experiment file of `keep` and `jobs` range filters, job i's upper bound
    `high[i]` (50 by default)."""
    text = HEADER.format(gateways=gateways) + "".join(
        JOB.format(i=i, node=i % gateways + 1, high=(high or {}).get(i, 50))
        for i in range(jobs))
    path = folder / f"{label}.yaml"
    path.write_text(text)
    return path


def apply_to(path: Path, control, nodes: list[str], agents) -> tuple[float, str]:
    """One apply as `foglab emu apply` makes it: its seconds and the plan's summary with
    where the time went (loading the file, reading the agents back, the plan, its requests,
    the verifying read)."""
    from emu.cli.clusters import load_experiment
    from emu.live.apply import ApplyError, desired, differences, execute, plan_for, read_running

    marks = [time.perf_counter()]
    path, loaded = load_experiment(str(path), [])
    wanted = desired(loaded)
    job_of = {c.name: c.job for c in wanted.configs.values()}
    marks.append(time.perf_counter())
    running = read_running(control, nodes, job_of)
    marks.append(time.perf_counter())
    plan = plan_for(running, wanted)
    marks.append(time.perf_counter())
    execute(control, plan, wanted, running, agents=agents)
    marks.append(time.perf_counter())
    after = plan_for(read_running(control, nodes, job_of), wanted)
    marks.append(time.perf_counter())
    if not after.empty:
        raise ApplyError(f"{path.name}: not applied: {differences(after)}")
    parts = " ".join(f"{label}={later - earlier:.3f}" for label, earlier, later in zip(
        ("load", "read", "plan", "execute", "verify"), marks, marks[1:], strict=False))
    return marks[-1] - marks[0], f"{plan.summary()} ({parts})"


def load() -> str:
    return ",".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--sweep", default="", help="numbers of jobs, e.g. 1,10,50,100")
    parser.add_argument("--gateways", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=3,
                        help="rounds of apply_all and apply_one (their medians)")
    args = parser.parse_args()
    if args.jobs < 2 or args.gateways < 1 or args.repetitions < 1:
        parser.error("--jobs at least 2, --gateways and --repetitions at least 1")
    try:
        sweep = [int(n) for n in args.sweep.split(",") if n.strip()]
    except ValueError:
        parser.error(f"--sweep {args.sweep}: numbers of jobs, e.g. 1,10,50,100")

    import docker

    import experiments.emu_commands  # noqa: F401 - hands emu.cli.main the experiment loader
    from emu.cli.main import deployed_or_exit
    from emu.cluster.plan import plan_cluster
    from emu.control.commands import Controller
    from emu.engines.docker.engine import Cluster
    from emu.engines.docker.image_store import DOCKER_TIMEOUT_S
    from emu.live.agents import agents_and_brokers, start_drivers
    from emu.live.apply import agent_nodes

    print(f"load_before={load()}")
    folder = Path(tempfile.mkdtemp(prefix="foglab-apply-bench-"))
    client = docker.from_env(timeout=DOCKER_TIMEOUT_S)
    name = f"apply-bench-{secrets.token_hex(3)}"
    try:
        base = experiment(folder, "base", args.gateways, 0)
        deployed = deployed_or_exit(None, str(base), [], None)
        plan = plan_cluster(deployed.topology, name, agents=deployed.agents,
                            labels=deployed.labels)
        with Cluster(plan, client) as running:
            start_drivers(running)
            agents, brokers, _ = agents_and_brokers(client, name)
            nodes = agent_nodes(agents)
            routes = {n: brokers[agents[n].broker] for n in nodes}
            with Controller(routes) as control:
                def timed(path: Path) -> float:
                    seconds, summary = apply_to(path, control, nodes, agents)
                    print(f"# {path.stem}: {summary} in {seconds:.3f} s", flush=True)
                    return seconds

                # A warm-up: the first range filter on each gateway imports numpy.
                timed(experiment(folder, "warm", args.gateways, args.gateways))
                timed(base)
                n = args.jobs
                alls, ones = [], []
                for _ in range(args.repetitions):
                    alls.append(timed(experiment(folder, f"all-{n}", args.gateways, n)))
                    ones.append(timed(experiment(folder, f"one-{n}", args.gateways, n,
                                                 {0: 45})))
                    timed(base)
                apply_all, apply_one = statistics.median(alls), statistics.median(ones)
                print(f"repetitions={args.repetitions}")
                print(f"jobs={n}")
                print(f"apply_all_s={apply_all:.3f}")
                print(f"apply_one_s={apply_one:.3f}")
                print(f"ratio={apply_one / apply_all:.4f}")
                print(f"target_met={apply_one <= 1.0 and apply_one / apply_all <= 0.05}")
                rows = []
                for count in sweep:
                    deploy = timed(experiment(folder, f"deploy-{count}", args.gateways, count))
                    modify = timed(experiment(folder, f"modify-{count}", args.gateways, count,
                                              dict.fromkeys(range(count), 45)))
                    delete = timed(base)
                    rows.append((count, deploy, modify, delete))
                    print(f"deploy_s_{count}={deploy:.3f}")
                    print(f"modify_s_{count}={modify:.3f}")
                    print(f"delete_s_{count}={delete:.3f}", flush=True)
                if rows:
                    print("# jobs  deploy_s  modify_s  delete_s")
                    for count, deploy, modify, delete in rows:
                        print(f"# {count:4d}  {deploy:8.3f}  {modify:8.3f}  {delete:8.3f}")
                if len(rows) > 1:
                    for column, label in ((1, "deploy"), (2, "modify"), (3, "delete")):
                        print(f"{label}_per_job_s={_slope(rows, column):.4f}")
    finally:
        from emu.engines.docker import inventory

        inventory.remove(client, name)
        for path in folder.glob("*.yaml"):
            path.unlink()
        folder.rmdir()
        print(f"load_after={load()}")


def _slope(rows: list[tuple], column: int) -> float:
    """The least-squares slope of a column against the number of jobs."""
    xs = [row[0] for row in rows]
    ys = [row[column] for row in rows]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


if __name__ == "__main__":
    main()
