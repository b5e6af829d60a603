"""The zygote's parts that run without containers: finding a process's cgroups, telling a static
busybox from anything else, and the waiter that stands in a node's container for its agent."""

from __future__ import annotations

import contextlib
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emu.agent.zygote import cgroup_files, memory_cgroup
from emu.engines.docker.zygote import BUSYBOX, static_busybox, waiter_script

PROJECT = Path(__file__).resolve().parents[2]

# Stands in for an agent: writes its pid where the waiter looks and holds the waiter's FIFO as
# emu.agent.zygote's child does; on SIGTERM waits a little (as an agent flushing its records
# would), writes its exit code and exits with it.
AGENT = r"""
import os, signal, sys, time
from emu.agent.zygote import hold_fifo
pid_file, exit_file, fifo, code = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def stop(number, frame):
    time.sleep(0.5)
    open(exit_file, "w").write(str(code))
    os._exit(code)
signal.signal(signal.SIGTERM, stop)
open(pid_file, "w").write(str(os.getpid()))
hold_fifo(fifo)
while True:
    time.sleep(1)
"""


def fake_proc(tmp_path: Path, pid: int, lines: list[str]) -> str:
    (tmp_path / "proc" / str(pid)).mkdir(parents=True)
    (tmp_path / "proc" / str(pid) / "cgroup").write_text("".join(f"{x}\n" for x in lines))
    return str(tmp_path / "proc")


def cgroup_dirs(root: Path, *paths: str) -> None:
    for path in paths:
        (root / path).mkdir(parents=True)
        (root / path / "cgroup.procs").write_text("")


def test_cgroup_v1_hierarchies_are_found_each_under_its_controller(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    cgroup_dirs(root, "memory/docker/abc", "cpu,cpuacct/docker/abc", "systemd/docker/abc",
                "pids/docker/abc")
    proc = fake_proc(tmp_path, 42, [
        "12:pids:/docker/abc", "11:memory:/docker/abc", "3:cpu,cpuacct:/docker/abc",
        "1:name=systemd:/docker/abc", "9:blkio:/docker/abc",  # blkio not mounted here
        "0::/"])  # hybrid mode's unified hierarchy: nothing at the root to join
    found = cgroup_files(42, str(root), proc)
    assert found == {h: str(root / h / "docker/abc/cgroup.procs")
                     for h in ("pids", "memory", "cpu,cpuacct", "systemd")}
    assert memory_cgroup(42, str(root), proc) == found["memory"]


def test_cgroup_v2_has_one_unified_hierarchy(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    cgroup_dirs(root, "system.slice/docker-abc.scope")
    proc = fake_proc(tmp_path, 7, ["0::/system.slice/docker-abc.scope"])
    unified = str(root / "system.slice/docker-abc.scope/cgroup.procs")
    assert cgroup_files(7, str(root), proc) == {"": unified}
    assert memory_cgroup(7, str(root), proc) == unified


def elf(tmp_path: Path, name: str, segment_types: list[int], klass: int = 2) -> Path:
    """A minimal little-endian ELF header and program header table."""
    header = bytearray(64)
    header[:5] = b"\x7fELF" + bytes([klass])
    struct.pack_into("<Q", header, 32, 64)  # e_phoff
    struct.pack_into("<HH", header, 54, 56, len(segment_types))  # e_phentsize, e_phnum
    table = b"".join(struct.pack("<I", kind) + bytes(52) for kind in segment_types)
    path = tmp_path / name
    path.write_bytes(bytes(header) + table)
    return path


def test_only_a_static_elf_can_be_the_waiter(tmp_path: Path) -> None:
    assert static_busybox(elf(tmp_path, "static", [1, 1, 4])) is None
    assert "dynamically" in static_busybox(elf(tmp_path, "dynamic", [6, 3, 1]))
    assert "64-bit ELF" in static_busybox(elf(tmp_path, "elf32", [1], klass=1))
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    assert "not a 64-bit ELF" in static_busybox(script)
    assert "install busybox-static" in static_busybox(tmp_path / "missing")


needs_busybox = pytest.mark.skipif(static_busybox() is not None,
                                   reason=f"no static busybox: {static_busybox()}")


def files(tmp_path: Path) -> list[str]:
    return [str(tmp_path / name) for name in ("agent.pid", "agent.exit", "agent.fifo")]


def waiter(tmp_path: Path) -> subprocess.Popen:
    script = waiter_script(str(BUSYBOX), *files(tmp_path))
    return subprocess.Popen([str(BUSYBOX), "sh", "-c", script])


def agent(tmp_path: Path, code: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", AGENT, *files(tmp_path), str(code)],
                            cwd=PROJECT)


def children(pid: int) -> list[str]:
    """The commands of a process's children."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:  # a process may end between the listing and either read
            text = stat.read_text()
            if int(text[text.rindex(")") + 2:].split()[1]) == pid:
                found.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


def readers_of(fifo: Path) -> list[int]:
    """The pids of processes whose command line names `fifo` (the waiter's reader)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if str(fifo).encode() in cmdline.read_bytes().split(b"\0"):
                found.append(int(cmdline.parent.name))
    return found


def wait_for_file(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.02)


@contextlib.contextmanager
def ended_afterwards(*processes: subprocess.Popen) -> Iterator[None]:
    try:
        yield
    finally:
        for process in processes:
            process.kill()
            process.wait()


@needs_busybox
def test_the_waiter_passes_sigterm_on_and_ends_with_the_agents_code(tmp_path: Path) -> None:
    waiting, stand_in = waiter(tmp_path), agent(tmp_path, 3)
    with ended_afterwards(waiting, stand_in):
        wait_for_file(tmp_path / "agent.pid")
        time.sleep(0.3)
        # Asleep until the agent ends: its one child reads the FIFO, nothing polls.
        for _ in range(10):
            assert [c.split()[1:] for c in children(waiting.pid)] == [
                ["cat", str(tmp_path / "agent.fifo")]]
            time.sleep(0.1)
        assert waiting.poll() is None
        waiting.send_signal(signal.SIGTERM)
        assert stand_in.wait(timeout=10) == 3  # the agent heard SIGTERM
        assert waiting.wait(timeout=10) == 3   # and the waiter ended with its code


@needs_busybox
def test_the_waiter_ends_when_its_agent_dies_and_reports_a_kill(tmp_path: Path) -> None:
    waiting, stand_in = waiter(tmp_path), agent(tmp_path, 0)
    with ended_afterwards(waiting, stand_in):
        wait_for_file(tmp_path / "agent.pid")
        time.sleep(0.3)
        stand_in.kill()  # no exit code written
        stand_in.wait()
        assert waiting.wait(timeout=10) == 137


@needs_busybox
def test_a_waiter_stopped_before_its_agent_came_ends_at_once(tmp_path: Path) -> None:
    waiting = waiter(tmp_path)
    with ended_afterwards(waiting):
        time.sleep(0.3)
        stopped = time.monotonic()
        waiting.send_signal(signal.SIGTERM)
        assert waiting.wait(timeout=10) == 143
        assert time.monotonic() - stopped < 2.0
        # Its FIFO reader ended too: no agent was there to end it, and here it has no
        # container to end with it.
        deadline = time.monotonic() + 5.0
        while readers_of(tmp_path / "agent.fifo") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert readers_of(tmp_path / "agent.fifo") == []
