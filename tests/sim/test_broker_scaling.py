"""scenario.broker_scaling on sim: a spare broker joins a watched one whose probes stay over
the bound for `up` intervals, a share of the watched broker's publishers (gateways' drivers,
devices publishing straight to it) publish to the spare from then on, nothing is lost, and
the latency falls back; the spare is nobody's broker before."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from experiments import catalog
from experiments.loader import load
from experiments.model_settings import sim_settings
from experiments.schema import conform
from sim.model import Model
from tests.foundation.helpers import assert_tables_equal, point
from workloads.replication import percentile

EXPERIMENT = "broker-scaling"


def command(latency: float) -> float:
    """The coordinator's command to a mover (broker-1's node: the first broker, with no
    coordinator in the topology) at `latency` from it: there and back, and
    MigrationSettings.command's 10 ms."""
    return 2 * latency + 0.010


def simulate(run_point) -> tuple[Model, object, list[tuple[float, int]]]:
    """The model, its result, and the spare's count of received messages at each progress
    step (whole seconds: the run's step is its sample)."""
    model = Model(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                  sim_settings(run_point.spec))
    counts: list[tuple[float, int]] = []
    result = model.run(progress=lambda t: counts.append((t, model.brokers["broker-2"]
                                                         .received)))
    conform(result.tables)  # every table passes the schema's checks
    return model, result, counts


def frame(result) -> pd.DataFrame:
    return pd.DataFrame(result.tables["messages"])


def p95(messages: pd.DataFrame, start: float, end: float) -> float:
    sent = messages[(messages["t_sent"] >= start) & (messages["t_sent"] < end)]
    return percentile(list(sent["latency"]))


@pytest.fixture(scope="module")
def ramp():
    return simulate(load(EXPERIMENT).points[0])


def test_the_spare_joins_up_intervals_after_the_broker_saturates(ramp) -> None:
    model, result, _ = ramp
    spec = model.settings.scenario["broker_scaling"][0]
    stream = load(EXPERIMENT).points[0].spec.workload.streams[0]
    # broker-1's utilisation under the ramp: every reading once and every probe, each at the
    # service time on one core of speed 1; it passes 1 at 9 s (at 10 s without the probes).
    shape, devices = stream.shape, 10
    service = model.topology.nodes["broker-1"].broker.service_time
    slope = (shape.high - shape.low) / shape.period
    probes = service / spec.probe
    t_full = ((1 - probes) / (devices * float(stream.rate) * service) - shape.low) / slope
    assert t_full == pytest.approx(9.0)
    (entry,) = result.facts["broker_scaling"]
    assert entry["joined"] and entry["moved"] == ["gw-2"]  # the nearer to broker-2
    figures = dict(map(tuple, entry["probes"]))
    # Over the bound from the interval after the one the queue starts to grow in (it takes
    # a while to pass 20 ms), and `up` of them in a row: decided at 12 s.
    decided = 12.0
    assert t_full + spec.up * spec.interval <= decided
    assert decided <= t_full + (spec.up + 1) * spec.interval + 1e-9
    # gw-2 switches when the coordinator's command to it (2 ms from broker-1) is done.
    assert entry["t_join"] == pytest.approx(decided + command(0.002))
    assert entry["errors"] == [] and entry["spare_received"] == result.facts["brokers"][
        "broker-2"]
    assert list(figures) == [float(k) for k in range(1, 31)]  # a figure each second
    assert all(figures[t] <= spec.bound for t in range(1, 11))  # under until 10 s
    assert figures[11.0] > spec.bound and figures[decided] > spec.bound  # up = 2 over
    assert all(figures[t] < spec.bound for t in range(14, 31))  # relieved
    rows = result.tables["replicas"]
    assert list(rows["t"]) == [entry["t_join"]] and list(rows["action"]) == ["broker_join"]
    assert list(rows["operator"]) == ["broker-1"] and list(rows["node"]) == ["broker-2"]
    assert list(rows["instances"]) == [2] and list(rows["slo"]) == [spec.bound]
    assert rows["latency"][0] == pytest.approx(figures[12.0], abs=1e-6)


def test_the_moved_gateway_publishes_to_the_spare_and_nothing_is_lost(ramp) -> None:
    model, result, counts = ramp
    messages = frame(result)
    assert len(messages) == result.facts["emitted"] == 16_500
    assert not messages["lost"].any() and messages["t_received"].notna().all()
    received = result.facts["brokers"]
    assert received["broker-1"] + received["broker-2"] == 16_500  # each through one broker
    # gw-2's sensors (b-*) publish through broker-2 from the join: their readings sent after
    # it, and those a link (2 ms) and the driver's conversion before it.
    t_join = result.facts["broker_scaling"][0]["t_join"]
    moved = messages[messages["source"].astype(str).str.startswith("b-")]
    assert (moved["t_sent"] > t_join).sum() <= received["broker-2"]
    assert received["broker-2"] <= (moved["t_sent"] > t_join - 0.003).sum()
    assert received["broker-2"] == 5485
    # Nothing before the join: the spare is nobody's broker at the start.
    assert [n for t, n in counts if t <= 12.0] == [0] * 12
    assert all(n > 0 for t, n in counts if t >= 13.0)


def test_the_latency_falls_back_after_the_join(ramp) -> None:
    _, result, _ = ramp
    messages = frame(result)
    before, peak, after = p95(messages, 0, 10), p95(messages, 11, 12), p95(messages, 14, 30)
    assert peak > 3 * before  # broker-1's queue while it is over
    assert after < before  # broker-1 at 60 to 70 %, broker-2 with gw-2's share
    assert (before, peak, after) == pytest.approx((0.0266, 0.1089, 0.0197), abs=5e-4)


def test_no_overload_no_join_and_the_spare_stays_idle() -> None:
    # A 1 ms service time: broker-1 at 70 % at the end of the ramp.
    run_point = load(EXPERIMENT, overrides=["topology.nodes.3.broker.service_time=1ms"]
                     ).points[0]
    model, result, counts = simulate(run_point)
    (entry,) = result.facts["broker_scaling"]
    assert not entry["joined"] and entry["t_join"] is None and entry["moved"] == []
    assert max(delay for _, delay in entry["probes"]) < 0.020
    assert len(result.tables["replicas"]["t"]) == 0
    assert result.facts["brokers"] == {"broker-1": 16_500, "broker-2": 0}
    assert {n for _, n in counts} == {0}


def test_the_same_seed_gives_the_same_tables(ramp) -> None:
    _, first, _ = ramp
    _, again, _ = simulate(load(EXPERIMENT).points[0])
    for name in ("messages", "replicas"):
        assert_tables_equal(first.tables[name], again.tables[name])
    assert first.facts["broker_scaling"] == again.facts["broker_scaling"]


# Devices publishing straight to broker-1 (no gateway); d-2 and d-3 nearest broker-2. From
# 4 s they send 1.5 times as much: 600 messages/s at 2 ms each, broker-1 at 120 % (after the
# join 60 %: its backlog drains within a second or two).
DIRECT = """
name: direct
topology:
  name: direct
  nodes:
    - {name: d, kind: device, replicas: 4}
    - name: broker
      kind: broker
      replicas: 2
      profile: vm.small
      broker: {service_time: 2ms}
    - {name: cloud, kind: cloud_vm}
  links:
    - {from: d-*, to: broker-1, latency: 1ms}
    - {from: d-1, to: broker-2, latency: 5ms}
    - {from: d-2, to: broker-2, latency: 1ms}
    - {from: d-3, to: broker-2, latency: 1ms}
    - {from: d-4, to: broker-2, latency: 3ms}
    - {from: broker-1, to: broker-2, latency: 1ms}
    - {from: broker-*, to: cloud, latency: 5ms}
workload:
  name: step
  streams:
    - {name: s, sources: d-*, rate: 100/s, arrivals: periodic, size: 64B, qos: QOS,
       shape: {kind: bursty, on: 4s, off: 100s, high: 1, low: 1.5}}
pipeline:
  - {name: count, on: cloud, reads: s, cost: 100us}
scenario:
  broker_scaling:
    - {broker: broker-1, spare: broker-2, bound: 20ms, up: 2, share: 0.5}
run: {backend: sim, duration: 12s, seed: 3, drain: 3s}
"""


@pytest.mark.parametrize("qos", [0, 1])
def test_devices_publishing_straight_to_the_broker_move_their_path(qos: int) -> None:
    model, result, counts = simulate(point(DIRECT.replace("QOS", str(qos))))
    (entry,) = result.facts["broker_scaling"]
    # Over from the step at 4 s: the intervals ending at 5 and 6 s; d-2 and d-3 (1 ms from
    # broker-1, the coordinator's node) switch when the command to them is done.
    t_join = 6.0 + command(0.001)
    assert entry["t_join"] == pytest.approx(t_join) and entry["moved"] == ["d-2", "d-3"]
    messages = frame(result)
    assert len(messages) == result.facts["emitted"] and not messages["lost"].any()
    moved = messages[messages["source"].isin(["d-2", "d-3"])]
    received = result.facts["brokers"]
    # Sent from the switch on: through broker-2 (a device's path is taken at its emission).
    assert received["broker-2"] == (moved["t_sent"] >= t_join).sum() > 0
    assert [n for t, n in counts if t <= 6.0] == [0] * 6
    stayed = messages[messages["source"].isin(["d-1", "d-4"])]
    assert received["broker-1"] == len(stayed) + (moved["t_sent"] < t_join).sum()
    for source in model.sources:
        device = model.node_names[source.device_index]
        assert source.path[-1].dst == ("broker-2" if device in entry["moved"] else "broker-1")
    assert p95(messages, 9, 12) < 0.020 < p95(messages, 5, 6)
    assert not math.isnan(float(np.nanmax(result.tables["replicas"]["latency"])))


def test_with_replication_both_write_one_replicas_table() -> None:
    # The counter on cloud-1 with a 30 ms bound, replicated onto cloud-2: broker-1's queue is
    # in its latency too, so both controllers act, one after the other.
    text = (DIRECT.replace("QOS", "1")
            .replace("{name: cloud, kind: cloud_vm}", "{name: cloud, kind: cloud_vm, replicas: 2}")
            .replace("to: cloud, latency", "to: cloud-*, latency")
            .replace("on: cloud, reads: s, cost: 100us}", "on: cloud-1, reads: s, cost: 100us, "
                     "slo: 30ms}")
            .replace("  broker_scaling:", "  replication: {interval: 1s, up: 2, down: 3, max: 2, "
                     "to: [cloud-2]}\n  broker_scaling:"))
    _, result, _ = simulate(point(text))
    rows = pd.DataFrame(result.tables["replicas"])
    assert list(zip(rows["operator"], rows["action"], rows["node"], rows["instances"],
                    strict=True)) == [("broker-1", "broker_join", "broker-2", 2),
                                      ("count", "start", "cloud-2", 2),
                                      ("count", "retire", "cloud-2", 1)]
    assert list(rows["t"]) == sorted(rows["t"]) and rows["t"][0] == pytest.approx(6.012)
    assert list(rows["slo"]) == [0.02, 0.03, 0.03]


def test_a_moved_gateways_operators_keep_their_broker() -> None:
    # Each gateway filters its readings (read where they are published, no broker) and
    # publishes what passes to broker-1: only the drivers move (as on emu, where the drivers'
    # session does), and gw-2's driver has nothing for a broker. The spare joins, and
    # receives nothing.
    text = catalog.experiment_path(EXPERIMENT).read_text(encoding="utf-8").replace(
        "  - {name: count, on: cloud, reads: s, cost: 100us}",
        "  - {name: filter, on: gw-*, reads: s, writes: f, cost: 100us}\n"
        "  - {name: count, on: cloud, reads: f, cost: 100us}")
    _, result, _ = simulate(point(text))
    (entry,) = result.facts["broker_scaling"]
    assert entry["joined"] and entry["moved"] == ["gw-2"]
    assert result.facts["brokers"] == {"broker-1": 16_500, "broker-2": 0}
