"""The emulation's own fidelity: host CPU pressure, the relays' timer lag and containers' CPU
throttling, sampled with the nodes and judged per run (emu.host.fidelity)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pyarrow as pa
import pytest

from emu.cluster.relays import LagProbe, RelaySet
from emu.host.fidelity import (
    SATURATED_LAG_S,
    FidelitySampler,
    HostPressure,
    assess,
    read_throttling,
    saturated_at,
    throttle_file,
)
from emu.host.metrics import ContainerCgroup, NodeSampler
from experiments.schema import SchemaError, conform

CID = "ef" * 32


def psi(path: Path, total_us: int) -> Path:
    path.write_text(f"some avg10=1.00 avg60=2.00 avg300=3.00 total={total_us}\n"
                    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    return path


def test_pressure_is_the_share_of_each_interval_some_task_waited(tmp_path: Path) -> None:
    file = psi(tmp_path / "cpu", 5_000_000)
    pressure = HostPressure(file, tmp_path / "none", cores=2)
    assert pressure.source == "psi"
    assert pressure.sample(10.0) is None  # no interval yet
    psi(file, 5_000_000 + 1_200_000)  # 1.2 s stalled in 2 s
    assert pressure.sample(12.0) == pytest.approx(0.6)
    psi(file, 5_000_000 + 1_200_000)
    assert pressure.sample(13.0) == 0.0


def test_without_psi_the_run_queue_beyond_the_cores_stands_in(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\nprocs_running 8\nprocs_blocked 0\n")
    pressure = HostPressure(tmp_path / "no-psi", stat, cores=2)
    assert pressure.source == "run queue"
    assert pressure.sample(1.0) == pytest.approx(6 / 8)  # 6 of 8 runnable tasks wait
    stat.write_text("procs_running 1\n")
    assert pressure.sample(2.0) == 0.0


def test_this_hosts_pressure_reads() -> None:
    pressure = HostPressure()
    pressure.sample(time.time())
    time.sleep(0.2)
    value = pressure.sample(time.time())
    assert value is not None and 0.0 <= value <= 1.0


def cgroup_v1(root: Path, periods: int, throttled: int, ns: int) -> None:
    for folder, name, text in (
            ("cpuacct", "cpuacct.usage", "1000\n"), ("cpuacct", "cgroup.procs", "1\n"),
            ("memory", "memory.usage_in_bytes", "10\n"),
            ("cpu", "cpu.stat", f"nr_periods {periods}\nnr_throttled {throttled}\n"
                                f"throttled_time {ns}\nnr_bursts 0\nburst_time 0\n")):
        path = root / folder / "docker" / CID
        path.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)


def cgroup_v2(root: Path, periods: int, throttled: int, us: int) -> None:
    path = root / "system.slice" / f"docker-{CID}.scope"
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpu.stat").write_text(f"usage_usec 10\nuser_usec 5\nsystem_usec 5\n"
                                   f"nr_periods {periods}\nnr_throttled {throttled}\n"
                                   f"throttled_usec {us}\n")
    (path / "memory.current").write_text("10\n")
    (path / "cgroup.procs").write_text("1\n")


def test_throttling_is_read_from_the_cpu_controller_under_v1_and_cpu_stat_under_v2(
        tmp_path: Path) -> None:
    cgroup_v1(tmp_path / "v1", 100, 25, 1_500_000_000)
    file = throttle_file(ContainerCgroup(CID, tmp_path / "v1").cpu_file)
    assert file == tmp_path / "v1" / "cpu" / "docker" / CID / "cpu.stat"
    found = read_throttling(file)
    assert (found.periods, found.throttled, found.throttled_s) == (100, 25, 1.5)
    cgroup_v2(tmp_path / "v2", 40, 4, 250_000)
    file = throttle_file(ContainerCgroup(CID, tmp_path / "v2").cpu_file)
    found = read_throttling(file)
    assert (found.periods, found.throttled, found.throttled_s) == (40, 4, 0.25)


def test_a_cpu_stat_without_the_counters_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "cpu.stat").write_text("usage_usec 10\n")
    with pytest.raises(ValueError, match="cpu.stat has no nr_periods"):
        read_throttling(tmp_path / "cpu.stat")


def test_the_sampler_gives_the_throttled_share_since_the_last_sample(tmp_path: Path) -> None:
    cgroup_v1(tmp_path, 100, 10, 0)
    file = ContainerCgroup(CID, tmp_path).cpu_file
    sampler = FidelitySampler({"gw-1": file, "gw-2": tmp_path / "nowhere" / "cpuacct.usage"},
                              lag=lambda: 0.004)
    assert sampler.throttled("gw-1") is None  # the first reading has no interval
    cgroup_v1(tmp_path, 150, 30, 0)
    assert sampler.throttled("gw-1") == pytest.approx(20 / 50)
    cgroup_v1(tmp_path, 20, 5, 0)  # restarted: its counters began again
    assert sampler.throttled("gw-1") == pytest.approx(5 / 20)
    assert sampler.throttled("gw-2") is None
    assert sampler.host(1.0)[1] == 0.004
    assert sampler.facts()["throttling"] == ["gw-1"] and sampler.facts()["relay_lag"]


def test_node_rows_carry_the_fidelity_columns_and_conform(tmp_path: Path) -> None:
    cgroup_v1(tmp_path, 100, 0, 0)
    file = psi(tmp_path / "pressure", 0)
    sampler = NodeSampler({"gw-1": CID}, {"gw-1": 1.0}, epoch=100.0, root=tmp_path)
    watched = sampler.watch(lag=lambda: 0.002,
                            pressure=HostPressure(file, tmp_path / "none", cores=2))
    sampler.sample(now=101.0)
    cgroup_v1(tmp_path, 200, 50, 10**9)
    psi(file, 300_000)
    sampler.sample(now=102.0)
    rows = sampler.rows
    assert rows["t"] == [2.0]
    assert rows["host_pressure"] == [pytest.approx(0.3)]
    assert rows["relay_lag"] == [0.002] and rows["throttled"] == [pytest.approx(0.5)]
    nodes = conform({"nodes": rows})["nodes"]
    assert nodes.column("throttled").to_pylist() == [pytest.approx(0.5)]
    assert watched.facts()["pressure_source"] == "psi"


def test_a_backend_that_does_not_measure_them_gets_nulls_and_bad_values_are_refused() -> None:
    rows = {"t": [1.0], "node": ["gw-1"], "cpu": [0.1], "memory": [1.0], "queue": [0],
            "up": [True]}
    nodes = conform({"nodes": rows})["nodes"]
    assert nodes.column("host_pressure").null_count == 1
    assert nodes.schema.field("relay_lag").type == pa.float64()
    with pytest.raises(SchemaError, match="throttled is a share"):
        conform({"nodes": {**rows, "host_pressure": [0.2], "relay_lag": [0.0],
                           "throttled": [1.5]}})


def columns(pressure: list, lag: list, throttled: dict[str, list], sample: float = 1.0) -> dict:
    rows: dict[str, list] = {k: [] for k in ("t", "node", "up", "host_pressure", "relay_lag",
                                             "throttled")}
    for i, (p, lateness) in enumerate(zip(pressure, lag, strict=True)):
        for node, shares in throttled.items():
            rows["t"].append((i + 1) * sample)
            rows["node"].append(node)
            rows["up"].append(True)
            rows["host_pressure"].append(p)
            rows["relay_lag"].append(lateness)
            rows["throttled"].append(shares[i])
    return rows


def test_a_quiet_run_is_not_marked() -> None:
    verdict = assess(columns([0.1] * 10, [0.001] * 10, {"gw-1": [0.0] * 10}), 1.0,
                     {"pressure_source": "psi"})
    assert not verdict["marked"] and verdict["reasons"] == []
    assert verdict["samples"] == 10 and verdict["saturated_share"] == 0.0
    assert verdict["host_pressure"]["max"] == pytest.approx(0.1)
    assert verdict["pressure_source"] == "psi"


def test_a_saturated_host_is_marked_with_its_pressure_and_share_of_the_run() -> None:
    pressure = [0.1] * 6 + [0.6, 0.64, 0.6, 0.64]
    verdict = assess(columns(pressure, [0.001] * 10, {"gw-1": [0.0] * 10, "gw-2": [0.0] * 10}),
                     1.0)
    assert verdict["marked"]
    assert verdict["reasons"] == ["host saturated: CPU pressure 62% for 40% of the run"]
    assert verdict["saturated_share"] == pytest.approx(0.4)
    assert verdict["saturated_spans"] == [[6.0, 10.0]]


def test_late_relays_and_a_throttled_node_are_reasons_of_their_own() -> None:
    lag = [0.001] * 8 + [0.035, 0.020]
    verdict = assess(columns([0.0] * 10, lag, {"gw-1": [0.0] * 5 + [0.5] * 5,
                                               "gw-2": [0.0] * 10}), 1.0)
    assert verdict["reasons"][0] == (f"link relays late: timers up to 35 ms late, over "
                                     f"{SATURATED_LAG_S * 1000:.0f} ms for 20% of the run")
    assert verdict["reasons"][1] == ("gw-1 at its CPU limit: throttled in 50% of its CPU "
                                     "periods for 50% of the run")
    assert list(verdict["throttled_nodes"]) == ["gw-1"]
    assert verdict["saturated_spans"] == [[8.0, 10.0]]


def test_a_table_without_the_columns_says_they_were_not_measured() -> None:
    verdict = assess({"t": [1.0], "node": ["gw-1"]}, 1.0)
    assert not verdict["marked"] and verdict["samples"] == 0
    assert "no fidelity columns" in verdict["reasons"][0]


def test_times_within_saturated_spans() -> None:
    assert saturated_at([0.5, 5.5, 6.0, 9.9, 10.5], [[0.0, 1.0], [6.0, 10.0]]) == [
        True, False, True, True, False]


def test_the_lag_probe_sees_a_blocked_loop() -> None:
    async def blocked() -> tuple[int, float, float]:
        probe = LagProbe(interval=0.01)
        task = asyncio.get_running_loop().create_task(probe.run())
        await asyncio.sleep(0.05)
        probe.take()
        time.sleep(0.08)  # a callback that holds the loop: the next timer fires late
        await asyncio.sleep(0.03)
        task.cancel()
        return probe.take()

    probes, mean, worst = asyncio.run(blocked())
    assert probes >= 1 and worst >= 0.06 and mean <= worst


def test_a_relay_sets_lag_is_measured_and_it_stops_cleanly() -> None:
    relays = RelaySet("lag-test").start()
    try:
        time.sleep(0.3)
        lag = relays.lag()
        # Measured while running. Not "small": on CI's loaded parallel phase an idle set's
        # timers ran 67 ms late; under a second holds at its worst (a kill landed 1.15 s late
        # once: that is a stall). That the probe sees a late timer is the test above's.
        assert lag is not None and 0.0 <= lag < 1.0
    finally:
        relays.stop()
    assert relays.lag() is None
