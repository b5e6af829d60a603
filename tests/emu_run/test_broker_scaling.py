"""A spare broker joins a slow one on containers (scenario.broker_scaling,
emu.features.broker_scaling):
the host's probes through broker-1 stay over the bound, the operator's node subscribes on
broker-2 too and half the publishers move there, so broker-2 hands their readings to the
operator itself and broker-1 drains; nothing is lost at QoS 1."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from experiments.loader import parse_text
from experiments.runner import run_experiment
from experiments.schema import TABLES

pytestmark = [pytest.mark.emu, pytest.mark.slow]

RATE = 40  # readings/s per sensor: 400/s through broker-1
# broker-1 and broker-2 get 2 % of a core (CFS quota 2 ms per 100 ms period): broker-1's
# Mosquitto, throttled every period under 400 QoS 1 readings/s, answers a probe well over the
# 20 ms bound from the first second. The load follows the host's speed: at 500/s a slower host
# (2026-12-07) kept even the relieved brokers behind (a median of 2.7 to 3.1 s after the join,
# on this tree and the one before), at 400/s they drain (3 runs of 3 within the bound).
SCALING = f"""
name: broker-scaling-emu
topology:
  name: two-brokers
  profiles:
    weak: {{arch: amd64, cores: 1, clock: 2.4GHz, memory: 256MiB, speed: 0.02}}
  nodes:
    - {{name: a, kind: device, replicas: 5}}
    - {{name: b, kind: device, replicas: 5}}
    - {{name: gw, kind: gateway, replicas: 2, profile: vm.small}}
    - {{name: broker, kind: broker, replicas: 2, profile: weak}}
    - {{name: cloud, kind: cloud_vm, profile: vm.small}}
  links:
    - {{from: a-*, to: gw-1, latency: 1ms}}
    - {{from: b-*, to: gw-2, latency: 1ms}}
    - {{from: gw-*, to: broker-1, latency: 2ms}}
    - {{from: gw-1, to: broker-2, latency: 5ms}}
    - {{from: gw-2, to: broker-2, latency: 2ms}}
    - {{from: broker-1, to: broker-2, latency: 1ms}}
    - {{from: broker-*, to: cloud, latency: 2ms}}
workload:
  name: w
  streams:
    - {{name: s, sources: [a-*, b-*], rate: {RATE}/s, arrivals: periodic, size: 64B, qos: 1}}
pipeline:
  - {{name: count, on: cloud, reads: s}}
scenario:
  broker_scaling:
    - {{broker: broker-1, spare: broker-2, bound: 20ms, interval: 1s, probe: 100ms, up: 2,
       share: 0.5}}
run: {{backend: emu, duration: 12s, seed: 1, drain: 3s}}
"""


@pytest.fixture(scope="module")
def client():
    from engine import docker_engine

    return docker_engine()


def test_the_spare_joins_over_the_bound_takes_the_moved_readings_and_relieves_broker_1(
        tmp_path, client) -> None:
    (outcome,) = run_experiment(parse_text(SCALING), tmp_path)
    assert outcome.error is None, outcome.error
    folder = outcome.folder
    facts = json.loads((folder / "manifest.json").read_text())["facts"]
    (entry,) = facts["broker_scaling"]
    assert entry["errors"] == [], entry
    # Two intervals over the bound in a row, then the join: gw-2 moves (2 ms from broker-2,
    # gw-1 5). The throttled broker answers a second's probes in time now and then (6 ms once).
    assert entry["joined"] and entry["moved"] == ["gw-2"], entry
    figures = entry["probes"]
    assert [t for t, _ in figures[:3]] == [1.0, 2.0, 3.0]
    decided = next(i for i in range(1, len(figures))
                   if figures[i - 1][1] > 0.02 and figures[i][1] > 0.02)
    table = pq.read_table(folder / "replicas.parquet")
    assert table.schema.equals(TABLES["replicas"])
    (row,) = table.to_pylist()
    assert (row["operator"], row["action"], row["node"], row["instances"]) == (
        "broker-1", "broker_join", "broker-2", 2)
    assert row["latency"] == pytest.approx(figures[decided][1], abs=1e-6) and row["slo"] == 0.02
    # gw-2 switched once its drivers' session was up on the spare; the request went through
    # broker-1, backlogged (seconds, on a busy host).
    assert figures[decided][0] <= row["t"] < 12.0
    assert row["t"] == pytest.approx(entry["t_join"], abs=1e-3)
    # The spare received gw-2's readings from the join on (5 sensors at RATE; until the drivers
    # stop, after the run's 12 s once the request gets through broker-1's backlog), and handed
    # them to the operator: it has them all.
    assert 0.9 * 5 * RATE * (12 - row["t"]) <= entry["spare_received"] <= 5 * RATE * 15, entry
    messages = pq.read_table(folder / "messages.parquet").to_pandas()
    assert len(messages) >= 0.95 * 10 * RATE * 12 and not messages["lost"].any()
    after = messages[(messages["t_sent"] > row["t"] + 0.5)]
    assert set(after["source"].str[0]) == {"a", "b"}  # both gateways' readings reach it
    assert set(after["sink"]) == {"cloud"}
    # broker-1, relieved of gw-2's readings (the spare hands them to the counter itself, no
    # bridge back through broker-1), drains its backlog: gw-1's readings flow again (without
    # the join they wait 5 to 6 s at the median, benchmarks/broker_scaling_emu.py).
    settled = after[(after["source"].str[0] == "a") & (after["t_sent"] > row["t"] + 3.0)]
    assert len(settled) > 0 and settled["latency"].median() < 1.0, settled["latency"].describe()
