"""scenario.energy's emulation part (emu.features.energy) on the tables an emulated run
writes, given here (no containers): a container's CPU share turned into the emulated node's
utilisation through its limit and the calibration's QEMU speed, the links' and devices'
energy, the facts."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from emu.features import FEATURES
from emu.features.energy import EnergyFeature
from tests.foundation.helpers import point
from tests.sim.test_energy import text
from workloads.calibration import load
from workloads.energy_power import PI4B, RADIO_J_PER_BIT, SENSOR, VCPU, WAN_J_PER_BIT


def test_an_emulated_runs_tables_become_the_energy_table() -> None:
    run_point = point(text(), overrides=["run.backend=emu"])
    spec = run_point.spec.scenario.energy
    assert FEATURES["energy"] is EnergyFeature
    # gw: an arm64 gateway under QEMU, limited to 2 host cores; broker: vm.medium natively
    # (2 vCPUs of speed 1: 2 cores); vm: vm.small (1 core). 10 samples of 1 s each.
    containers = {"gw": 2e9, "broker": 2e9, "vm": 1e9}
    run = SimpleNamespace(
        topology=run_point.topology, workload=run_point.spec.workload,
        plan=SimpleNamespace(containers={n: SimpleNamespace(nano_cpus=int(c))
                                         for n, c in containers.items()}),
        timing=SimpleNamespace(duration=10.0, sample=1.0),
        messages={"state": np.array(["delivered"] * 9 + ["lost"], dtype=object)})
    t = [float(k) for k in range(1, 11)]
    # The vm's samples as the emulation's sampler takes them: irregular, the first at 1.1 s
    # (it spans from 0.1 s), the last past the run's end (cut at 10 s): 9.9 s in all.
    late = [k + 0.1 for k in range(1, 10)] + [10.4]
    shares = {"gw": 0.5, "broker": 0.25, "vm": 0.1}
    tables = {"nodes": {"t": t * 2 + late, "node": [n for n in shares for _ in t],
                        "cpu": [shares[n] for n in shares for _ in t]},
              "links": {"t": t + [10.0], "src": ["gw"] * 10 + ["gw"],
                        "dst": ["broker"] * 10 + ["zookeeper"], "bytes": [100] * 10 + [999]}}
    facts = {"emitted_by_device": {"dev": 10}}
    EnergyFeature(spec).results(run, tables, facts)
    speed = load("reference").calibration.gateway.speed
    u_gw = 0.5 * 2 * speed / (4 * 0.45)  # 2 host cores at the QEMU speed, of 4 Pi cores
    gateway = 10 * (PI4B[0] + (PI4B[1] - PI4B[0]) * u_gw)
    broker = 10 * 2 * (VCPU[0] + (VCPU[1] - VCPU[0]) * 0.25)
    vm = 9.9 * (VCPU[0] + (VCPU[1] - VCPU[0]) * 0.1)
    device = SENSOR[0] * 10 + 10 * 800 * RADIO_J_PER_BIT
    energy = facts["energy"]
    assert energy["by_node"] == pytest.approx(
        {"gw": gateway, "broker": broker, "vm": vm, "dev": device}, rel=1e-12)
    assert energy["by_kind"]["wan"] == pytest.approx(8000 * WAN_J_PER_BIT, rel=1e-12)
    assert energy["by_kind"]["wireless"] == pytest.approx(8000 * 300e-9, rel=1e-9)
    assert energy["delivered"] == 9 and energy["calibration"] == "reference"
    assert energy["cost"]["egress"] == pytest.approx({"edge": 1000 / 1e9 * 0.09})
    table = tables["energy"]
    gw = table["node"] == "gw"
    assert np.allclose(table["utilisation"][gw], u_gw) and gw.sum() == 10
    vm_rows = table["node"] == "vm"
    assert table["t_start"][vm_rows][0] == pytest.approx(0.1)
    assert table["t_end"][vm_rows][-1] == 10.0
    assert float(np.sum(table["joules"])) == pytest.approx(energy["total_j"], rel=1e-12)


TWO_GATEWAYS = """
name: two
topology:
  name: two
  nodes:
    - {name: sensor, kind: device, replicas: 2}
    - {name: gw, kind: gateway, replicas: 2, profile: rpi4}
    - {name: broker, kind: broker}
    - {name: cloud-1, kind: cloud_vm}
  links:
    - {from: sensor-1, to: gw-1}
    - {from: sensor-2, to: gw-2}
    - {from: gw-*, to: broker}
    - {from: broker, to: cloud-1}
workload:
  name: w
  streams: [{name: s, sources: sensor-*, rate: 1/s}]
pipeline:
  - {name: filter, task: passthrough, on: gw-*, reads: s}
scenario:
  energy:
    offload: {gateways: gw-1, joules: 40, to: cloud-1, strategy: pause_drain}
run: {backend: BACKEND, duration: 5s}
"""


@pytest.mark.parametrize("backend", ["emu", "hybrid"])
def test_on_containers_an_offload_of_an_operator_on_several_nodes_is_refused(backend) -> None:
    from topologies.errors import SpecError

    point(TWO_GATEWAYS.replace("BACKEND", "sim"))  # the model moves them in turn
    text = TWO_GATEWAYS.replace("BACKEND", backend)
    if backend == "hybrid":
        text = text.replace("scenario:\n", "scenario:\n  mobility: {model: {kind: "
                            "random_waypoint}}\n")
    with pytest.raises(SpecError) as caught:
        point(text)
    assert ("scenario.energy.offload.gateways: on emu, gateways whose operators run on one "
            "node each: filter runs on 2 (gw-1, gw-2)") in str(caught.value)
