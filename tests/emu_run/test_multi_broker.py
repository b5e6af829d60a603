"""Several brokers on emu: agents start behind each broker routing gives them, every node
starts, every device's readings reach a sink that talks to another broker, and the drivers'
counts balance the messages table (delivered + filtered + lost + unread + in flight =
emitted) as the model's do; generated topologies start every node and place and emit alike
on both backends (benchmarks/parity.py's generator, a few examples here)."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

from experiments.loader import parse_text
from experiments.results import load_run
from experiments.runner import run_experiment

pytestmark = [pytest.mark.emu, pytest.mark.slow]

DEVICES_PER_GATEWAY, RATE, DURATION = 2, 4.0, 6.0


def experiment(brokers: int) -> str:
    """A gateway behind each broker, its devices; a cloud VM sink behind the first broker."""
    uplinks = "\n".join(f"    - {{from: gw-{n}, to: broker-{n}, latency: 5ms}}"
                         for n in range(1, brokers + 1))
    return f"""
name: brokers-{brokers}
topology:
  name: brokers-{brokers}
  nodes:
    - {{name: s, kind: device, replicas: {DEVICES_PER_GATEWAY * brokers}}}
    - {{name: gw, kind: gateway, profile: vm.small, replicas: {brokers}}}
    - {{name: broker, kind: broker, replicas: {brokers}}}
    - {{name: core, kind: switch}}
    - {{name: cloud-1, kind: cloud_vm, profile: vm.small}}
  links:
    - {{from: s-*, to: gw-*, mode: spread, latency: 2ms}}
{uplinks}
    - {{from: broker-*, to: core, latency: 2ms}}
    - {{from: cloud-1, to: broker-1, latency: 1ms}}
workload:
  name: w
  streams:
    - {{name: city, sources: s-*, rate: {RATE}/s, arrivals: periodic, qos: 1}}
pipeline:
  - {{name: sink, on: cloud-1, reads: city}}
run: {{backend: sim, duration: {DURATION}s, seed: 5, drain: 2s}}
"""


@pytest.mark.parametrize("brokers", [2, 3])
def test_every_node_starts_and_every_device_is_heard_whatever_its_broker(
        brokers, tmp_path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the emulation needs root")
    pytest.importorskip("docker")
    folders = {}
    for backend in ("sim", "emu"):
        loaded = parse_text(experiment(brokers), overrides=[f"run.backend={backend}"])
        (outcome,) = run_experiment(loaded, tmp_path / backend, sweep_id=backend)
        assert outcome.error is None, f"{backend}: {outcome.error}"
        assert outcome.status == "ok", f"{backend}: {outcome.failed_summary()}"
        folders[backend] = outcome.folder
    emu, sim = load_run(folders["emu"]), load_run(folders["sim"])
    devices = {f"s-{i}" for i in range(1, DEVICES_PER_GATEWAY * brokers + 1)}
    counts = emu.manifest["facts"]["messages"]
    # Every device emitted, on each of the brokers, and its readings reached the sink.
    assert set(counts["emitted_by_device"]) == devices
    assert all(count > 0 for count in counts["emitted_by_device"].values())
    delivered = emu.messages[emu.messages["state"] == "delivered"]
    assert set(delivered["source"]) == devices
    assert set(delivered["sink"]) == {"cloud-1"}
    # The balance, exactly: the records say where every emitted reading went.
    assert counts["emitted"] == sum(counts["emitted_by_device"].values())
    assert (counts["received"] + counts["filtered"] + counts["dropped"] + counts["lost"]
            + counts["unread"] + counts["in_flight"]) == counts["emitted"]
    # A row for each: delivered, lost, or kept back (filtered by an operator, or unread).
    assert len(emu.messages) == (counts["received"] + counts["dropped"] + counts["lost"]
                                 + counts["filtered"] + counts["unread"])
    # The model's: nothing filtered here, so what is neither delivered nor lost is in flight.
    emitted = sim.manifest["facts"]["emitted"]
    in_flight = emitted - len(sim.messages)
    assert 0 <= in_flight <= DEVICES_PER_GATEWAY * brokers
    # The same workload on both: each periodic device emits rate x duration readings, give
    # or take the one at the end an emulated scheduler may let slip past it.
    assert abs(counts["emitted"] - emitted) <= len(devices)
    by_device = sim.manifest["facts"]["emitted_by_device"]
    assert sum(by_device.values()) == emitted and set(by_device) == devices
    assert all(abs(by_device[d] - counts["emitted_by_device"][d]) <= 1 for d in devices)


def _parity():
    """benchmarks/parity.py, whose generator and checks this test shares."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "parity.py"
    spec = importlib.util.spec_from_file_location("benchmarks_parity", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its dataclasses look their module up by name
    return module


parity = _parity()


@seed(31)
# Besides the drawn ones, always: three brokers, Pis under QEMU behind the sink's broker and
# VMs behind another, a filter on every gateway before the sink.
@example(rng=random.Random(17))
@settings(max_examples=1, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_generated_topologies_start_every_node_alike_on_both_backends(
        rng, tmp_path_factory) -> None:
    """One to three brokers, one to three gateway groups of mixed profiles, devices spread or
    pinned, links with latency and jitter, one or two operators (benchmarks/parity.py draws
    them): every node starts on emu, and every device is on the same gateway and broker and
    emits the same readings on sim and emu."""
    if os.geteuid() != 0:
        pytest.skip("the emulation needs root")
    pytest.importorskip("docker")
    document = parity.experiment(rng)
    print(parity.shape(document))
    checked = parity.check(document, tmp_path_factory.mktemp("parity"))
    assert checked.ok, checked.line()
