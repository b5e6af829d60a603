"""An emulated run keeps its data through a dead gateway and a broker restart (real containers,
Mosquitto, ZooKeeper; faults injected through the engine's API)."""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path

import pytest

from emu.engines.docker.faults import Fault
from experiments.loader import parse_text
from experiments.results import load_run
from experiments.runner import run_experiment
from experiments.schema import TABLES

pytestmark = [pytest.mark.emu, pytest.mark.slow]

DEVICES, RATE, DURATION = 4, 5.0, 20.0  # per gateway; msg/s per device; s
FAULT_AT = 6.0  # s after the devices start


def experiment(topology: str, qos: int) -> str:
    """Three gateways, each with its own devices; every message goes to the cloud's sink."""
    return f"""
name: faults
topology:
  name: {topology}
  sites: [{{name: field}}, {{name: cloud}}]
  nodes:
    - {{name: a, kind: device, replicas: {DEVICES}}}
    - {{name: b, kind: device, replicas: {DEVICES}}}
    - {{name: c, kind: device, replicas: {DEVICES}}}
    - {{name: gw-1, kind: gateway, profile: rpi4, site: field}}
    - {{name: gw-2, kind: gateway, profile: rpi4, site: field}}
    - {{name: gw-3, kind: gateway, profile: rpi4, site: field}}
    - {{name: broker-1, kind: broker, site: cloud}}
    - {{name: cloud-1, kind: cloud_vm, profile: vm.small, site: cloud}}
  links:
    - {{from: a-*, to: gw-1, latency: 5ms}}
    - {{from: b-*, to: gw-2, latency: 5ms}}
    - {{from: c-*, to: gw-3, latency: 5ms}}
    - {{from: gw-*, to: broker-1, latency: 10ms}}
    - {{from: broker-1, to: cloud-1, latency: 1ms}}
workload:
  name: w
  streams:
    - {{name: city, sources: [a-*, b-*], rate: {RATE}/s, arrivals: periodic, qos: {qos}}}
    - {{name: spare, sources: c-*, rate: {RATE}/s, arrivals: periodic, qos: 0}}
pipeline:
  - {{name: relay, task: passthrough, on: gateways, reads: [city, spare], writes: clean}}
  - {{name: sink, task: passthrough, on: cloud-1, reads: clean}}
run: {{backend: emu, duration: {DURATION}s, seed: 5, drain: 3s}}
"""


def run_with_fault(tmp_path: Path, node: str, action: str, qos: int):
    """Run the experiment with `action` on `node` FAULT_AT s in; the run and the fault."""
    if os.geteuid() != 0:
        pytest.skip("the emulation needs root")
    docker = pytest.importorskip("docker")
    client = docker.from_env()
    topology = f"faults-{secrets.token_hex(3)}"
    fault = Fault(client, node, action, FAULT_AT, topology=topology)
    fault.start()
    try:
        (outcome,) = run_experiment(parse_text(experiment(topology, qos)), tmp_path,
                                    sweep_id=action)
    finally:
        fault.cancel()
        fault.join(30)
    assert fault.error is None, fault.error
    assert fault.done is not None, "the fault was not injected before the run ended"
    return load_run(outcome.folder), outcome, fault, client


def assert_every_table_written(folder: Path) -> None:
    missing = [name for name in TABLES if not (folder / f"{name}.parquet").exists()]
    assert not missing, f"tables not written: {missing}"


def assert_nothing_left(client, cluster: str, records: str) -> None:
    label = f"foglab.cluster={cluster}"
    assert client.containers.list(all=True, filters={"label": label}) == []
    assert client.networks.list(filters={"label": label}) == []
    assert not Path(records).exists()
    relays = [t.name for t in threading.enumerate() if t.name == f"relays-{cluster}"]
    assert relays == [], "the run's relay thread is still running"


def test_a_killed_gateway_fails_alone_and_the_run_keeps_everything_else(tmp_path) -> None:
    run, outcome, fault, client = run_with_fault(tmp_path, "gw-2", "kill", qos=1)
    manifest = run.manifest
    assert manifest["status"] == "degraded", manifest.get("error")
    assert outcome.error is None
    assert set(manifest["failed_nodes"]) == {"gw-2"}
    assert "container exited" in manifest["failed_nodes"]["gw-2"]
    assert_every_table_written(outcome.folder)

    messages = run.table("messages")
    received = messages[messages["state"] == "delivered"]
    per_gateway = received["source"].str[0].value_counts()
    expected = DEVICES * RATE * DURATION
    # The healthy gateways' messages, each once (QoS 1, no loss on their links).
    for group in ("a", "c"):
        assert per_gateway.get(group, 0) == pytest.approx(expected, rel=0.05), per_gateway
    # The dead gateway's messages until the kill are kept (it flushed them every second).
    killed_at = fault.done - (manifest["facts"]["epoch"])
    assert DEVICES * RATE * (killed_at - 2.5) <= per_gateway.get("b", 0) < expected * 0.9
    assert run.table("nodes").query("node == 'gw-2'")["up"].eq(False).any()
    assert_nothing_left(client, fault.cluster, manifest["facts"]["records"])


def test_a_broker_restart_loses_qos_0_messages_and_no_qos_1_message(tmp_path) -> None:
    """One restart, two streams: QoS 1 (a, b) carried over it by persistent sessions, QoS 0
    (c) losing what the broker was away for, so the QoS 1 half can fail."""
    run, outcome, fault, client = run_with_fault(tmp_path, "broker-1", "restart", qos=1)
    manifest = run.manifest
    assert manifest["status"] == "ok", (manifest.get("error"), manifest.get("failed_nodes"))
    assert_every_table_written(outcome.folder)
    facts = manifest["facts"]
    (outage,) = facts["outages"]["broker-1"]
    assert outage[1] is not None and outage[1] > outage[0]
    assert facts["messages"]["dropped"] == 0, facts["messages"]
    messages = run.table("messages")
    qos1 = messages[messages["stream"] == "city"]
    qos0 = messages[messages["stream"] == "spare"]
    assert len(qos1) == pytest.approx(2 * DEVICES * RATE * DURATION, rel=0.05)
    assert not qos1["lost"].any() and not qos1["id"].duplicated().any()
    # At least half a second of the QoS 0 devices' readings went while the broker was away.
    assert qos0["lost"].sum() > DEVICES * RATE * 0.5, qos0["lost"].sum()
    assert (~qos0["lost"]).sum() > 0.5 * len(qos0)
    assert_nothing_left(client, fault.cluster, facts["records"])
