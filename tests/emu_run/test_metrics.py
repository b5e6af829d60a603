"""Container CPU, memory and state from cgroup files, in both layouts and cgroup versions."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from emu.host.metrics import ContainerCgroup, NodeSampler

CID = "ab" * 32


def v1(root: Path, cpu_ns: int, memory: int, cid: str = CID, procs: str = "1\n42\n",
       freezer: str = "THAWED") -> None:
    for folder, name, value in (("cpuacct", "cpuacct.usage", cpu_ns),
                                ("cpuacct", "cgroup.procs", procs),
                                ("memory", "memory.usage_in_bytes", memory),
                                ("freezer", "freezer.state", freezer)):
        path = root / folder / "docker" / cid
        path.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(f"{value}\n" if isinstance(value, int) else value)


def v2(root: Path, cpu_us: int, memory: int, procs: str = "1\n", frozen: str = "0") -> None:
    path = root / "system.slice" / f"docker-{CID}.scope"
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpu.stat").write_text(f"usage_usec {cpu_us}\nuser_usec 1\nsystem_usec 2\n")
    (path / "memory.current").write_text(f"{memory}\n")
    (path / "cgroup.procs").write_text(procs)
    (path / "cgroup.freeze").write_text(f"{frozen}\n")


def test_cgroup_v1_cgroupfs(tmp_path: Path) -> None:
    v1(tmp_path, 2_500_000_000, 20 << 20)
    usage = ContainerCgroup(CID, tmp_path).usage()
    assert usage.cpu_s == pytest.approx(2.5) and usage.memory == 20 << 20


def test_cgroup_v2_systemd(tmp_path: Path) -> None:
    v2(tmp_path, 1_250_000, 7 << 20)
    usage = ContainerCgroup(CID, tmp_path).usage()
    assert usage.cpu_s == pytest.approx(1.25) and usage.memory == 7 << 20


def test_a_missing_cgroup_names_the_container(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"container {CID[:12]}"):
        ContainerCgroup(CID, tmp_path)


def test_the_sampler_gives_cpu_as_a_fraction_of_the_nodes_cores(tmp_path: Path) -> None:
    v1(tmp_path, 0, 10)
    sampler = NodeSampler({"gw-1": CID}, {"gw-1": 4}, epoch=100.0, root=tmp_path)
    sampler.sample(now=101.0)
    v1(tmp_path, 6_000_000_000, 30)  # 6 CPU-seconds in 2 s on 4 cores: 75 %
    sampler.sample(now=103.0)
    assert sampler.rows["t"] == [3.0] and sampler.rows["node"] == ["gw-1"]
    assert sampler.rows["cpu"] == [pytest.approx(0.75)] and sampler.rows["memory"] == [30.0]
    assert sampler.rows["up"] == [True] and sampler.down == {}


@pytest.mark.parametrize(("change", "why"), [
    (lambda root: v1(root, 3_000_000_000, 40, procs=""), "stopped: no process left"),
    (lambda root: v1(root, 3_000_000_000, 40, freezer="FROZEN\n"), "paused: its cgroup is frozen"),
    (lambda root: shutil.rmtree(root / "cpuacct" / "docker" / CID), "gone: its cgroup was removed"),
])
def test_a_container_that_stops_is_down_with_cpu_0_until_it_runs_again(tmp_path: Path, change,
                                                                  why: str) -> None:
    other = "cd" * 32
    v1(tmp_path, 0, 10)
    v1(tmp_path, 0, 10, cid=other)
    sampler = NodeSampler({"gw-1": CID, "gw-2": other}, {"gw-1": 1, "gw-2": 1}, epoch=100.0,
                          root=tmp_path)
    sampler.sample(now=101.0)
    v1(tmp_path, 1_000_000_000, 20)
    v1(tmp_path, 500_000_000, 20, cid=other)
    sampler.sample(now=102.0)
    change(tmp_path)
    sampler.sample(now=103.0)
    sampler.sample(now=104.0)  # still down
    v1(tmp_path, 400_000_000, 50)  # back again (restarted: its counter began at 0)
    sampler.sample(now=105.0)  # up, no row yet: its CPU is counted from here
    v1(tmp_path, 900_000_000, 50)
    v1(tmp_path, 1_000_000_000, 20, cid=other)
    sampler.sample(now=106.0)
    rows = list(zip(*sampler.rows.values(), strict=True))
    assert [r for r in rows if r[1] == "gw-1"] == [
        (2.0, "gw-1", pytest.approx(1.0), 20.0, 0, True), (3.0, "gw-1", 0.0, 0.0, 0, False),
        (4.0, "gw-1", 0.0, 0.0, 0, False), (6.0, "gw-1", pytest.approx(0.5), 50.0, 0, True)]
    assert [r[5] for r in rows if r[1] == "gw-2"] == [True] * 5
    assert list(sampler.down) == ["gw-1"]
    assert sampler.down["gw-1"].startswith(f"down at t=3.0 s: {why}")


def test_cgroup_v2_tells_a_frozen_or_empty_container(tmp_path: Path) -> None:
    v2(tmp_path, 1, 1)
    cgroup = ContainerCgroup(CID, tmp_path)
    assert cgroup.down() is None
    v2(tmp_path, 1, 1, frozen="1")
    assert cgroup.down() == "paused: its cgroup is frozen"
    v2(tmp_path, 1, 1, procs="")
    assert cgroup.down() == "stopped: no process left in its cgroup"


def test_a_clusters_sampler_leaves_out_the_zookeeper_it_added(tmp_path: Path) -> None:
    """The added ZooKeeper server is no topology node: the nodes table does not name it; a
    topology coordinator is sampled like any node."""
    ids = {"gw-1": "a1" * 32, "coord-1": "b2" * 32, "zookeeper": "c3" * 32}
    for cid in ids.values():
        v1(tmp_path, 0, 10, cid=cid)
    plan = SimpleNamespace(containers={
        "gw-1": SimpleNamespace(kind="gateway", nano_cpus=4 * 10**9),
        "coord-1": SimpleNamespace(kind="coordinator", nano_cpus=10**9),
        "zookeeper": SimpleNamespace(kind="zookeeper", nano_cpus=10**9)})
    status = {node: SimpleNamespace(container=cid) for node, cid in ids.items()}
    sampler = NodeSampler.of_cluster(plan, status, epoch=0.0, root=tmp_path)
    assert set(sampler.cgroups) == {"gw-1", "coord-1"} and sampler.cores["gw-1"] == 4.0


class EngineAPI:
    """An engine's stats and inspect calls for containers whose cgroups are on another host
    (a swarm node's tasks): the unit under test is the sampler's fallback to them."""

    def __init__(self) -> None:
        self.cpu_ns, self.running, self.calls = 0, True, 0

    def stats(self, container: str, stream: bool = True) -> dict:
        assert not stream
        self.calls += 1
        return {"cpu_stats": {"cpu_usage": {"total_usage": self.cpu_ns}},
                "memory_stats": {"usage": 12 << 20}}

    def inspect_container(self, container: str) -> dict:
        return {"State": {"Running": self.running, "Paused": False}}


def test_a_container_without_a_cgroup_here_is_sampled_through_its_engine(tmp_path: Path
                                                                          ) -> None:
    v1(tmp_path, 0, 10)  # gw-1's cgroup is on this host, gw-2's is not
    engine = EngineAPI()
    # Through each node's control (emu.engines.docker.nodes.DockerNode), as `cluster.node` gives.
    from emu.engines.docker.nodes import DockerNode

    sampler = NodeSampler({"gw-1": CID, "gw-2": "f" * 64}, {"gw-1": 4, "gw-2": 2}, epoch=100.0,
                          root=tmp_path, control=lambda node: DockerNode(engine, node))
    assert sampler.watch().files.keys() == {"gw-1"}  # throttling: only where cgroups are read
    sampler.sample(now=100.0)
    engine.cpu_ns = 3_000_000_000  # 3 CPU-seconds in 2 s on 2 cores: 75 %
    sampler.sample(now=102.0)
    rows = sampler.rows
    assert rows["node"] == ["gw-1", "gw-2"] and rows["cpu"][1] == pytest.approx(0.75)
    assert rows["memory"][1] == 12 << 20 and engine.calls == 2
    engine.running = False
    sampler.sample(now=103.0)
    assert rows["up"][3] is False and "stopped: its engine says so" in sampler.down["gw-2"]
    with pytest.raises(FileNotFoundError):  # without an engine, a missing cgroup is an error
        NodeSampler({"gw-2": "f" * 64}, {"gw-2": 2}, epoch=0.0, root=tmp_path)
