"""Nothing an experiment runs takes the host (issue 40, finding 7): every container with a pids,
memory and CPU limit; a fork bomb in a gateway ends against its pids limit; a cluster beyond the
containers this host takes is refused before anything starts, with the figures; hundreds of
gateways still fit."""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emu.cluster.capacity import (
    GIB,
    CapacityRefused,
    check_host_cap,
    free_pids,
    host_cap,
    host_threads,
)
from emu.cluster.plan import PIDS_AGENT, plan_cluster
from emu.engines.docker import inventory
from emu.engines.docker.engine import Cluster
from tests.emu_cluster.test_cluster import LABELS, small_topology
from topologies.model import Topology, expand
from topologies.spec import TopologySpec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from deploy_timing import gateway_topology  # noqa: E402 - benchmarks/deploy_timing.py

pytestmark = pytest.mark.emu

# A fork bomb in the gateway's shell (busybox, under QEMU): each call pipes into another.
FORK_BOMB = "b(){ b | b & }; b"
BOMB_SAMPLES = 240  # pids.current read every 0.25 s until the limit refused forks


def cgroup_pids(container: str) -> Path:
    """The container's pids cgroup folder (cgroup v1 cgroupfs or systemd, or v2)."""
    for folder in (f"/sys/fs/cgroup/pids/docker/{container}",
                   f"/sys/fs/cgroup/pids/system.slice/docker-{container}.scope",
                   f"/sys/fs/cgroup/system.slice/docker-{container}.scope",
                   f"/sys/fs/cgroup/docker/{container}"):
        if Path(folder, "pids.current").exists():
            return Path(folder)
    pytest.skip(f"no pids cgroup for container {container[:12]} on this host")


def refused_forks(folder: Path) -> int:
    """Forks the pids controller refused in the cgroup (pids.events' `max`)."""
    events = dict(line.split() for line in (folder / "pids.events").read_text().splitlines())
    return int(events.get("max", 0))


@pytest.fixture(scope="module")
def cluster(client) -> Iterator[Cluster]:
    """A gateway with its agent (forked by the zygote where it can), a cloud VM, a broker and
    the ZooKeeper the cluster adds: every kind of container a run starts."""
    plan = plan_cluster(small_topology(1), f"lim-{secrets.token_hex(3)}", labels=LABELS)
    running = Cluster(plan, client)
    running.up()
    try:
        yield running
    finally:
        running.down()


def test_every_container_has_a_pids_memory_and_cpu_limit(client, cluster: Cluster) -> None:
    containers = inventory.containers(client, cluster.name)
    assert len(containers) >= len(cluster.plan.containers)
    for found in containers:
        host = client.api.inspect_container(found["Id"])["HostConfig"]
        node = found["Labels"].get("foglab.node", found["Names"][0])
        assert (host["PidsLimit"] or 0) > 0, (node, "pids")
        assert host["Memory"] > 0, (node, "memory")
        assert (host["NanoCpus"] or 0) > 0 or (host["CpuQuota"] or 0) > 0, (node, "cpu")
        planned = cluster.plan.containers.get(node)
        if planned is not None:
            assert host["PidsLimit"] == planned.pids_limit, node


def test_a_fork_bomb_in_a_gateway_ends_against_its_pids_limit(client, cluster: Cluster) -> None:
    container = cluster._container("gw-1")
    folder = cgroup_pids(container)
    # Without a limit the bomb would take the host's pids: do not fire it then.
    limit = (folder / "pids.max").read_text().strip()
    assert limit == str(PIDS_AGENT), f"gw-1's pids.max is {limit}"
    before = host_threads()
    execution = client.api.exec_create(container, ["sh", "-c", FORK_BOMB])
    client.api.exec_start(execution["Id"], detach=True)
    most, most_host = 0, 0
    try:
        for _ in range(BOMB_SAMPLES):
            most = max(most, int((folder / "pids.current").read_text()))
            most_host = max(most_host, host_threads())
            if refused_forks(folder) > 0 and most >= PIDS_AGENT - 16:
                break
            time.sleep(0.25)
        refused = refused_forks(folder)
    finally:
        client.api.kill(container)
    print(f"\nfork bomb: pids.current at most {most} of {limit}, {refused} forks refused; "
          f"host tasks {before} before, at most {most_host}")
    assert refused > 0  # the bomb ran into the limit
    assert most <= PIDS_AGENT
    # The host's own count grew by the bomb's processes only (its exec's shim beside them).
    assert most_host - before <= PIDS_AGENT + 64


def big_topology(gateways: int, sites: int) -> Topology:
    """`gateways` gateways over `sites` sites (a bridge holds at most 1023) and a broker."""
    return expand(TopologySpec.model_validate({
        "name": "big", "sites": [{"name": f"s{i}"} for i in range(sites)],
        "nodes": [*({"name": f"gw{i}", "kind": "gateway", "replicas": gateways // sites,
                     "site": f"s{i}", "profile": "rpi4"} for i in range(sites)),
                  {"name": "broker", "kind": "broker", "site": "s0", "profile": "vm.small"}],
        "links": [{"from": "gw*", "to": "broker", "latency": "5ms"}]}))


def test_more_containers_than_the_host_takes_are_refused_before_anything_starts(client) -> None:
    plan = plan_cluster(big_topology(4000, 8), f"cap-{secrets.token_hex(3)}", labels=LABELS)
    cap = host_cap(plan)
    assert len(plan.containers) > cap.cap  # 4,002 on a host that takes hundreds
    cluster = Cluster(plan, client)
    with pytest.raises(CapacityRefused) as refused:
        cluster.up()
    message = str(refused.value)
    for figure in (f"{len(plan.containers)} containers", f"at most {cap.cap}", "GiB", "MiB",
                   "pids"):
        assert figure in message, (figure, message)
    assert inventory.containers(client, plan.cluster) == []
    assert inventory.networks(client, plan.cluster) == []
    assert list(Path(tempfile.gettempdir()).glob(f"foglab-{plan.cluster}-*")) == []


@pytest.mark.parametrize("gateways", [200, 500])
def test_hundreds_of_gateways_fit_this_host(gateways: int) -> None:
    """benchmarks/emu_startup.py's cluster (200 by default; 500 asked of it too)."""
    plan = plan_cluster(gateway_topology(gateways, "startup-bench"), "fit")
    assert check_host_cap(plan).containers == len(plan.containers) > gateways


def test_two_hundred_gateways_fit_an_8_gib_host() -> None:
    plan = plan_cluster(gateway_topology(200, "startup-bench"), "fit")
    cap = host_cap(plan, memory=8 * GIB, pids_free=30_000)
    assert cap.refusal() is None and cap.cap >= 201


def test_a_site_beyond_a_bridge_s_ports_is_refused_naming_its_network() -> None:
    plan = plan_cluster(gateway_topology(1100, "one-site"), "wide")
    cap = host_cap(plan, memory=64 * GIB, pids_free=100_000)
    assert "foglab-wide-edge would hold 1102 containers" in cap.refusal()  # and ZooKeeper


def test_free_pids_is_pid_max_less_the_threads_loadavg_counts(tmp_path: Path) -> None:
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "pid_max").write_text("4194304\n")
    (tmp_path / "loadavg").write_text("0.18 1.60 2.88 4/1109 3714\n")
    assert free_pids(str(tmp_path)) == 4194304 - 1109


def test_free_pids_counts_this_hosts_threads_while_processes_come_and_go() -> None:
    """The /proc walk it replaced raised FileNotFoundError when a process ended mid-walk (CI,
    under load). With 50 short processes ending meanwhile it answers every time, and counts
    at least this process's own threads."""
    import subprocess
    import threading

    limit = int(Path("/proc/sys/kernel/pid_max").read_text())
    children = [subprocess.Popen(["true"]) for _ in range(50)]
    free = [free_pids() for _ in range(200)]
    for child in children:
        child.wait()
    own = len(os.listdir(f"/proc/{os.getpid()}/task"))
    assert own >= threading.active_count()
    assert all(0 < f <= limit - own for f in free)
