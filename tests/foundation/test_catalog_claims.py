"""Each shipped experiment runs what its own text says: the numbers its description and comments
state (rates, windows, S, durations, node counts) are those of the loaded, resolved sweep.

The table below holds, per experiment file, phrases quoted from that file and the setting each
states. A phrase must appear in the file (so the text cannot change without the table), the
numbers written in it must be the smallest and largest of the stated values, and the resolved
spec must give exactly those values over its sweep points. The thesis's values are those of its
tables (shared/notes/thesis-migration.md: Tables 5.2, 5.3, 6.3, 6.4, 6.5).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

import pytest

from experiments import catalog
from experiments.loader import Experiment, RunPoint, load
from workloads.faults import kind_of

# Numbers the shipped texts spell out in words.
WORDS = {"two hundred": 200, "one": 1, "two": 2, "four": 4, "ten": 10}
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def total_rate(point: RunPoint) -> float:
    """Events per second over all sources: each matching device emits its stream's rate."""
    return sum(float(stream.rate) * len(point.topology.select(stream.sources))
               for stream in point.spec.workload.streams)


def kind_count(kind: str) -> Callable[[RunPoint], int]:
    return lambda point: point.topology.counts().get(kind, 0)


def only(values) -> object:
    """The one value all of them share, else the set of them (which no claim states)."""
    found = frozenset(values)
    return next(iter(found)) if len(found) == 1 else found


MEASURES: dict[str, Callable[[RunPoint], object]] = {
    "total rate (events/s)": total_rate,
    "window (s)": lambda p: p.spec.pipeline[0].window.size,
    "sync factor S": lambda p: p.spec.scenario.migration.sync,
    "strategy": lambda p: p.spec.scenario.migration.strategy,
    "duration (s)": lambda p: p.spec.run.duration,
    "migrations": lambda p: len(p.spec.scenario.migrations),
    "migration at (s)": lambda p: p.spec.scenario.migrations[0].at,
    "Spark way": lambda p: p.spec.scenario.migration.spark,
    "devices": kind_count("device"),
    "gateways": kind_count("gateway"),
    "Raspberry Pi gateways": lambda p: sum(
        1 for n in p.topology.of_kind("gateway") if n.profile_name.startswith("rpi")),
    "brokers": kind_count("broker"),
    "cloud VMs": kind_count("cloud_vm"),
    "broker models": lambda p: p.topology.of_kind("broker")[0].broker.model,
    "rate per device (/s)": lambda p: float(p.spec.workload.streams[0].rate),
    "message size (bytes)": lambda p: float(p.spec.workload.streams[0].size),
    "gateway tasks": lambda p: ",".join(op.task for op in p.spec.pipeline if "gateways" in op.on),
    "cloud tasks": lambda p: ",".join(op.task for op in p.spec.pipeline if "cloud-1" in op.on),
    "fault kinds": lambda p: ",".join(kind_of(f) for f in p.spec.scenario.faults),
    "crash for (s)": lambda p: next(f.duration for f in p.spec.scenario.faults
                                    if hasattr(f, "crash")),
    "added latency (s)": lambda p: next(f.latency for f in p.spec.scenario.faults
                                        if hasattr(f, "delay")),
    "slow factor": lambda p: next(f.factor for f in p.spec.scenario.faults if hasattr(f, "slow")),
    "crash at (s)": lambda p: next(f.at for f in p.spec.scenario.faults if hasattr(f, "crash")),
    "slo (s)": lambda p: only(op.slo for op in p.spec.pipeline if op.slo is not None),
    "gateway tasks on gw-1": lambda p: ",".join(op.task for op in p.spec.pipeline
                                                if op.on == ["gw-1"]),
    "replication down (s)": lambda p: (p.spec.scenario.replication.down
                                       * p.spec.scenario.replication.interval),
    "replication up (s)": lambda p: (p.spec.scenario.replication.up
                                     * p.spec.scenario.replication.interval),
    # A bursty shape written low first (its `on` phase at the base rate): the burst is its
    # `off` phase, at `low` times the base rate.
    "burst start (s)": lambda p: p.spec.workload.streams[0].shape.on,
    "burst end (s)": lambda p: p.spec.workload.streams[0].shape.on
    + p.spec.workload.streams[0].shape.off,
    "burst rate (events/s)": lambda p: total_rate(p) * p.spec.workload.streams[0].shape.low,
    "session timeout (s)": lambda p: p.spec.scenario.recovery.session_timeout,
    # Of the one operator with a window, wherever it is in the pipeline.
    "windowed operator's window (s)": lambda p: only(op.window.size for op in p.spec.pipeline
                                                     if op.window is not None),
    "windowed operator's checkpoint (s)": lambda p: only(op.checkpoint for op in p.spec.pipeline
                                                         if op.window is not None),
    "fault at (s)": lambda p: only(f.at for f in p.spec.scenario.faults),
    "fault for (s)": lambda p: only(f.duration for f in p.spec.scenario.faults),
    "QoS": lambda p: only(stream.qos for stream in p.spec.workload.streams),
    "checkpoint (s)": lambda p: p.spec.pipeline[0].checkpoint,
    "broadcast modes": lambda p: ",".join(b.mode for b in p.spec.scenario.broadcasts),
    "broadcast size (bytes)": lambda p: only(b.size for b in p.spec.scenario.broadcasts),
    "broadcast cost (s)": lambda p: only(b.cost for b in p.spec.scenario.broadcasts),
    "tree fanout": lambda p: only(b.fanout for b in p.spec.scenario.broadcasts
                                  if b.mode == "tree"),
    "channels": lambda p: only(stream.channel for stream in p.spec.workload.streams),
    "offload battery (J)": lambda p: p.spec.scenario.energy.offload.capacity,
    "offload battery low": lambda p: p.spec.scenario.energy.offload.battery_low,
    "offload to": lambda p: p.spec.scenario.energy.offload.to,
    "offload strategy": lambda p: p.spec.scenario.energy.offload.strategy,
    "broadcast workers": lambda p: only(len(p.topology.select(b.to))
                                        for b in p.spec.scenario.broadcasts),
    "broker service time (s)": lambda p: only(n.broker.service_time
                                              for n in p.topology.of_kind("broker")),
    # A sawtooth longer than the run is a ramp: from `low` times the base rate, rising by
    # (high - low) / period each second.
    "ramp start rate (events/s)": lambda p: total_rate(p) * p.spec.workload.streams[0].shape.low,
    "ramp per second": lambda p: (p.spec.workload.streams[0].shape.high
                                  - p.spec.workload.streams[0].shape.low)
    / p.spec.workload.streams[0].shape.period,
    "broker scaling bound (s)": lambda p: only(e.bound for e in p.spec.scenario.broker_scaling),
    "broker scaling up (s)": lambda p: only(e.up * e.interval
                                            for e in p.spec.scenario.broker_scaling),
    "broker probe (s)": lambda p: only(e.probe for e in p.spec.scenario.broker_scaling),
}


class Claim(NamedTuple):
    phrase: str  # quoted from the file (whitespace aside)
    measure: str  # a key of MEASURES
    values: set  # what the resolved spec must give over all sweep points
    unit: float = 1.0  # the phrase's numbers times this are in the measure's unit


CLAIMS: dict[str, list[Claim]] = {
    "faults-crash": [
        Claim("200 sensors", "devices", {200}),
        Claim("four Raspberry Pi gateways", "Raspberry Pi gateways", {4}),
        Claim("crashes for 30 s", "crash for (s)", {30}),
        Claim("80 ms more latency", "added latency (s)", {0.08}, unit=1e-3),
        Claim("four times slower", "slow factor", {4}),
        Claim("and the broker restarts", "fault kinds",
              {"crash,partition,delay,slow,restart"}),
    ],
    "faults-stats": [
        Claim("20 sensors", "devices", {20}),
        Claim("send 5 readings/s each", "rate per device (/s)", {5}),
        Claim("(QoS 1)", "QoS", {1}),
        Claim("a 2 s window of RIoTBench's distinct count", "windowed operator's window (s)",
              {2}),
        Claim("to ZooKeeper every 2 s", "windowed operator's checkpoint (s)", {2}),
        Claim("crashes at 21.5 s", "crash at (s)", {21.5}),
        Claim("for 30 s", "crash for (s)", {30}),
        Claim("(2 s timeout)", "session timeout (s)", {2}),
    ],
    "faults-partition": [
        Claim("200 sensors", "devices", {200}),
        Claim("about 1 reading/s", "rate per device (/s)", {1}),
        Claim("four Raspberry Pi gateways", "Raspberry Pi gateways", {4}),
        Claim("STATS on a cloud VM", "cloud tasks", {"stats"}),
        Claim("for one minute", "duration (s)", {60}, unit=60),
        Claim("is cut from the broker and the cloud VM", "fault kinds", {"partition"}),
        Claim("at 20 s", "fault at (s)", {20}),
        Claim("for 15 s", "fault for (s)", {15}),
        Claim("MQTT QoS 0 and 1", "QoS", {0, 1}),
    ],
    "faults-restart": [
        Claim("200 sensors", "devices", {200}),
        Claim("about 1 reading/s", "rate per device (/s)", {1}),
        Claim("four Raspberry Pi gateways", "Raspberry Pi gateways", {4}),
        Claim("STATS on a cloud VM", "cloud tasks", {"stats"}),
        Claim("for one minute", "duration (s)", {60}, unit=60),
        Claim("the broker's process restarts", "fault kinds", {"restart"}),
        Claim("restarts at 30 s", "fault at (s)", {30}),
        Claim("down for 2 s", "fault for (s)", {2}),
        Claim("MQTT QoS 0 and 1", "QoS", {0, 1}),
    ],
    "broadcast-tree": [
        Claim("one 1 KB control message", "broadcast size (bytes)", {1000}, unit=1000),
        Claim("1 ms of CPU per send", "broadcast cost (s)", {1e-3}, unit=1e-3),
        Claim("forwards it to 2 children", "tree fanout", {2}),
        Claim("for 20 to 200 workers", "cloud VMs", {20, 50, 100, 150, 200}),
        Claim("its workers, naive", "broadcast modes", {"naive,tree"}),
    ],
    "broadcast-tree-emu": [
        Claim("one 1 KB control message", "broadcast size (bytes)", {1000}, unit=1000),
        Claim("1 ms of CPU per send", "broadcast cost (s)", {1e-3}, unit=1e-3),
        Claim("forwards it to 2 children", "tree fanout", {2}),
        Claim("for 8 and 16 workers", "broadcast workers", {8, 16}),
        Claim("its workers, naive", "broadcast modes", {"naive,tree"}),
        Claim("the coordinator that sends is a cloud VM", "cloud VMs", {9, 17}),
    ],
    "hybrid-mobility": [
        Claim("50 people", "devices", {50}),
        Claim("served by 5 Raspberry Pi gateways", "Raspberry Pi gateways", {5}),
        Claim("served by 5 Raspberry Pi gateways", "gateways", {5}),
        Claim("a per-person 10 s window", "window (s)", {10}),
        Claim("(pause_transfer: the window's state through ZooKeeper)", "strategy",
              {"pause_transfer"}),
        Claim("A STATS query on Spark on the cloud VM", "cloud tasks", {"stats"}),
        Claim("A STATS query on Spark on the cloud VM", "cloud VMs", {1}),
        Claim("Each phone reports its position once a second", "rate per device (/s)", {1}),
        Claim("3 minutes", "duration (s)", {180}, unit=60),
    ],
    "recovery": [
        Claim("Four sensors at one site send 10 readings/s each", "total rate (events/s)", {40},
              unit=4),
        Claim("Four sensors", "devices", {4}),
        Claim("a 2 s window count", "window (s)", {2}),
        Claim("(2 s timeout)", "session timeout (s)", {2}),
        Claim("every 2 s", "checkpoint (s)", {2}),
        Claim("crashes at 9.5 s", "crash at (s)", {9.5}),
    ],
    "replication-burst": [
        Claim("Ten sensors at one site send 12 readings/s each", "total rate (events/s)",
              {120}, unit=10),
        Claim("Ten sensors", "devices", {10}),
        Claim("a sliding linear regression (RIoTBench's SLR) on gw-1", "gateway tasks on gw-1",
              {"sliding_linear_regression"}),
        Claim("a 50 ms bound", "slo (s)", {0.05}, unit=1e-3),
        Claim("After 2 s over the bound", "replication up (s)", {2}),
        Claim("After 10 s under half the bound", "replication down (s)", {10}),
        Claim("From 20 s", "burst start (s)", {20}),
        Claim("to 32 s", "burst end (s)", {32}),
        Claim("276 readings/s", "burst rate (events/s)", {276}),
    ],
    "broker-scaling": [
        Claim("Two gateways", "gateways", {2}),
        Claim("each sensor sends 50 readings/s", "rate per device (/s)", {50}),
        Claim("400 readings/s", "ramp start rate (events/s)", {400}),
        Claim("up by 0.02 each second", "ramp per second", {0.02}),
        Claim("in 2 ms on its one core", "broker service time (s)", {0.002}, unit=1e-3),
        Claim("every 100 ms", "broker probe (s)", {0.1}, unit=1e-3),
        Claim("after 2 s", "broker scaling up (s)", {2}),
        Claim("over 20 ms", "broker scaling bound (s)", {0.02}, unit=1e-3),
    ],
    "quickstart": [
        Claim("Two hundred city sensors", "devices", {200}),
        Claim("four Raspberry Pi gateways", "Raspberry Pi gateways", {4}),
        Claim("four Raspberry Pi gateways", "gateways", {4}),
        Claim("gateways that filter their readings", "gateway tasks", {"range_filter"}),
        Claim("one MQTT broker", "brokers", {1}),
        Claim("a cloud VM that computes statistics", "cloud tasks", {"stats"}),
        Claim("a cloud VM that computes statistics", "cloud VMs", {1}),
        Claim("ten simulated minutes", "duration (s)", {600}, unit=60),
    ],
    "speck-jobs": [
        Claim("each of the four districts", "gateways", {4}),
        Claim("One simulated minute", "duration (s)", {60}, unit=60),
    ],
    "lesson-placement": [
        Claim("two hundred sensors", "devices", {200}),
        Claim("four Raspberry Pi gateways", "Raspberry Pi gateways", {4}),
        Claim("sending once a second", "rate per device (/s)", {1}),
        Claim("The filter runs on the gateways", "gateway tasks", {"range_filter"}),
        Claim("a store on the cloud VM", "cloud tasks", {"passthrough"}),
        Claim("2 simulated minutes", "duration (s)", {120}, unit=60),
    ],
    "vrgame-eeg": [
        Claim("16 players", "devices", {16}),
        Claim("500-byte readings", "message size (bytes)", {500}),
        Claim("200 readings a second", "rate per device (/s)", {200}),
        Claim("30 simulated seconds", "duration (s)", {30}),
    ],
    "energy-offload": [
        Claim("One sensor", "devices", {1}),
        Claim("One sensor sends 10 readings/s", "rate per device (/s)", {10}),
        Claim("on a 40 J battery", "offload battery (J)", {40}),
        Claim("when less than 20% of its battery is left", "offload battery low", {0.2},
              unit=0.01),
        Claim("moves the filter to cloud-1 by pause and drain", "offload to", {"cloud-1"}),
        Claim("moves the filter to cloud-1 by pause and drain", "offload strategy",
              {"pause_drain"}),
        Claim("A 15 s run", "duration (s)", {15}),
    ],
    "iotcloud-scaling": [
        Claim("from 4 to 1000 mock drivers", "devices", {4, 100, 250, 500, 1000}),
        Claim("on two gateways", "gateways", {2}),
        Claim("100-byte messages", "message size (bytes)", {100}),
        Claim("at 5 msg/s", "rate per device (/s)", {5}),
        Claim("through two brokers", "brokers", {2}),
        Claim("for 60 s each", "duration (s)", {60}),
        Claim("a RabbitMQ-like broker against a Kafka-like one", "broker models",
              {"rabbitmq-like", "kafka-like"}),
        Claim("both on shared channels", "channels", {"shared"}),
    ],
    "iotcloud-brokers": [
        Claim("four drivers", "devices", {4}),
        Claim("on two gateways", "gateways", {2}),
        Claim("through two brokers", "brokers", {2}),
        Claim("a RabbitMQ-like broker against a Kafka-like one", "broker models",
              {"rabbitmq-like", "kafka-like"}),
        Claim("over message sizes", "message size (bytes)", {1e3, 50e3, 200e3}),
    ],
    "migrate-pause-transfer": [
        Claim("A 2 s window count", "window (s)", {2}),
        Claim("two Raspberry Pi gateways", "Raspberry Pi gateways", {2}),
        Claim("moved once", "migrations", {1}),
        Claim("pause, state transfer through ZooKeeper, resume", "strategy",
              {"pause_transfer"}),
        Claim("Four sensors at 10 readings/s each", "total rate (events/s)", {40}, unit=4),
        Claim("Four sensors", "devices", {4}),
    ],
    "migrate-pause-drain": [
        Claim("two Raspberry Pi gateways", "Raspberry Pi gateways", {2}),
        Claim("moved once", "migrations", {1}),
        Claim("by pause and drain", "strategy", {"pause_drain"}),
        Claim("Four sensors at 10 readings/s each", "total rate (events/s)", {40}, unit=4),
        Claim("Four sensors", "devices", {4}),
    ],
    "migrate-spark": [
        Claim("two cloud VMs", "cloud VMs", {2}),
        Claim("four sensors at 2 readings/s each", "total rate (events/s)", {8}, unit=4),
        Claim("reading four sensors", "devices", {4}),
        Claim("a Raspberry Pi gateway", "Raspberry Pi gateways", {1}),
        Claim("moved live", "migrations", {1}),
        Claim("at 40 s with its state", "migration at (s)", {40}),
        Claim("with its state", "strategy", {"pause_transfer"}),
        Claim("its checkpoint and journal are copied", "Spark way", {"checkpoint"}),
    ],
    "migrate-parallel": [
        Claim("A 5 s window count", "window (s)", {5}),
        Claim("two Raspberry Pi gateways", "Raspberry Pi gateways", {2}),
        Claim("moved once", "migrations", {1}),
        Claim("by parallel migration", "strategy", {"parallel"}),
        Claim("a consistency checker with S = 2", "sync factor S", {2}),
        Claim("Four sensors at 25 readings/s each", "total rate (events/s)", {100}, unit=4),
        Claim("each, 100 events/s", "total rate (events/s)", {100}),
    ],
    "thesis-ch5-rate": [
        Claim("Table 5.2", "strategy", {"pause_transfer"}),
        Claim("a 50 s window count", "window (s)", {50}),
        Claim("migrated once", "migrations", {1}),
        Claim("at 4,000 to 20,000 events/s", "total rate (events/s)",
              {4000, 8000, 12000, 16000, 20000}),
        Claim("four producers share the rate", "devices", {4}),
    ],
    "thesis-ch5-window": [
        Claim("Table 5.3", "strategy", {"pause_transfer"}),
        Claim("at 10,000 events/s", "total rate (events/s)", {10000}),
        Claim("window sizes of 10 to 400 s", "window (s)", {10, 50, 100, 200, 400}),
        Claim("four producers", "devices", {4}),
        Claim("at 2,500/s each", "rate per device (/s)", {2500}),
    ],
    "thesis-ch6-rate": [
        Claim("Parallel migration", "strategy", {"parallel"}),
        Claim("event rates of 50 to 1,600 events/s", "total rate (events/s)",
              {50, 100, 200, 400, 800, 1600}),
        Claim("with a 2 s window", "window (s)", {2}),
        Claim("S = 5", "sync factor S", {5}),
    ],
    "thesis-ch6-sync": [
        Claim("Parallel migration", "strategy", {"parallel"}),
        Claim("S = 0 to 10", "sync factor S", {0, 2, 4, 6, 8, 10}),
        Claim("at 100 events/s", "total rate (events/s)", {100}),
        Claim("with a 2 s window", "window (s)", {2}),
    ],
    "thesis-ch6-window": [
        Claim("Parallel migration", "strategy", {"parallel"}),
        Claim("window sizes of 1 to 15 s", "window (s)", {1, 3, 6, 9, 12, 15}),
        Claim("at 100 events/s", "total rate (events/s)", {100}),
        Claim("S = 5", "sync factor S", {5}),
    ],
}


def stated_numbers(phrase: str) -> list[float]:
    """The numbers a phrase writes, in digits (`4,000`) or, failing that, in words."""
    found = [float(n.replace(",", "")) for n in NUMBER.findall(phrase)]
    if found:
        return found
    text = phrase.lower()
    for word, value in WORDS.items():  # longest first: "two hundred" before "two"
        if re.search(rf"\b{word}\b", text):
            return [float(value)]
    return []


def flat(text: str) -> str:
    return " ".join(text.split())


def test_every_shipped_experiment_has_its_claims_checked() -> None:
    shipped = {path.stem for path in catalog.experiment_path("quickstart").parent.glob("*.yaml")}
    assert shipped == set(CLAIMS)


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_an_experiment_runs_what_its_text_states(name: str) -> None:
    text = flat(catalog.experiment_path(name).read_text(encoding="utf-8"))
    experiment: Experiment = load(name)
    for claim in CLAIMS[name]:
        assert flat(claim.phrase) in text, f"{name}: the file no longer says {claim.phrase!r}"
        numeric = all(isinstance(v, int | float) for v in claim.values)
        numbers = stated_numbers(claim.phrase) if numeric else []
        if numbers:
            ends = sorted({min(claim.values), max(claim.values)})
            assert [n * claim.unit for n in numbers] == pytest.approx(ends), (
                f"{name}: {claim.phrase!r} states {numbers}, the table {sorted(claim.values)}")
        resolved = {MEASURES[claim.measure](point) for point in experiment.points}
        if numeric:
            ok = sorted(resolved) == pytest.approx(sorted(claim.values))
        else:
            ok = resolved == claim.values
        assert ok, (f"{name}: {claim.phrase!r}: the file runs {claim.measure} = "
                    f"{sorted(resolved)}, it states {sorted(claim.values)}")


def test_the_rate_of_a_run_is_the_per_device_rate_times_the_devices() -> None:
    # What a claim's "total rate" means, on the file this test was written for: the workload's
    # default of 1,000/s per producer gave 4,000 events/s where the text says 10,000.
    (point, *_) = load("thesis-ch5-window").points
    (stream,) = point.spec.workload.streams
    assert len(point.topology.select(stream.sources)) == 4
    assert float(stream.rate) == 2500.0
    assert total_rate(point) == 10_000.0
