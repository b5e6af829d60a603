"""The nemesis's host-level actions clean up after themselves: a CPU hog's processes are gone
once it stops, a disk burst's file and folder too; a Nemesis thread stopped before its run
appeared leaves nothing. One short schedule end to end on the containers."""

from __future__ import annotations

import os
import time

import pytest

from experiments.nemesis.actions import CpuHog, DiskBurst, Nemesis


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not running: reaped children are gone from the table.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_cpu_hog_started_and_stopped_leaves_no_process() -> None:
    hog = CpuHog(processes=2)
    hog.start()
    pids = hog.pids()
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    hog.stop()
    assert not any(_alive(pid) for pid in pids)
    assert hog.pids() == []
    assert CpuHog().count == 2 * os.cpu_count()


def test_a_disk_burst_writes_and_leaves_no_file() -> None:
    burst = DiskBurst()
    burst.start()
    path, folder, pid = burst.path, burst.folder, burst.process.pid
    deadline = time.monotonic() + 10
    while not (path.exists() and path.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.stat().st_size > 0
    burst.stop()
    assert not path.exists() and not folder.exists() and not _alive(pid)


def test_a_nemesis_stopped_before_its_run_appears_leaves_nothing() -> None:
    class NoContainers:
        class api:  # noqa: N801 - the SDK's attribute
            @staticmethod
            def containers(**_):
                return []

    nemesis = Nemesis(NoContainers(), "nem-none", [])
    with nemesis:
        pass
    assert not nemesis.is_alive() and nemesis.errors == []


@pytest.mark.emu
@pytest.mark.slow
def test_one_short_schedule_on_the_containers(tmp_path) -> None:
    """pause_drain with a CPU hog and a broker restarted during the move (under 40 s)."""
    if os.geteuid() != 0:
        pytest.skip("the emulation needs root")
    pytest.importorskip("docker")
    from experiments.nemesis.run import run_schedule
    from experiments.nemesis.schedule import Fault, Schedule

    schedule = Schedule(0, "pause_drain", 18.0, (
        Fault("cpu_hog", "", 4.0, 2.0), Fault("broker_restart", "broker", 8.5, 1.5)))
    result = run_schedule(schedule, tmp_path)
    assert result.errors == [], result.errors
    assert any(line.startswith("broker_restart broker") for line in result.nemesis)
    assert result.verdict.counts["expected"] > 0
    assert result.verdict.lost == 0, result.verdict.detail
    assert list(tmp_path.glob("records/*/received.csv"))
