"""Fixtures for the standalone-cluster tests: one Spark master and two workers per module, a
real Mosquitto on loopback, and the job run as a process on the cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.spark_requirements import missing
from workloads.spark.local_broker import LocalMosquitto

if (_reason := missing()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from workloads.spark.standalone import (  # noqa: E402
    StandaloneCluster,
    WorkerPorts,
    free_ports,
)

JOB_START_S = 240.0  # a cold driver and two cold executors on a loaded two-core host


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """1 master and 2 workers of 1 core and 512m each."""
    ports = free_ports(6)
    workers = [WorkerPorts(ports[2], ports[3]), WorkerPorts(ports[4], ports[5])]
    with StandaloneCluster(tmp_path_factory.mktemp("cluster"), ports[0], ports[1], workers,
                           cores=1, memory="512m") as running:
        yield running


@pytest.fixture(scope="module")
def broker() -> Iterator[LocalMosquitto]:
    with LocalMosquitto() as running:
        yield running


class JobProcess:
    """`python -m workloads.spark.job` as a process; its log in `<work>/job.log`."""

    def __init__(self, args: list[str], work: Path) -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.log = work / "job.log"
        with self.log.open("ab") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "workloads.spark.job", *args,
                                             "--work", str(work)],
                                            stdout=out, stderr=subprocess.STDOUT)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def read(self) -> int:
        """The messages the query has read and committed so far (progress.jsonl)."""
        progress = self.work / "progress.jsonl"
        if not progress.exists():
            return 0
        lines = [json.loads(line) for line in progress.read_text().splitlines() if line]
        return max((line["read"] or 0 for line in lines), default=0)

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"the job exited ({self.process.returncode}) before "
                                     f"{what}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}:\n"
                                     f"{self.tail()}")
            time.sleep(0.2)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()
