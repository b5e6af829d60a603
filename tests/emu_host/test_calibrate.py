"""`foglab calibrate --quick` on real containers: a valid profile with plausible figures, and
nothing left running, also when interrupted."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from emu.agent.operators import WIRE_TASKS
from emu.host.calibrate import LABEL, SHAPED_LATENCY_S, calibrate
from workloads.calibration import Calibration, load, write
from workloads.riot.tasks import TASKS

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.emu, pytest.mark.slow]


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    if os.geteuid() != 0:
        pytest.skip("the emulation needs root")
    docker = pytest.importorskip("docker", reason="the docker SDK is not installed")
    from emu.engines.docker.image_store import DOCKER_TIMEOUT_S

    try:
        engine = docker.from_env(timeout=DOCKER_TIMEOUT_S)
        engine.ping()
    except Exception as failure:  # noqa: BLE001 - no engine, whatever the reason
        pytest.skip(f"no Docker Engine: {failure}")
    return engine


def left_behind(client: docker.DockerClient) -> list[str]:
    """Containers of a calibration, and relay threads of this process, still there."""
    containers = [c.name for c in client.containers.list(all=True, filters={"label": LABEL})]
    relays = [t.name for t in threading.enumerate() if t.name == "link-relay"]
    return containers + relays


@pytest.fixture(scope="module")
def measured(client: docker.DockerClient,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Calibration, list[str]]:
    steps: list[str] = []
    profile = calibrate(quick=True, progress=lambda what, done, total: steps.append(what),
                        client=client)
    path = write(profile, tmp_path_factory.mktemp("calibrations") / "quick.yaml")
    return load(str(path)).calibration, steps


def test_the_profile_is_valid_and_names_its_host(measured, client) -> None:
    profile, steps = measured
    assert profile.quick
    assert datetime.now(UTC) - profile.measured < timedelta(hours=1)
    assert profile.host.cores == os.cpu_count()
    assert profile.host.qemu != "unknown" and profile.host.docker != "unknown"
    assert profile.gateway.image.startswith("foglab/gateway:")
    assert profile.broker.image.startswith("foglab/services:")
    assert profile.gateway.profile == "rpi4-qemu"
    for where in ("host (native)", "gateway (arm64, QEMU)", "broker", "links", "spark"):
        assert any(step.startswith(where) for step in steps), where
    assert left_behind(client) == []


def test_every_task_costs_more_under_qemu_than_natively(measured) -> None:
    profile, _ = measured
    gateway, native = profile.gateway, profile.native
    assert sorted(gateway.tasks) == sorted(native.tasks) == sorted(TASKS)
    assert set(gateway.operators) == set(native.operators) >= {"passthrough", "range_filter"}
    assert gateway.speed < native.speed
    for task in TASKS:
        assert 1e-7 < native.tasks[task] < gateway.tasks[task] < 0.05, task
    for task, seconds in gateway.operators.items():
        assert native.operators[task] < seconds < 0.05, task
        if task in TASKS and task not in WIRE_TASKS:
            # The agent decodes the body and encodes the outputs around the task.
            assert seconds > gateway.tasks[task], task
    assert native.driver < gateway.driver < 0.05


def test_the_broker_and_the_links_are_plausible(measured) -> None:
    profile, _ = measured
    broker, links = profile.broker, profile.links
    for seconds in (broker.service_time, broker.burst_service_time, broker.qos1_service_time):
        assert 1e-7 < seconds < 5e-3
    assert broker.burst_throughput > 100
    assert links.shaper in ("relay", "netem") and links.latency == SHAPED_LATENCY_S
    directions = 2 if links.shaper == "relay" else 1
    # The shaper holds each message at least its latency, and adds little of its own.
    assert links.shaped > links.direct + 0.9 * directions * links.latency
    assert 0 <= links.hop_overhead < 0.02


def test_an_interrupt_leaves_nothing_running(client, tmp_path: Path) -> None:
    def interrupt(what: str, done: float, total: float) -> None:
        if what.startswith("gateway"):  # its container runs, as does the broker's
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        calibrate(quick=True, progress=interrupt, client=client)
    assert left_behind(client) == []


def test_spark_costs_a_measured_cpu_per_batch_and_leaves_no_job(measured) -> None:
    import psutil

    spark = measured[0].spark
    assert spark.measured and spark.app == "stats" and spark.trigger == 1.0
    # A young JVM plans, schedules and JIT-compiles each batch: tenths of a second to seconds.
    assert 0.01 < spark.batch < 10.0
    assert 0.0 <= spark.message < 0.05
    jobs = [p for p in psutil.process_iter(["cmdline"])
            if "workloads.spark.job" in " ".join(p.info["cmdline"] or [])
            and any("calibrate/spark/" in part for part in p.info["cmdline"] or [])]
    assert jobs == []

