"""Bring N gateways up on plain Docker and on Docker Swarm, in one run, on one host.

    python benchmarks/swarm_startup.py [--gateways 200] [--repeat 1] [--agents] [--encrypted]
                                       [--overlay] [--nodes 3]

The same plan (gw-1..N, profile rpi4, one broker, ZooKeeper; benchmarks/deploy_timing's
topology) is brought up by emu.engines.docker.engine.Cluster (plain containers) and then by
emu.engines.swarm.engine.SwarmCluster (Swarm services on this host's dockerd as a one-node
swarm, made for the run and left after it when it was not one before). Each is timed from `up` to
every
container running, every service answering and every node's link agent connected, then
brought down before the next starts. By default the gateways run `sleep infinity` in place of
their agent: what is timed is the engine's own work per container, which is what Swarm
changes. `--agents` runs the agents (the plain engine without its zygote, which a Swarm
service cannot run, so both start each agent afresh under QEMU: much slower, and the host's
CPU, not the engine, is then the limit).

Two designs of the one-node swarm: its tasks on the node's bridge alone (the default on one
node), and `--overlay` adds a run with every task on an overlay network as well (the design
a swarm of several nodes needs; forced on one node here for the comparison). `--nodes 3`
adds a run spread over three Docker-in-Docker nodes (emu.engines.swarm.nodes, no site labels: Swarm
spreads the gateways; images through a local registry, pushed and pulled before the timing).

`--repeat R` alternates them R times (plain, swarm, ..., plain, swarm, ...), so that a load
other work puts on the host meanwhile falls on all alike; the figures are the medians. Prints,
last (load: the host's 1-minute load average before and after):

    gateways=  plain_s=  swarm_s=  ratio=  [swarm_overlay_s= ratio_overlay=]
    [swarm_3_nodes_s= ratio_3_nodes=]  load_before=  load_after=

ratio is swarm_s / plain_s (target: at most 1.2); with --repeat, the median of each pair's.
Everything made is removed at the end, on a failure and on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy_timing import gateway_topology  # noqa: E402 - benchmarks/deploy_timing.py

from emu.cluster.plan import plan_cluster  # noqa: E402
from emu.engines.docker.engine import Cluster  # noqa: E402
from emu.engines.docker.image_store import DOCKER_TIMEOUT_S  # noqa: E402
from emu.engines.swarm.engine import SwarmCluster  # noqa: E402
from emu.links.probe import ShaperChoice  # noqa: E402
from topologies.terminal import stop_on_signals  # noqa: E402

IDLE = ("sleep", "infinity")
RELAY = ShaperChoice("relay", "benchmark: the relay on both engines")
LABELS = {"foglab.test": "swarm_startup"}
NODES = "foglab-bench-swarm"


GWBRIDGE = "docker_gwbridge"  # Swarm makes it on its first overlay endpoint, keeps it after


def one_node_swarm(client) -> bool:
    """Make this host's dockerd a one-node swarm if it is none; whether this made it."""
    if (client.info().get("Swarm") or {}).get("LocalNodeState") == "active":
        return False
    address = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True,
                             text=True, check=True).stdout.split()[3].split("/")[0]
    subprocess.run(["docker", "swarm", "init", "--advertise-addr", address],
                   capture_output=True, check=True)
    return True


def timed_up(cluster: Cluster, label: str) -> float:
    """Seconds from `up` to every container running and every service answering; the cluster
    is brought down after, whatever happens."""
    started = time.monotonic()
    try:
        cluster.up()
        seconds = time.monotonic() - started
        print(f"{label}: {len(cluster.plan.containers)} containers up in {seconds:.1f} s",
              file=sys.stderr, flush=True)
        return seconds
    finally:
        down = time.monotonic()
        cluster.down()
        print(f"{label}: down in {time.monotonic() - down:.1f} s", file=sys.stderr, flush=True)


def three_nodes(client, topology, command, timings: list[float]):
    """Time the plan on three Docker-in-Docker nodes (made and removed here; their volumes,
    with the pulled images, and the registry's store are kept for the next run)."""
    from emu.engines.docker.image_store import ensure_image
    from emu.engines.swarm.image_registry import LocalRegistry
    from emu.engines.swarm.nodes import SwarmNodes, remove
    from emu.engines.swarm.target import use_target
    from emu.images import CACHE_DIR, GATEWAY, SERVICES

    remove(NODES, host=client)
    with (SwarmNodes(3, name=NODES, keep_volumes=True, host=client) as nodes,
          LocalRegistry(nodes.gateway, storage=CACHE_DIR / "test-registry",
                        host=client) as registry):
        target = nodes.target(registry)  # pushes, and every node pulls by digest
        for spec in (GATEWAY, SERVICES):  # pulled by every node once, before the timing
            target.image_ref(ensure_image(spec, client=client).tag)
        with use_target(target):
            run = secrets.token_hex(3)
            swarm = SwarmCluster(plan_cluster(topology, f"ss3-{run}", labels=LABELS),
                                 agent_command=command)
            timings.append(timed_up(swarm, "swarm, 3 nodes"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateways", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1, help="alternate the engines R times")
    parser.add_argument("--agents", action="store_true",
                        help="run the agents (no zygote on either engine), not `sleep infinity`")
    parser.add_argument("--encrypted", action="store_true", help="an encrypted overlay network")
    parser.add_argument("--overlay", action="store_true",
                        help="also time the one-node swarm with its tasks on an overlay")
    parser.add_argument("--nodes", type=int, choices=(1, 3), default=1,
                        help="3: also time the plan over three Docker-in-Docker nodes")
    options = parser.parse_args()
    if options.gateways < 1:
        parser.error(f"--gateways {options.gateways}: at least 1")
    if options.repeat < 1:
        parser.error(f"--repeat {options.repeat}: at least 1")
    import docker

    client = docker.from_env(timeout=DOCKER_TIMEOUT_S, max_pool_size=24)
    topology = gateway_topology(options.gateways, "swarm-startup")
    command = None if options.agents else IDLE
    load_before = os.getloadavg()[0]
    made_swarm = False
    bridge = bool(client.api.networks(names=[GWBRIDGE]))
    plain_s: list[float] = []
    swarm_s: list[float] = []
    overlay_s: list[float] = []
    nodes_s: list[float] = []
    with stop_on_signals():
        try:
            made_swarm = one_node_swarm(client)
            for _ in range(options.repeat):
                run = secrets.token_hex(3)
                plain = Cluster(plan_cluster(topology, f"ssp-{run}", labels=LABELS), client,
                                agent_command=command, shaper=RELAY, zygote=False)
                plain_s.append(timed_up(plain, "plain docker"))
                swarm = SwarmCluster(plan_cluster(topology, f"sss-{run}", labels=LABELS),
                                     client, agent_command=command)
                swarm_s.append(timed_up(swarm, "swarm"))
                if options.overlay or options.encrypted:
                    swarm = SwarmCluster(plan_cluster(topology, f"sso-{run}", labels=LABELS),
                                         client, agent_command=command, overlay=True,
                                         encrypted=options.encrypted)
                    overlay_s.append(timed_up(swarm, "swarm, overlay"))
                if options.nodes == 3:
                    three_nodes(client, topology, command, nodes_s)
        finally:
            if made_swarm:
                subprocess.run(["docker", "swarm", "leave", "--force"], capture_output=True)
                if not bridge:
                    subprocess.run(["docker", "network", "rm", GWBRIDGE], capture_output=True)
    figures = [f"gateways={options.gateways}", f"plain_s={statistics.median(plain_s):.1f}"]
    for name, suffix, timings in (("swarm", "", swarm_s), ("swarm_overlay", "_overlay", overlay_s),
                                  ("swarm_3_nodes", "_3_nodes", nodes_s)):
        if timings:
            ratios = [s / p for s, p in zip(timings, plain_s, strict=True)]
            figures += [f"{name}_s={statistics.median(timings):.1f}",
                        f"ratio{suffix}={statistics.median(ratios):.2f}"]
    print(" ".join(figures), f"load_before={load_before:.2f}",
          f"load_after={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
