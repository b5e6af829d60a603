"""emu.host.accounting: the parts of the host's CPU add up to its busy time, each where it belongs.

Unit tests on a fake /proc and cgroup tree (the counters are files), and one on this process's
real threads: a thread named as the relays' burns CPU and is counted as the relays.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from emu.host import accounting
from emu.host.accounting import EMULATED, MACHINERY, OTHER, Container

TICK = accounting.TICK_S


def _stat_line(busy_ticks: int, idle_ticks: int) -> str:
    # user nice system idle iowait irq softirq steal guest guest_nice
    return (f"cpu  {busy_ticks - 10} 0 10 {idle_ticks} 0 0 0 0 0 0\n"
            "cpu0 0 0 0 0 0 0 0 0 0 0\nprocs_running 1\n")


def _proc_stat(pid: int, comm: str, utime: int, stime: int) -> str:
    # pid (comm) state ppid ... fields 14 and 15 (utime, stime) counted from 1
    rest = ["S", "1"] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 30
    return f"{pid} ({comm}) " + " ".join(rest)


class FakeHost:
    """/proc/stat, engine processes and docker cgroups (v1 cpuacct) under a folder."""

    def __init__(self, root: Path) -> None:
        self.proc = root / "proc"
        self.cgroup = root / "cgroup"
        self.proc.mkdir()
        (self.cgroup / "cpuacct" / "docker").mkdir(parents=True)

    def host(self, busy_s: float, idle_s: float = 100.0) -> None:
        (self.proc / "stat").write_text(_stat_line(round(busy_s / TICK), round(idle_s / TICK)))

    def process(self, pid: int, comm: str, cpu_s: float, cgroup: str = "/") -> None:
        (self.proc / str(pid)).mkdir(exist_ok=True)
        (self.proc / str(pid) / "cgroup").write_text(f"2:cpuacct:{cgroup}\n")
        (self.proc / str(pid) / "stat").write_text(_proc_stat(pid, comm, round(cpu_s / TICK),
                                                              0))

    def container(self, cid: str, cpu_s: float) -> None:
        folder = self.cgroup / "cpuacct" / "docker" / cid
        folder.mkdir(exist_ok=True)
        (folder / "cpuacct.usage").write_text(str(int(cpu_s * 1e9)))
        memory = self.cgroup / "memory" / "docker" / cid
        memory.mkdir(parents=True, exist_ok=True)
        (memory / "memory.usage_in_bytes").write_text("1000")

    def docker_total(self, cpu_s: float) -> None:
        (self.cgroup / "cpuacct" / "docker" / "cpuacct.usage").write_text(str(int(cpu_s * 1e9)))

    def snapshot(self, containers) -> accounting.Snapshot:
        return accounting.snapshot(containers, root=self.cgroup, proc=self.proc)


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


CONTAINERS = [Container("gw-1", "a" * 64, EMULATED, "gateway"),
              Container("broker-1", "b" * 64, EMULATED, "broker"),
              Container("zk-1", "c" * 64, MACHINERY, "ZooKeeper (testbed)")]


def _state(host: FakeHost, busy: float, gw: float, broker: float, zk: float, others: float,
           dockerd: float, shell: float = 99.0) -> None:
    host.host(busy)
    host.container("a" * 64, gw)
    host.container("b" * 64, broker)
    host.container("c" * 64, zk)
    host.docker_total(gw + broker + zk + others)
    host.process(500, "dockerd", dockerd)
    host.process(501, "bash", shell)  # not the engine: another host process
    host.process(502, "mosquitto", busy, cgroup="/docker/" + "b" * 64)  # in its cgroup


def test_parts_add_up_to_the_host_busy_time_and_each_is_where_it_belongs(host):
    _state(host, busy=1000.0, gw=10.0, broker=5.0, zk=2.0, others=50.0, dockerd=7.0)
    since = host.snapshot(CONTAINERS)
    _state(host, busy=1100.0, gw=40.0, broker=15.0, zk=3.0, others=80.0, dockerd=9.0,
           shell=103.0)
    until = host.snapshot(CONTAINERS)
    found = {p.part: p for p in accounting.parts(CONTAINERS, since, until)}
    assert found["gw-1 [gateway]"].cpu_s == pytest.approx(30.0)
    assert found["gw-1 [gateway]"].kind == EMULATED
    assert found["broker-1 [broker]"].cpu_s == pytest.approx(10.0)
    assert found["zk-1 [ZooKeeper (testbed)]"].kind == MACHINERY
    assert found["zk-1 [ZooKeeper (testbed)]"].cpu_s == pytest.approx(1.0)
    assert found[accounting.OTHER_CONTAINERS].cpu_s == pytest.approx(30.0)
    assert found[accounting.ENGINE_PART].cpu_s == pytest.approx(2.0)
    assert found["process bash"].cpu_s == pytest.approx(4.0)
    assert found["process bash"].kind == OTHER
    assert not any("mosquitto" in part for part in found)  # counted in broker-1's cgroup
    total = sum(p.cpu_s for p in found.values())
    assert total == pytest.approx(100.0)  # the host's busy time, the rest included
    assert sum(p.share for p in found.values()) == pytest.approx(1.0)
    assert found[accounting.REST].kind == OTHER


def test_summary_gives_the_machinery_share_of_the_host_and_of_the_run(host):
    _state(host, busy=0.0, gw=0.0, broker=0.0, zk=0.0, others=0.0, dockerd=0.0)
    since = host.snapshot(CONTAINERS)
    _state(host, busy=100.0, gw=60.0, broker=10.0, zk=5.0, others=0.0, dockerd=5.0)
    until = host.snapshot(CONTAINERS)
    fact = accounting.summary(accounting.parts(CONTAINERS, since, until), since, until, cores=2)
    own = fact["machinery_s"] - sum(p["cpu_s"] for p in fact["parts"]
                                    if p["part"] in (accounting.RUN_LOOP,
                                                     accounting.OTHER_THREADS))
    assert own == pytest.approx(10.0)  # the ZooKeeper and the engine (this process apart)
    assert fact["emulated_s"] == pytest.approx(70.0)
    assert fact["machinery_share"] == pytest.approx(fact["machinery_s"] / 100.0)
    assert fact["machinery_share_of_run"] == pytest.approx(
        fact["machinery_s"] / (fact["machinery_s"] + 70.0))
    assert any(line.startswith("gw-1") for line in accounting.table(fact))


def test_a_container_restarted_or_made_during_the_span_counts_from_zero(host):
    _state(host, busy=10.0, gw=50.0, broker=0.0, zk=0.0, others=0.0, dockerd=0.0)
    since = host.snapshot(CONTAINERS[:1])
    _state(host, busy=30.0, gw=4.0, broker=0.0, zk=0.0, others=0.0, dockerd=0.0)
    spare = Container("gw-2", "d" * 64, EMULATED)
    host.container("d" * 64, 3.0)
    until = host.snapshot([*CONTAINERS[:1], spare])
    found = {p.part: p.cpu_s for p in accounting.parts([*CONTAINERS[:1], spare], since, until)}
    assert found["gw-1 [gateway]"] == pytest.approx(4.0)
    assert found["gw-2"] == pytest.approx(3.0)


def test_the_relay_thread_of_this_process_is_counted_as_the_relays():
    since = accounting.snapshot([])
    burnt, done = threading.Event(), threading.Event()

    def burn() -> None:
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        burnt.set()
        done.wait(5)  # alive at the second snapshot: an ended thread is in "other threads"

    thread = threading.Thread(target=burn, name="relays-run-0001")
    thread.start()
    assert burnt.wait(10)
    until = accounting.snapshot([])
    done.set()
    thread.join()
    found = {p.part: p.cpu_s for p in accounting.parts([], since, until)}
    assert 0.25 <= found["link relays (emu.cluster.relays)"] <= 0.4


def test_samplers_timed_on_the_main_thread_are_split_from_the_run_loop():
    since = accounting.snapshot([], samplers_s=1.0)
    end = time.thread_time() + 0.2
    while time.thread_time() < end:
        pass
    until = accounting.snapshot([], samplers_s=1.15)
    found = {p.part: p.cpu_s for p in accounting.parts([], since, until)}
    main = until.threads[accounting.RUN_LOOP] - since.threads[accounting.RUN_LOOP]
    assert main >= 0.19  # the burn, in /proc's 10 ms ticks (and the snapshots' own work)
    assert found[accounting.SAMPLERS] == pytest.approx(0.15)
    assert found[accounting.RUN_LOOP] == pytest.approx(main - 0.15)


def test_host_busy_leaves_out_idle_and_iowait(tmp_path: Path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 20 30 1000 50 5 5 0 0 0\n")
    assert accounting.host_busy_s(stat) == pytest.approx(160 * TICK)


def test_a_containers_processes_are_named_by_module_and_their_ended_children_apart(host):
    cid = "e" * 64
    host.container(cid, 0.0)
    procs = host.cgroup / "cpuacct" / "docker" / cid / "cgroup.procs"

    def state(java: tuple[int, int], daemon: tuple[int, int]) -> dict:
        procs.write_text("700\n701\n")
        for pid, comm, (own, children), argv in (
                (700, "java", java, b"java\0-cp\0x\0"),
                (701, "python3", daemon, b"python3\0-m\0pyspark.daemon\0")):
            folder = host.proc / str(pid)
            folder.mkdir(exist_ok=True)
            rest = ["S", "1"] + ["0"] * 9 + [str(own), "0", str(children), "0"] + ["0"] * 28
            (folder / "stat").write_text(f"{pid} ({comm}) " + " ".join(rest))
            (folder / "cmdline").write_bytes(argv)
        return accounting.container_processes(cid, host.cgroup, host.proc)

    since = state((100, 0), (10, 0))
    until = state((400, 50), (30, 200))
    found = accounting.process_breakdown(since, until)
    assert found["java"] == pytest.approx(300 * TICK)
    assert found["java (children)"] == pytest.approx(50 * TICK)
    assert found["pyspark.daemon (children)"] == pytest.approx(200 * TICK)
    assert list(found)[0] == "java"  # the busiest first


@pytest.mark.emu
def test_on_real_containers_a_busy_ones_cpu_is_its_own_and_the_parts_meet_proc_stat():
    """Two containers of the services image: one spins at a limit of half a core, one sleeps.
    Their cgroups, the engine and /proc/stat agree."""
    from emu.engines.docker.image_store import ensure_image
    from emu.images import SERVICES
    from tests.engine import docker_engine

    client = docker_engine()
    image = ensure_image(SERVICES, client=client).tag
    made = []
    try:
        for name, command in (("idle", "sleep 60"), ("busy", "while :; do :; done")):
            made.append(client.containers.run(image, ["sh", "-c", command], detach=True,
                                              nano_cpus=500_000_000, labels={"foglab.test": name}))
        containers = [Container("idle", made[0].id, MACHINERY),
                      Container("busy", made[1].id, EMULATED)]
        made[1].reload()
        shell = Path("/proc") / str(made[1].attrs["State"]["Pid"]) / "stat"
        time.sleep(0.5)
        read = time.monotonic()
        since, spun = accounting.snapshot(containers), accounting._stat_cpu_s(shell)[1]
        gaps = [time.monotonic() - read]
        time.sleep(3.0)
        read = time.monotonic()
        until, spun = accounting.snapshot(containers), accounting._stat_cpu_s(shell)[1] - spun
        gaps.append(time.monotonic() - read)
    finally:
        for container in made:
            container.remove(force=True)
    found = {p.part: p for p in accounting.parts(containers, since, until)}
    span = until.t - since.t
    # At most its quota (half a core, CFS periods of 100 ms); what it got under the host's
    # load, the spinning shell's own CPU (/proc's ticks: 10 ms a read).
    assert found["busy"].cpu_s <= 0.5 * span + 0.1
    assert found["busy"].cpu_s >= 0.05
    # The cgroup's and the shell's reads are apart by what the reads took (a loaded host
    # stretches them), in which the shell spins at its half core: that, and /proc's ticks.
    assert found["busy"].cpu_s == pytest.approx(spun, abs=0.03 + 0.5 * sum(gaps)), gaps
    assert found["idle"].cpu_s < 0.05
    busy = until.host_busy - since.host_busy
    assert sum(p.cpu_s for p in found.values()) == pytest.approx(busy)
    # The parts come from cgroups and /proc, the total from /proc/stat: counted apart, they
    # agree but for /proc/stat's ticks (10 ms per core and read) and the reads' own time.
    skew = (since.read_s + until.read_s) / 2 * 2
    assert found[accounting.REST].cpu_s >= -0.1 - skew
    assert found["busy"].share == pytest.approx(found["busy"].cpu_s / busy)


def test_a_run_whose_machinery_takes_over_a_tenth_of_its_cpu_is_marked_with_the_busiest():
    from emu.host.fidelity import assess, machinery_reason

    def fact(relays: float, gateway: float) -> dict:
        return {"machinery_share_of_run": relays / (relays + gateway),
                "parts": [{"part": "link relays (emu.cluster.relays)", "kind": MACHINERY,
                           "cpu_s": relays},
                          {"part": "gw-1 [gateway]", "kind": EMULATED, "cpu_s": gateway}]}

    nodes = {"t": [1.0, 2.0], "node": ["gw-1", "gw-1"], "up": [True, True],
             "host_pressure": [0.1, 0.1], "relay_lag": [0.001, 0.001], "throttled": [0.0, 0.0]}
    assert machinery_reason(fact(1.0, 9.0)) is None  # 10 %: within the bound
    verdict = assess(nodes, 1.0, host_cpu=fact(3.0, 7.0))
    assert verdict["marked"]
    assert verdict["machinery_share_of_run"] == pytest.approx(0.3)
    assert verdict["reasons"] == ["testbed machinery took 30% of the run's CPU (most: link "
                                  "relays (emu.cluster.relays), 3.0 s)"]
    assert not assess(nodes, 1.0, host_cpu=fact(0.5, 9.5))["marked"]
    assert not assess(nodes, 1.0)["marked"]  # without the fact, as before
    # a light run: its machinery a third of its CPU, but 0.1 s in 20 s of the host's
    light = {**fact(0.1, 0.2), "span_s": 20.0, "machinery_s": 0.1}
    assert machinery_reason(light) is None
    assert machinery_reason({**light, "machinery_s": 3.0}) is not None  # 0.15 cores
