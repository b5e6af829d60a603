"""A calibrated node's `cpu` is a share of the CPU limit the emulation gives its container (issue
27, 3c): the model queues a gateway's agent on one core, but emu.host.metrics divides the
container's CPU by its limit, min(4, host cores) for an rpi4 gateway under QEMU."""

from __future__ import annotations

import numpy as np
import pytest

from emu.cluster.plan import plan_cluster
from experiments.loader import load
from experiments.model_settings import sim_settings
from sim.costs import CONTAINERS, Costs
from sim.model import simulate
from workloads.calibration import load as load_calibration

CALIBRATION = load_calibration("reference").calibration


def quickstart(calibrated: bool):
    sets = ["run.duration=20s", "run.drain=5s"]
    if calibrated:
        sets.append("run.calibration=reference")
    (run_point,) = load("quickstart", sets, []).points
    return run_point


def test_the_share_is_of_the_emulations_container_limit() -> None:
    run_point = quickstart(True)
    topology = run_point.topology
    costs = Costs(topology, run_point.spec.run.driver_cost, CALIBRATION)
    plan = plan_cluster(topology, "share", host_cpus=CALIBRATION.host.cores)
    for name, node in topology.nodes.items():
        if node.kind not in CONTAINERS:
            continue
        cpu = costs.cpu(node)
        limit = plan.containers[name].nano_cpus / 1e9
        # The limit in host cores, as the model's CPU counts them: host seconds per second.
        per_host = 1.0 if node.kind in ("gateway", "broker") else cpu.speed
        assert cpu.capacity * per_host == pytest.approx(limit, rel=1e-6), name
    assert costs.cpu(topology.nodes["gw-1"]).capacity == 2  # rpi4's 4 cores, on 2 host cores


def test_a_calibrated_gateway_reports_its_share_of_two_cores_and_spends_the_same() -> None:
    run_point = quickstart(True)
    result = simulate(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                      sim_settings(run_point.spec, calibration=CALIBRATION))
    nodes = result.tables["nodes"]
    gw = (np.asarray(nodes["node"]) == "gw-1") & (np.asarray(nodes["t"]) <= 20)
    share = float(np.asarray(nodes["cpu"])[gw].mean())
    # 50 readings/s at the calibrated driver (2.15 ms) and range filter (481 us) per reading,
    # on host cores: 0.13 of a core, 0.066 of the container's two.
    per_reading = CALIBRATION.gateway.driver + CALIBRATION.gateway.operators["range_filter"]
    assert share == pytest.approx(50 * per_reading / 2, rel=0.1)


def test_without_a_calibration_the_share_is_of_the_nodes_own_cores() -> None:
    run_point = quickstart(False)
    costs = Costs(run_point.topology, run_point.spec.run.driver_cost, None)
    for node in run_point.topology.nodes.values():
        if node.kind in CONTAINERS:
            cpu = costs.cpu(node)
            assert cpu.capacity == cpu.cores == node.profile.cores
