"""Fixtures every test folder shares: one local Spark for the test session, experiment builders."""

from __future__ import annotations

import copy
import os
import signal
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from workloads.spark.jvm import JVM_OPTIONS_VARIABLE, SHORT_RUN_OPTIONS

# The tests' Spark JVMs (the session's, job processes', a cluster's, and through the emulation
# a cloud VM's) live a few minutes at low rates: the JIT's first tier only, which costs a
# quarter less of the host's CPU for that (workloads.spark.jvm has the figures). Set before
# any JVM starts; a value in the environment wins.
os.environ.setdefault(JVM_OPTIONS_VARIABLE, SHORT_RUN_OPTIONS)

# Test files that each start several JVMs (Spark on cloud VMs' containers or in job processes).
# `make test` runs the files on several workers (pytest-xdist, --dist loadfile: a file's tests on
# one worker, so a module's fixture, a cluster or a Spark job, is made once), then the tests
# marked `alone` one at a time. These files run on the workers, each holding a lock every
# worker shares first, so two of them never compete: beside them the other files' emulations
# assert counts and what their records say, and times only with bounds that hold at CI's worst
# (issue 39), so the JVMs' load breaks none of them. (pytest-xdist's own grouping, loadgroup,
# does not work with pytest 9: it renames items through an attribute pytest 9 no longer reads.)
CPU_HEAVY = {"tests/emu_run/test_spark_migration.py", "tests/spark_apps/test_migration.py",
             "tests/emu_run/test_emulate.py", "tests/emu_host/test_calibrate.py",
             "tests/spark_cluster/test_cluster.py", "tests/emu_run/test_spark_cluster_run.py"}

# Files that need the host to themselves: `alone`, after the others, one at a time.
# test_calibrate measures the host (the CPU an agent, a broker and each operator cost on it)
# and holds those figures to bounds: other files' load is in what it measures. (test_recovery
# was alone too while a crashed gateway's operator could run twice under load: fixed, its
# order driven by tests/emu_agent/test_emulated.py.)
MEASURES_THE_HOST = {"tests/emu_host/test_calibrate.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("::", 1)[0] in MEASURES_THE_HOST:
            item.add_marker(pytest.mark.alone)


@pytest.fixture(scope="module", autouse=True)
def one_cpu_heavy_file_at_a_time(request: pytest.FixtureRequest,
                                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """For a file of CPU_HEAVY: hold the lock every worker of this test session shares (in the
    session's temporary folder, above each worker's own) while its tests run."""
    if request.node.nodeid not in CPU_HEAVY:
        yield
        return
    import fcntl

    with open(tmp_path_factory.getbasetemp().parent / "cpu-heavy.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# Where CI's minutes go, per file: (first start, last stop, seconds in its tests, worker),
# from the reports the controller receives; printed at the end of the session.
_FILES: dict[str, list] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.start:
        return
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    entry = _FILES.setdefault(report.nodeid.split("::", 1)[0],
                              [report.start, report.stop, 0.0, getattr(gateway, "id", "-")])
    entry[0], entry[1] = min(entry[0], report.start), max(entry[1], report.stop)
    entry[2] += report.stop - report.start


def pytest_terminal_summary(terminalreporter) -> None:
    """The files that ended last (the session's critical path) and the CPU_HEAVY chain, with
    their start and end from the session's first test: a heavy file's time in tests includes
    its wait for the lock."""
    if len(_FILES) < 2:
        return
    began = min(entry[0] for entry in _FILES.values())
    write = terminalreporter.write_line

    def row(path: str) -> str:
        start, stop, busy, worker = _FILES[path]
        return (f"{start - began:7.0f} {stop - began:7.0f} {busy:7.0f}  {worker:4}  "
                f"{'heavy ' if path in CPU_HEAVY else ''}{path}")

    terminalreporter.section("files that ended last (s from the first test)")
    write(f"{'start':>7} {'end':>7} {'in tests':>7}  worker")
    for path in sorted(_FILES, key=lambda p: -_FILES[p][1])[:10]:
        write(row(path))
    heavy = sorted((p for p in _FILES if p in CPU_HEAVY), key=lambda p: _FILES[p][0])
    if heavy:
        write("the CPU_HEAVY files, one at a time:")
        for path in heavy:
            write(row(path))
    write("the files with the most time in tests:")
    for path in sorted(_FILES, key=lambda p: -_FILES[p][2])[:12]:
        write(row(path))
    busy = _cpu_busy()
    if busy is not None and _CPU_AT_START:
        (busy0, total0), (busy1, total1) = _CPU_AT_START, busy
        write(f"host CPU busy {(busy1 - busy0) / max(total1 - total0, 1):.0%} of "
              f"{os.cpu_count()} cores over the session (/proc/stat)")


def _cpu_busy() -> tuple[int, int] | None:
    """The host's busy and total CPU ticks since boot (Linux), or None."""
    try:
        ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + ticks[4]  # idle and iowait
    return sum(ticks[:8]) - idle, sum(ticks[:8])


_CPU_AT_START = _cpu_busy()


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C raises KeyboardInterrupt in the test process however it was started: a
    non-interactive shell starts its `&` jobs with SIGINT ignored, and Python then installs no
    handler, so the tests that interrupt a run (tests/emu_cluster/test_interrupts.py) would
    interrupt nothing."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The test session's one local SparkSession (a JVM's start costs seconds on two cores, and
    Spark keeps one session per process anyway); folders that need more of it (a data source)
    extend it with a `spark` fixture of their own that requests this one."""
    pytest.importorskip("pyspark")
    from workloads.spark.session import spark_session

    session = spark_session("local[2]", "foglab-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def two_gateway_topology(name: str, devices: Mapping[str, tuple[int, Mapping[str, str]]],
                         uplink: str = "20ms", cloud_link: str = "1ms") -> dict:
    """Devices spread over two Pi 4 gateways in a field site, a broker and a small cloud VM in a
    cloud site: `devices` maps a group's name to its replicas and its link's properties."""
    links = [{"from": f"{group}-*", "to": "gw-*", "mode": "spread", **link}
             for group, (_, link) in devices.items()]
    return {
        "name": name,
        "sites": [{"name": "field"}, {"name": "cloud"}],
        "nodes": [*({"name": group, "kind": "device", "replicas": replicas}
                    for group, (replicas, _) in devices.items()),
                  {"name": "gw", "kind": "gateway", "profile": "rpi4", "replicas": 2,
                   "site": "field"},
                  {"name": "broker-1", "kind": "broker", "site": "cloud"},
                  {"name": "cloud-1", "kind": "cloud_vm", "profile": "vm.small",
                   "site": "cloud"}],
        "links": [*links, {"from": "gw-*", "to": "broker-1", "latency": uplink},
                  {"from": "broker-1", "to": "cloud-1", "latency": cloud_link}],
    }


def experiment_text(description: Mapping[str, Any]) -> str:
    """An experiment description (the file's blocks as a mapping) as the YAML a file holds."""
    return yaml.safe_dump(dict(description), sort_keys=False)


def catalog_description(name: str) -> dict:
    """A catalog experiment's file as a mapping, to change a block of before building it."""
    from experiments import catalog

    return yaml.safe_load(Path(catalog.experiment_path(name)).read_text())


def build_experiment(base: str | Mapping[str, Any], sets: Sequence[str] = (),
                     sweeps: Sequence[str] = ()):
    """A validated experiment: a catalog name, or a description mapping, with `--set KEY=VALUE`
    overrides and `--sweep`s, as the command line takes them."""
    from experiments.loader import load, parse_text

    if isinstance(base, str):
        return load(base, list(sets), list(sweeps))
    return parse_text(experiment_text(copy.deepcopy(dict(base))), overrides=list(sets),
                      sweeps=list(sweeps))
