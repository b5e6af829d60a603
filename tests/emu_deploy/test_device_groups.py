"""Devices that link to no gateway (as topologies/thesis-azure.yaml's producers): their group
runs in a container of its own, linked to the broker by the link layer, and delivers."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from experiments.loader import parse_text
from experiments.runner import run_experiment
from tests.engine import docker_engine
from tests.foundation.helpers import arrivals_per_window

HOP_MS = 10  # each link's latency: device to switch, switch to broker, and back to the VM

THESIS_LIKE = f"""
name: thesis-like
topology:
  name: thesis-like
  nodes:
    - {{name: producer, kind: device, replicas: 2, profile: vm.small}}
    - {{name: broker, kind: broker, profile: vm.small}}
    - {{name: vm, kind: cloud_vm, profile: vm.small}}
    - {{name: datacentre, kind: switch}}
  links:
    - {{from: [producer-*, broker, vm], to: datacentre, latency: {HOP_MS}ms}}
workload:
  name: events
  streams: [{{name: events, sources: producer-*, rate: 20/s, arrivals: periodic, size: 100B,
              qos: 1}}]
pipeline:
  - {{name: count, task: passthrough, on: vm, reads: events, window: {{size: 2s}}}}
run: {{backend: BACKEND, duration: 9s, seed: 4, drain: 2s}}
"""


def test_the_plan_puts_the_group_in_one_cloud_container_linked_from_its_device() -> None:
    from emu.cluster.deployment import agent_configs
    from emu.cluster.plan import plan_cluster
    from emu.images import CLOUD

    run_point = parse_text(THESIS_LIKE.replace("BACKEND", "emu")).points[0]
    configs = agent_configs(run_point.topology, run_point.spec.workload,
                            run_point.spec.pipeline, 4, 0.0)
    plan = plan_cluster(run_point.topology, "tl", agents=configs, host_cpus=2)
    group = plan.containers["producer"]
    assert (group.role, group.kind, group.image, group.agent.kind) == (
        "agent", "device", CLOUD, "device")
    assert group.nano_cpus == 2 * 10**9  # two vm.small's cores, capped at the host's two
    assert [d for driver in group.agent.drivers for d in driver.devices] == [
        "producer-1", "producer-2"]
    link = plan.link("producer", "broker")
    assert link.path == ("producer-1", "datacentre", "broker")
    assert link.shape.latency_s == pytest.approx(2 * HOP_MS / 1000)
    assert group.labels["foglab.broker"] == "broker"
    # Status tables read like the topology file: the group where its devices are.
    assert list(plan.containers)[:3] == ["producer", "broker", "vm"]


@pytest.mark.emu
def test_producers_on_a_switch_deliver_to_a_window_count_on_a_cloud_vm(tmp_path) -> None:
    docker_engine()
    folders = {}
    for backend in ("sim", "emu"):
        experiment = parse_text(THESIS_LIKE.replace("BACKEND", backend))
        (outcome,) = run_experiment(experiment, tmp_path / backend)
        assert outcome.error is None, outcome.error
        folders[backend] = outcome.folder
    messages = {b: pq.read_table(f / "messages.parquet").to_pandas() for b, f in folders.items()}
    emu = messages["emu"]
    facts = json.loads((folders["emu"] / "manifest.json").read_text())["facts"]
    assert facts["messages"]["sent"] >= 2 * 20 * 8, facts["messages"]
    assert not emu["lost"].any() and facts["messages"]["duplicated"] == 0
    assert set(emu["source"]) == {"producer-1", "producer-2"} and set(emu["sink"]) == {"vm"}
    # producer -> datacentre -> broker -> datacentre -> vm, on both backends
    assert set(emu["hops"]) == set(messages["sim"]["hops"]) == {4}
    # The link layer holds each message on both paths: 2 x 20 ms at least. (No bound above:
    # a loaded host only adds; the links' accuracy is benchmarks/link_accuracy.py's.)
    assert emu["latency"].min() >= 4 * HOP_MS / 1000 - 0.002
    # Each window counted what reached the VM in its span, as the VM's records say (not 80
    # +- a margin: a loaded host bunches arrivals across a window's edge; CI counted one full
    # window outside 76-84), and the windows together counted every message that arrived
    # before the last one closed.
    windows = pq.read_table(folders["emu"] / "windows.parquet").to_pandas()
    got = arrivals_per_window(windows, emu, 2.0)
    assert len(got) >= 4 and all(count == arrived for _, count, arrived in got), got
    assert [w for w, *_ in got] == list(range(len(got)))  # each 2 s window once, in order
    assert windows["count"].sum() == (emu["t_received"] < 2.0 * len(got)).sum()
    nodes = pq.read_table(folders["emu"] / "nodes.parquet").to_pandas()
    assert "producer" in set(nodes["node"])  # the group's container, sampled
