"""Container CPU and memory from cgroup files, in both layouts and both cgroup versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.metrics import ContainerCgroup, NodeSampler

CID = "ab" * 32


def v1(root: Path, cpu_ns: int, memory: int) -> None:
    for folder, name, value in (("cpuacct", "cpuacct.usage", cpu_ns),
                                ("memory", "memory.usage_in_bytes", memory)):
        path = root / folder / "docker" / CID
        path.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(f"{value}\n")


def v2(root: Path, cpu_us: int, memory: int) -> None:
    path = root / "system.slice" / f"docker-{CID}.scope"
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpu.stat").write_text(f"usage_usec {cpu_us}\nuser_usec 1\nsystem_usec 2\n")
    (path / "memory.current").write_text(f"{memory}\n")


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
