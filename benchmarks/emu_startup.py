"""Bring up N idle arm64 gateways with a broker and ZooKeeper, against a serial `docker run` loop.

    python benchmarks/emu_startup.py [--gateways 200] [--sample 10] [--no-pyc] [--no-zygote]
                                     [--workers 16] [--access closed|open]
                                     [--against OLD_TREE [--rounds 2]]

In one run: first a plain serial loop of `docker run -d` of the gateway image (the agent's
command and environment, idle) for a sample of containers, extrapolated to N; then the cluster
(gw-1..N, profile rpi4, one broker, ZooKeeper, no devices) through Cluster, timed until every
gateway is registered in ZooKeeper; then each idle gateway's memory from its cgroup; then a
Controller install of a passthrough operator on all of them. The agents are forked from the
cluster's zygote (emu.agent.zygote) unless `--no-zygote`; a gateway's memory then includes its
share of the zygote's (the zygote's cgroup divided by N). Prints, last:

    startup_s=  serial_docker_s=  rss_mb_per_gateway=  install_s=  ratio=

ratio is startup_s / serial_docker_s. Everything made (containers, networks, relays, scratch
folders) is removed at the end, on a failure and on Ctrl-C or SIGTERM. `--no-pyc` uses the
gateway image without precompiled bytecode, for a before/after comparison.

`--access`: the cluster's run.access, by default a run's default (closed since issue 40).

`--against OLD_TREE` pairs this tree with another checkout of foglab (`git worktree add
/tmp/old <commit>`): each round runs the other tree's benchmark with its own defaults, then
this one's (the next round in the other order), each in a process of its own with the same
gateways, sample and workers, after the host's load fell under its cores (`--settle`: at most
that long), and prints both start-ups, their medians, the host's load
before each, and

    slowdown=  (this tree's median startup_s / the other's)
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy_timing import gateway_topology  # noqa: E402 - benchmarks/deploy_timing.py

from emu import images  # noqa: E402
from emu.agent.config import CONFIG_VARIABLE, OperatorConfig  # noqa: E402
from emu.cluster.access import (  # noqa: E402
    DEFAULT_MODE,
    MODES,
    host_login,
    kazoo_options,
)
from emu.cluster.plan import plan_cluster  # noqa: E402
from emu.control.commands import Controller, wait_registered  # noqa: E402
from emu.engines.docker import image_store  # noqa: E402
from emu.engines.docker.engine import LOG_CONFIG, WORKERS, Cluster  # noqa: E402
from emu.host.metrics import ContainerCgroup  # noqa: E402
from emu.links.probe import choose_shaper  # noqa: E402
from experiments.hybrid.figures import figure_line  # noqa: E402
from topologies.terminal import stop_on_signals  # noqa: E402

BENCH_LABEL = "foglab.bench"
REGISTER_TIMEOUT_S = 900.0
INSTALL_TIMEOUT_S = 120.0
SETTLE_S = 5.0  # after registration, before reading memory: the agents' start-up garbage goes
MiB = 1024 ** 2

console = Console(stderr=True)


def serial_docker_runs(client, tag: str, plan, count: int, run_label: str,
                       made: list[str], bars: Progress) -> float:
    """Seconds for `count` serial `docker run -d` of the gateway's image, command and env."""
    gateway = plan.containers["gw-1"]
    config = gateway.agent
    task = bars.add_task("serial docker run -d", total=count)
    started = time.monotonic()
    for index in range(count):
        node = f"serial-{index + 1}"
        environment = config.to_json().replace(f'"node":"{config.node}"', f'"node":"{node}"')
        command = ["docker", "run", "-d", "--label", f"{BENCH_LABEL}={run_label}",
                   "--label", "foglab.test=emu_startup",
                   "--memory", str(gateway.mem_limit), "--cpus", f"{gateway.nano_cpus / 1e9:g}",
                   "--log-opt", f"max-size={LOG_CONFIG['config']['max-size']}",
                   "-e", f"{CONFIG_VARIABLE}={environment}", "-e", "PYTHONUNBUFFERED=1",
                   tag, *gateway.command]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        made.append(output.strip())
        bars.advance(task)
    return time.monotonic() - started


def remove_serial(client, run_label: str, made: list[str]) -> None:
    found = {c["Id"] for c in client.api.containers(
        all=True, filters={"label": f"{BENCH_LABEL}={run_label}"})}
    for container in found | {m for m in made if m}:
        try:
            client.api.remove_container(container, force=True)
        except Exception as error:  # noqa: BLE001 - report and go on removing the others
            if "No such container" not in str(error):
                console.print(f"could not remove {container[:12]}: {error}")


def memory_split(cgroup: ContainerCgroup) -> tuple[int, int] | None:
    """(rss, page cache) bytes from cgroup v1's memory.stat, beside usage_in_bytes; None on v2."""
    stat = cgroup.memory_file.with_name("memory.stat")
    if cgroup.memory_file.name != "memory.usage_in_bytes" or not stat.exists():
        return None
    values = dict(line.split() for line in stat.read_text().splitlines())
    return int(values.get("total_rss", values.get("rss", 0))), int(
        values.get("total_cache", values.get("cache", 0)))


class Registered:
    """Counts /iot/gateways children as they come, for the progress bar."""

    def __init__(self, hosts: str, bars: Progress, total: int, kazoo: dict | None = None):
        from kazoo.client import KazooClient
        from kazoo.recipe.watchers import ChildrenWatch

        self.task = bars.add_task("registered in ZooKeeper", total=total)
        self.client = KazooClient(hosts=hosts, timeout=10.0, **(kazoo or {}))
        self.client.start(timeout=30)
        self.client.ensure_path("/iot/gateways")
        self.done = threading.Event()

        def changed(children: list[str]) -> bool:
            bars.update(self.task, completed=len(children))
            return not self.done.is_set()

        ChildrenWatch(self.client, "/iot/gateways", changed)

    def close(self) -> None:
        self.done.set()
        self.client.stop()
        self.client.close()


def settle(most_s: float) -> str:
    """Wait (at most `most_s`) until the host's 1-minute load is under its cores, so that a
    run does not start in the last one's tear-down; the load then, for the figures."""
    deadline = time.monotonic() + most_s
    cores = os.cpu_count() or 1
    while True:
        load = Path("/proc/loadavg").read_text().split()[0]
        if float(load) < cores or time.monotonic() > deadline:
            return load
        time.sleep(5)


def paired(options: argparse.Namespace) -> int:
    """Alternate the other tree's benchmark and this one's (ABBA), each in its own process."""
    other = Path(options.against).resolve() / "benchmarks" / Path(__file__).name
    if not other.is_file():
        console.print(f"--against {options.against}: no {other} (a checkout of foglab?)")
        return 2
    common = ["--gateways", str(options.gateways), "--sample", str(options.sample),
              "--workers", str(options.workers)]
    ours = [sys.executable, __file__, *common, "--access", options.access]
    theirs = [sys.executable, str(other), *common]
    figures: dict[str, list[float]] = {"this": [], "against": []}
    for round_ in range(options.rounds):
        order = [("against", theirs), ("this", ours)]
        for which, command in order if round_ % 2 == 0 else order[::-1]:
            load = settle(options.settle)
            done = subprocess.run(command, capture_output=True, text=True,
                                  cwd=Path(command[1]).parents[1])
            found = [line for line in done.stdout.splitlines() if line.startswith("startup_s=")]
            if done.returncode != 0 or not found:
                console.print(f"{which} round {round_ + 1} failed ({done.returncode}):\n"
                              + (done.stdout + done.stderr)[-2000:])
                return 1
            figures[which].append(float(found[0].split("=", 1)[1]))
            print(f"round={round_ + 1} tree={which} startup_s={figures[which][-1]:.2f} "
                  f"load_before={load}")
    medians = {which: statistics.median(values) for which, values in figures.items()}
    print(f"against={options.against} gateways={options.gateways} access={options.access}")
    print(f"against_startup_s={medians['against']:.2f}")
    print(f"startup_s={medians['this']:.2f}")
    print(f"slowdown={medians['this'] / medians['against']:.3f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateways", type=int, default=200)
    parser.add_argument("--sample", type=int, default=10,
                        help="containers in the serial docker run loop")
    parser.add_argument("--no-pyc", action="store_true",
                        help="the gateway image without precompiled bytecode")
    parser.add_argument("--no-zygote", action="store_true",
                        help="start each agent afresh, not forked from the cluster's zygote")
    parser.add_argument("--workers", type=int, default=WORKERS,
                        help="containers created and started at once")
    parser.add_argument("--access", choices=MODES, default=DEFAULT_MODE,
                        help="run.access of the cluster (closed: a run's default)")
    parser.add_argument("--against", metavar="OLD_TREE",
                        help="pair with another checkout of foglab, alternating")
    parser.add_argument("--rounds", type=int, default=2,
                        help="with --against: runs of each tree (ABBA order)")
    parser.add_argument("--settle", type=float, default=240.0,
                        help="with --against: the longest wait, before each run, for the "
                        "host's load to fall under its cores (s)")
    options = parser.parse_args()
    if options.against:
        return paired(options)
    if options.no_pyc:
        images.precompiles = lambda: False  # the image's tag and build both ask this

    import docker

    client = docker.from_env(timeout=image_store.DOCKER_TIMEOUT_S, max_pool_size=24)
    run_label = secrets.token_hex(4)
    name = f"bench-{run_label}"
    n = options.gateways
    plan = plan_cluster(gateway_topology(n, "startup-bench"), name,
                        labels={"foglab.test": "emu_startup", BENCH_LABEL: run_label},
                        closed=options.access == "closed")
    kazoo = kazoo_options(plan)
    gateways = [a.node for a in plan.agents()]
    made: list[str] = []
    cluster: Cluster | None = None
    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=True)
    lines: list[str] = [f"access={options.access}"]
    with stop_on_signals(), bars:
        try:
            with console.status("images and link shaper"):
                tags = {spec.name: image_store.ensure_image(spec, client=client).tag
                        for spec in (images.GATEWAY, images.SERVICES)}
                shaper = choose_shaper()
            lines.append(f"gateway_image={tags['gateway']} precompiled="
                         f"{images.precompiles()} shaper={shaper.shaper}")

            serial_s = serial_docker_runs(client, tags["gateway"], plan, options.sample,
                                          run_label, made, bars)
            remove_serial(client, run_label, made)
            made.clear()
            serial_docker_s = serial_s / options.sample * n
            lines.append(f"serial_sample={options.sample} serial_sample_s={serial_s:.2f}")

            containers = bars.add_task("containers started", total=len(plan.containers))

            def progress(stage: str, done: int, total: int, detail: str) -> None:
                if stage == "containers":
                    bars.update(containers, completed=done)

            started = time.monotonic()
            cluster = Cluster(plan, client, shaper=shaper, progress=progress,
                              zygote=not options.no_zygote, workers=options.workers)
            cluster.up()
            up_s = time.monotonic() - started
            lines.append(f"agent_start={cluster.agent_start}")
            status = {s.node: s for s in cluster.status()}
            zookeeper = ",".join(f"{status[z].ip}:2181" for z in plan.zookeeper)
            try:
                watch = Registered(zookeeper, bars, n, kazoo)
            except Exception as error:  # noqa: BLE001 - only the progress bar is lost
                console.print(f"no registration progress: {error!r}")
                watch = None
            try:
                wait_registered(zookeeper, gateways, timeout=REGISTER_TIMEOUT_S, kazoo=kazoo)
            finally:
                if watch is not None:
                    watch.close()
            startup_s = time.monotonic() - started
            lines.append(f"up_s={up_s:.2f} (containers started, services answer)")

            time.sleep(SETTLE_S)
            memory = [ContainerCgroup(status[g].container).usage().memory for g in gateways]
            zygote = (ContainerCgroup(cluster.zygote.container).usage().memory
                      if cluster.zygote is not None else 0)
            rss_mb = (statistics.mean(memory) + zygote / n) / MiB
            lines.append(f"zygote_mb={zygote / MiB:.1f}")
            lines.append(f"rss_mb_min={min(memory) / MiB:.1f} rss_mb_median="
                         f"{statistics.median(memory) / MiB:.1f} rss_mb_max="
                         f"{max(memory) / MiB:.1f}")
            split = [memory_split(ContainerCgroup(status[g].container)) for g in gateways]
            if all(split):
                lines.append("memory_stat_mb: rss={:.1f} cache={:.1f} (mean; cgroup v1 usage "
                             "counts both)".format(*(statistics.mean(s[i] for s in split) / MiB
                                                    for i in (0, 1))))

            broker = sorted(set(plan.brokers.values()))[0]
            try:
                with Controller(f"{status[broker].ip}:1883",
                                credentials=host_login(plan)) as control:
                    installed = control.install(gateways, OperatorConfig(
                        "bench", task="passthrough", reads=["bench/#"]),
                        timeout=INSTALL_TIMEOUT_S)
            except TimeoutError as error:  # the start-up's figures stand: print them
                lines.append(f"install failed: {error}")
                installed = None
            if installed is not None and not installed.ok:
                lines.append(f"install failed: {installed.summary()}")
            latencies = sorted(r.latency for r in installed.replies.values()) if installed else []
            if latencies:
                lines.append(f"install_reply_p50_s={statistics.median(latencies):.3f} "
                             f"install_reply_max_s={latencies[-1]:.3f}")
        except KeyboardInterrupt:
            console.print("interrupted: removing what the benchmark made")
            print("\n".join([*lines, "interrupted"]))
            return 130
        finally:
            with console.status("removing the cluster"):
                try:
                    if cluster is not None:
                        removed = cluster.down()
                        console.print(f"cluster {name} down: removed {removed.containers} "
                                      f"containers, {removed.networks} networks")
                    remove_serial(client, run_label, made)
                except Exception as error:  # noqa: BLE001 - the figures are measured: print them
                    console.print(f"removing {name} failed: {error}")
                    lines.append(f"teardown_failed={type(error).__name__}")
    for line in lines:
        print(line)
    print(f"gateways={n}")
    print(f"startup_s={startup_s:.2f}")
    print(f"serial_docker_s={serial_docker_s:.2f}")
    print(f"rss_mb_per_gateway={rss_mb:.1f}")
    print(figure_line("install_s", installed.duration if installed else None,
                      "the install timed out (install failed, above)"))
    print(f"ratio={startup_s / serial_docker_s:.3f}")
    torn_down = not any(line.startswith("teardown_failed") for line in lines)
    return 0 if installed is not None and installed.ok and torn_down else 1


if __name__ == "__main__":
    sys.exit(main())
