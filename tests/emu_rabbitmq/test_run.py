"""A quickstart-sized experiment on emu whose broker is RabbitMQ (`kind: rabbitmq`): the gateways'
agents, the controller and the cloud VM reach it as they reach Mosquitto, every reading the
radios did not lose arrives once, and the cluster goes whole."""

from __future__ import annotations

import json
import os

import pytest

from experiments.loader import parse_text
from experiments.results import load_run
from experiments.runner import run_experiment

pytestmark = [pytest.mark.emu, pytest.mark.slow]

DEVICES, RATE, DURATION, RADIO_LOSS = 6, 4.0, 10.0, 0.05
EXPERIMENT = f"""
name: rabbitmq-small
topology:
  name: rabbitmq-small
  sites: [{{name: field}}, {{name: cloud}}]
  nodes:
    - {{name: s, kind: device, replicas: {DEVICES}}}
    - {{name: gw, kind: gateway, profile: rpi4, replicas: 2, site: field}}
    - {{name: broker-1, kind: broker, profile: vm.small, site: cloud, broker: {{kind: rabbitmq}}}}
    - {{name: cloud-1, kind: cloud_vm, profile: vm.small, site: cloud}}
  links:
    - {{from: s-*, to: gw-*, mode: spread, latency: 5ms, loss: {RADIO_LOSS}}}
    - {{from: gw-*, to: broker-1, latency: 20ms}}
    - {{from: broker-1, to: cloud-1, latency: 1ms}}
workload:
  name: w
  streams: [{{name: city, sources: s-*, rate: {RATE}/s, arrivals: periodic, qos: 1}}]
pipeline:
  - {{name: filter, task: passthrough, on: gateways, reads: city, writes: clean}}
  - {{name: sink, task: passthrough, on: cloud-1, reads: clean}}
run: {{backend: emu, duration: {DURATION}s, seed: 5, drain: 2s}}
"""


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory):
    if os.geteuid() != 0:
        pytest.skip("the emulation needs root")
    docker = pytest.importorskip("docker")
    (outcome,) = run_experiment(parse_text(EXPERIMENT), tmp_path_factory.mktemp("results"),
                                sweep_id="rabbitmq")
    assert outcome.error is None, outcome.error
    manifest = json.loads((outcome.folder / "manifest.json").read_text())
    return load_run(outcome.folder), manifest, docker.from_env()


def test_every_reading_the_radios_kept_arrives_once(emulated) -> None:
    run, manifest, _ = emulated
    counts = manifest["facts"]["messages"]
    sent = counts["sent"]
    assert sent == pytest.approx(DEVICES * RATE * DURATION, rel=0.1)
    # The radios drop about 5 % (`dropped`: 12 of 240 expected), the broker none (`lost`).
    assert 0 < counts["dropped"] <= 4 * RADIO_LOSS * sent
    assert counts["received"] == sent - counts["dropped"]
    assert counts["lost"] == counts["duplicated"] == counts["in_flight"] == 0
    messages = run.table("messages")
    arrived = messages[~messages["lost"]]
    assert len(arrived) == counts["received"] and arrived["id"].is_unique
    assert set(arrived["sink"]) == {"cloud-1"}
    # Device -> gateway -> broker -> cloud: 26 ms of links at least.
    assert arrived["latency"].min() >= 0.026 - 0.002


def test_the_broker_was_rabbitmq(emulated) -> None:
    run, _, _ = emulated
    nodes = run.table("nodes")
    broker = nodes[nodes["node"] == "broker-1"]
    assert broker["up"].all()
    # An Erlang node with the MQTT plugin holds about 100 MiB; Mosquitto a few MiB.
    assert broker["memory"].median() > 60 * 1024**2


def test_nothing_is_left(emulated) -> None:
    _, manifest, client = emulated
    label = f"foglab.cluster={manifest['facts']['cluster']}"
    assert client.containers.list(all=True, filters={"label": label}) == []
    assert client.networks.list(filters={"label": label}) == []
