"""run.dilation: a number, `auto` from the calibrated model's predicted CPU demand, `real-speed`
from the profiles' speeds; and the calibrated model standing for the emulation at K."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.dilation import TARGET_PRESSURE, choose, predicted_demand
from experiments.loader import load
from experiments.model_settings import sim_settings
from sim.model import simulate
from topologies.errors import SpecError
from workloads.calibration import load as load_calibration


def point(*sets: str):
    found = load("experiments/quickstart.yaml", list(sets)).points[0]
    return found.spec, found.topology


def test_a_number_is_taken_as_it_is() -> None:
    spec, topology = point("run.dilation=3")
    assert choose(spec, topology).facts() == {"dilation": 3.0, "asked": 3.0}
    assert choose(*point()).dilation == 1.0


@pytest.mark.parametrize("value", ["0.5", "fast", "2000"])
def test_a_bad_dilation_is_refused_naming_the_field(value: str) -> None:
    with pytest.raises(SpecError, match=r"run\.dilation"):
        point(f"run.dilation={value}")


def test_real_speed_makes_a_qemu_gateway_as_fast_as_its_profile() -> None:
    spec, topology = point("run.dilation=real-speed")
    emulated = load_calibration("reference").calibration.gateway.speed
    choice = choose(spec, topology)
    assert choice.dilation == pytest.approx(0.45 / emulated, rel=1e-3)  # rpi4's speed
    assert choice.facts()["calibration"] == "reference"


def test_auto_keeps_the_predicted_demand_at_half_the_hosts_cores() -> None:
    spec, topology = point("run.dilation=auto")
    demand = predicted_demand(spec, topology, load_calibration("reference").calibration)
    # four gateways under QEMU, the broker, cloud-1's Spark job, the relays and the engine
    assert {"gw-1", "gw-4", "broker-1", "cloud-1", "relays", "engine"} <= set(demand)
    assert demand["cloud-1"] > demand["gw-1"] > demand["broker-1"] > 0
    for cores in (2, 8, 64):
        choice = choose(spec, topology, cores=cores)
        total = sum(demand.values())
        k = choice.dilation
        assert total / k <= TARGET_PRESSURE * cores + 1e-9
        # the smallest multiple of 1/2 that does
        assert k == 1.0 or total / (k - 0.5) > TARGET_PRESSURE * cores
    assert choose(spec, topology, cores=2).dilation >= 2.0  # the quickstart needs it here


def test_the_calibrated_model_stands_for_the_emulation_at_k() -> None:
    """At K the containers get K times the host's CPU per emulated second: the same work is a
    K times smaller share of a gateway's limit; the uncalibrated model ignores K."""
    spec, topology = point("run.calibration=reference")
    calibration = load_calibration("reference").calibration

    def gateway_cpu(dilation: float, calibrated: bool = True) -> float:
        settings = sim_settings(spec, duration=20.0, dilation=dilation,
                                calibration=calibration if calibrated else None)
        nodes = simulate(topology, spec.workload, spec.pipeline, settings).tables["nodes"]
        return float(np.mean(nodes["cpu"][nodes["node"] == "gw-1"]))

    plain, dilated = gateway_cpu(1.0), gateway_cpu(4.0)
    assert dilated == pytest.approx(plain / 4, rel=0.05)
    assert gateway_cpu(4.0, calibrated=False) == gateway_cpu(1.0, calibrated=False)
