"""Simulated load (experiments.hybrid.load): the field's checks, the generator's schedule (the
gateway's own drivers', sim's sources' law), the generator into an agent through a real
Mosquitto, and a hybrid run on containers that records the load's messages."""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import math
import threading
import time
from collections import Counter

import pyarrow.parquet as pq
import pytest

from emu.agent.config import AgentConfig, DriverConfig, OperatorConfig
from emu.agent.drivers import Drivers
from emu.agent.protocol import LOAD_SEQUENCE, SEQUENCE_BITS
from emu.cluster.deployment import agent_configs
from experiments.hybrid.load import RECORDS, LoadGenerator, Target, planned, simulated_devices
from experiments.hybrid.plan import emulated_topology, start
from experiments.loader import parse_text
from experiments.runner import run_experiment
from topologies.errors import SpecError

# A phone standing at gw-b (the model's one user), and four sensors on gw-a that hybrid runs as
# simulated load; a window on gw-a counts their readings (a sink: each reading is a row).
LOADED = """
name: loaded
topology:
  name: street
  nodes:
    - {{name: phone, kind: device}}
    - {{name: sensor, kind: device, replicas: 4}}
    - {{name: loner, kind: device}}
    - {{name: gw-a, kind: gateway, position: [0, 0]}}
    - {{name: gw-b, kind: gateway, position: [300, 0]}}
    - {{name: broker, kind: broker}}
  links:
    - {{from: sensor-*, to: gw-a, latency: 2ms}}
    - {{from: loner, to: broker, latency: 2ms}}
    - {{from: [gw-a, gw-b], to: broker, latency: 5ms}}
workload:
  name: telemetry
  streams:
    - {{name: pos, sources: phone, rate: 2/s, arrivals: periodic, size: 100B}}
    - {{name: city, sources: sensor-*, rate: {rate}, arrivals: {arrivals}, size: 200B, qos: 1
        {shape}}}
pipeline:
  - {{name: count, on: gw-a, reads: city, window: {{size: 2s}}}}
  - {{name: track, on: gw-b, reads: pos}}
scenario:
  mobility:
    devices: [phone]
    model: {{kind: trace, path: {trace}}}
    radio: {{range: 200, latency: [5ms, 5ms], bandwidth: [10Mbit, 10Mbit], loss: 0}}
    update: 500ms
  load: {load}
run: {{backend: {backend}, duration: {duration}, seed: 8, drain: 4s}}
"""


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "stand.csv"
    path.write_text("time,x,y\n0,300,0\n600,300,0\n")
    return path


def loaded(trace, load="[sensor-*]", backend="hybrid", duration="8s", rate="5/s",
           arrivals="periodic", shape=""):
    return parse_text(LOADED.format(trace=trace, load=load, backend=backend, duration=duration,
                                    rate=rate, arrivals=arrivals, shape=shape))


def target_of(point, gateway="gw-a") -> Target:
    """The generator's target for a gateway, from the configs the run deploys."""
    spec = point.spec
    begin = start(point.topology, spec.scenario, spec.pipeline, spec.run.seed)
    load = simulated_devices(spec.scenario, point.topology)
    configs = agent_configs(emulated_topology(spec.topology, begin), spec.workload,
                            spec.pipeline, spec.run.seed, 0.0, follow=begin.follow, load=load)
    config = configs[gateway]
    return Target(gateway, config.index, config.seed, "",
                  tuple(d for d in config.drivers if d.load))


# The field ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("load", "says"), [
    ("[nope-*]", "matches no node"),
    ("[phone]", "phone is a moving device"),
    ("[gw-a]", "gw-a is a gateway"),
    ("[sensor-1, loner]", "loner links to none"),
])
@pytest.mark.parametrize("backend", ["hybrid", "sim"])
def test_a_bad_load_pattern_is_refused_naming_the_field_and_value(trace, load, says, backend):
    # sim runs the named devices as ordinary ones, and refuses a bad name all the same.
    with pytest.raises(SpecError) as error:
        loaded(trace, load=load, backend=backend)
    text = str(error.value)
    assert "scenario.load" in text and says in text
    assert load.strip("[]").split(", ")[-1] in text


def test_with_every_device_moving_the_error_says_to_name_the_moving_ones(trace):
    text = LOADED.replace("    devices: [phone]\n", "")
    with pytest.raises(SpecError, match=r"every device moves: name the moving ones"):
        parse_text(text.format(trace=trace, load="[sensor-*]", backend="hybrid",
                               duration="8s", rate="5/s", arrivals="periodic", shape=""))


def test_the_named_devices_become_load_drivers_on_their_gateway(trace):
    point = loaded(trace).points[0]
    assert simulated_devices(point.spec.scenario, point.topology) == [
        f"sensor-{i}" for i in range(1, 5)]
    target = target_of(point)
    assert [d.devices for d in target.drivers] == [[f"sensor-{i}" for i in range(1, 5)]]
    assert target.drivers[0].access_latency == pytest.approx(0.002)
    # sim runs the same file with the sensors as ordinary devices.
    sim = loaded(trace, backend="sim").points[0]
    assert sim.spec.scenario.load == ["sensor-*"]


# The schedule ------------------------------------------------------------------------------


def test_the_generator_emits_what_the_gateways_agent_would_for_those_devices(trace):
    """The same Drivers on the same seed and index: emission times, streams and readings as
    if gw-a's agent emulated the sensors; ids in gw-a's index from LOAD_SEQUENCE on."""
    point = loaded(trace, arrivals="poisson", shape=", shape: {kind: bursty, on: 1s, off: 1s, "
                   "high: 2, low: 0.5}").points[0]
    target = target_of(point)
    rows = planned(target, 1000.0, 20.0)
    emulated = [dataclasses.replace(d, load=False) for d in target.drivers]
    heard = []
    clock = [1000.0]
    heap = []
    order = itertools.count()

    def at(t, action, *args):
        heapq.heappush(heap, (t, next(order), action, args))

    drivers = Drivers(emulated, "gw-a", target.index, target.seed, 1000.0, at,
                      lambda: clock[0], lambda *a: None, lambda *row: heard.append(row))
    drivers.start()
    while heap and heap[0][0] < 1020.0:
        t, _, action, args = heapq.heappop(heap)
        clock[0] = t
        action(*args)
    assert len(rows) > 100
    assert [(s, d, t) for _, s, d, t, _ in rows] == [(s, d, t) for _, s, d, t, _ in heard]
    mask = (1 << SEQUENCE_BITS) - 1
    assert [i >> SEQUENCE_BITS for i, *_ in rows] == [target.index] * len(rows)
    assert [i & mask for i, *_ in rows] == list(range(LOAD_SEQUENCE, LOAD_SEQUENCE + len(rows)))


@pytest.mark.parametrize(("arrivals", "shape", "tolerance"), [
    ("periodic", "", 0.0),
    ("poisson", "", 0.12),
    ("periodic", ", shape: {kind: bursty, on: 5s, off: 10s, high: 3, low: 0.5}", 0.05),
    ("poisson", ", shape: {kind: sawtooth, period: 10s, low: 0.2, high: 2}", 0.12),
])
def test_the_generators_schedule_is_sims_sources(tmp_path, trace, arrivals, shape, tolerance):
    """Per device over 60 s, the generator emits as many readings as sim's sources do for the
    same file (periodic: within one; random arrivals: within the tolerance), and shapes their
    rate over time alike (per 5 s interval, all devices together: within four standard
    deviations of two Poisson counts)."""
    duration = 60.0
    experiment = loaded(trace, backend="sim", duration="60s", rate="4/s", arrivals=arrivals,
                        shape=shape)
    (outcome,) = run_experiment(experiment, tmp_path / "out")
    assert outcome.error is None, outcome.error
    messages = pq.read_table(outcome.folder / "messages.parquet").to_pandas()
    sim = messages[messages["stream"] == "city"]
    rows = planned(target_of(experiment.points[0]), 0.0, duration)
    ours = Counter(device for _, _, device, _, _ in rows)
    theirs = Counter(sim["source"])
    assert set(ours) == set(theirs) == {f"sensor-{i}" for i in range(1, 5)}
    if not tolerance:
        assert all(abs(ours[d] - theirs[d]) <= 1 for d in ours), (ours, theirs)
    else:
        assert abs(sum(ours.values()) - len(sim)) <= tolerance * len(sim), (ours, theirs)
    bins = Counter(int(t // 5) for _, _, _, t, _ in rows)
    sim_bins = Counter((sim["t_sent"] // 5).astype(int))
    for k in range(12):  # within four standard deviations of their difference (Poisson)
        assert abs(bins[k] - sim_bins[k]) <= 4 * math.sqrt(bins[k] + sim_bins[k]) + 2, (
            k, bins, sim_bins)
    if shape:  # and the shape shows: its busiest 5 s and its quietest differ alike
        ratio = max(bins.values()) / max(1, min(bins.values()))
        sim_ratio = max(sim_bins.values()) / max(1, min(sim_bins.values()))
        assert ratio > 1.5 and sim_ratio > 1.5


# The generator into an agent, through a real broker ----------------------------------------


def test_the_generator_feeds_the_gateways_window_through_the_broker(tmp_path):
    from emu.agent.agent import Agent
    from emu.agent.mqtt import new_client
    from workloads.spark.local_broker import LocalMosquitto, find_mosquitto

    if find_mosquitto() is None:
        pytest.skip("mosquitto is not installed")
    devices = [f"s-{i}" for i in range(6)]
    # A 50 ms device link: what it holds at the stop still arrives. `forward`: another node
    # reads the stream too, so the gateway also publishes each reading on city/gw-1, whose
    # copies come back to it through its own subscription (city/#): echo, not read twice.
    load = DriverConfig("city", devices, rate=20.0, arrivals="periodic", size=120, qos=1,
                        access_latency=0.05, load=True, forward=True)
    before = {t.name for t in threading.enumerate()}
    with LocalMosquitto() as broker:
        address = f"{broker.host}:{broker.port}"
        agent = Agent(AgentConfig(
            node="gw-1", mqtt=address, drivers=[load], index=1, seed=5, hold=True,
            records=str(tmp_path / "gw-1"),
            operators=[OperatorConfig("count", reads=["city/#"], window=1.0,
                                      records=str(tmp_path / "gw-1"))]))
        heard: list[str] = []
        listener = new_client(f"listener-{time.time_ns()}")
        listener.on_message = lambda client, userdata, message: heard.append(message.topic)
        listener.connect(broker.host, broker.port)
        listener.loop_start()
        listener.subscribe("city/#", 1)
        agent.start()
        try:
            assert agent.ready.wait(10)
            epoch = time.time() + 0.5
            agent.scheduler.call(agent.begin, epoch)
            target = Target("gw-1", 1, 5, address, (load,))
            generator = LoadGenerator([target], epoch, tmp_path / RECORDS).start()
            try:
                time.sleep(epoch + 3.0 - time.time())
            finally:
                generator.stop()
            time.sleep(0.5)
        finally:
            agent.stop()
            listener.disconnect()
            listener.loop_stop()
    sent = (tmp_path / RECORDS / "sent.csv").read_text().splitlines()[1:]
    received = (tmp_path / "gw-1" / "received.csv").read_text().splitlines()[1:]
    ids = [int(line.split(",")[0]) for line in sent]
    got = [int(line.split(",")[0]) for line in received]
    # Every reading emitted reached the gateway's window once, as its own drivers' would.
    assert len(ids) >= 6 * 20 * 3 - 6 and sorted(got) == sorted(ids)
    assert agent.loaded == len(ids) and agent.records.sent_count == 0
    assert heard == ["city/gw-1"] * len(ids)  # forwarded once each, as the gateway's
    expected = {row[0] for row in planned(target, epoch, generator.stopped_at - epoch)}
    assert set(ids) <= expected and len(expected - set(ids)) <= len(devices)
    facts = generator.facts()
    assert facts["devices"] == 6 and facts["sent"] == len(ids) and facts["refused"] == 0
    # Behind its schedule by less than the drivers catch up on (1 s; a loaded host: 0.3 s).
    assert facts["unacknowledged"] == 0 and facts["lag_ms"]["p99"] < 1000
    assert 100 <= facts["rate"] <= 130  # 6 devices at 20/s
    windows = (tmp_path / "gw-1" / "windows.csv").read_text().splitlines()
    assert len(windows) >= 3  # the header and two closed windows or more
    # Nothing of the generator is left: its scheduler and its client's loop are gone.
    time.sleep(0.2)
    left = {t.name for t in threading.enumerate()} - before
    assert not any("load" in name or "paho" in name.lower() for name in left), left


def test_a_generator_that_cannot_connect_says_so_and_leaves_nothing(tmp_path):
    before = set(threading.enumerate())
    load = DriverConfig("city", ["s-1"], rate=1.0, load=True)
    generator = LoadGenerator([Target("gw-1", 1, 1, "127.0.0.1:9", (load,))], time.time(),
                              tmp_path / RECORDS)
    with pytest.raises(RuntimeError, match="could not connect to the broker at 127.0.0.1:9"):
        generator.start(timeout=2.0)
    time.sleep(0.2)
    assert set(threading.enumerate()) - before == set()
    generator.stop()  # again: nothing to do


def test_a_ctrl_c_as_the_model_starts_stops_the_load_and_leaves_nothing(tmp_path,
                                                                        monkeypatch):
    """The hybrid run starts the generator, then its model: a Ctrl-C (or any error) while the
    model starts stops the generator before it goes up (emu.run.emulate then removes the
    cluster)."""
    from types import SimpleNamespace

    from experiments.hybrid import backend
    from workloads.spark.local_broker import LocalMosquitto, find_mosquitto

    if find_mosquitto() is None:
        pytest.skip("mosquitto is not installed")
    with LocalMosquitto() as broker:
        load = DriverConfig("city", ["s-1", "s-2"], rate=50.0, load=True)
        target = Target("gw-1", 1, 1, f"{broker.host}:{broker.port}", (load,))
        # The cluster's part (its gateways, their brokers' addresses) given directly.
        monkeypatch.setattr(backend, "targets_of", lambda cluster: [target])

        def interrupted(self, *args):
            time.sleep(0.5)  # the generator runs meanwhile
            raise KeyboardInterrupt

        monkeypatch.setattr(backend._Coupled, "_couple", interrupted)
        before = set(threading.enumerate())
        with pytest.raises(KeyboardInterrupt):
            backend._Coupled(None, None, None, time.time(), SimpleNamespace(
                records_root=tmp_path, plan=SimpleNamespace(access=None)), load=True)
        time.sleep(0.2)
        assert set(threading.enumerate()) - before == set()
    rows = (tmp_path / RECORDS / "sent.csv").read_text().splitlines()
    assert len(rows) > 20  # it ran, and its records were flushed as it stopped


# On containers -----------------------------------------------------------------------------


@pytest.mark.emu
def test_a_hybrid_run_with_simulated_load_records_the_loads_messages(tmp_path, trace):
    from engine import docker_engine

    docker_engine()
    experiment = loaded(trace)
    (outcome,) = run_experiment(experiment, tmp_path / "out")
    assert outcome.error is None, outcome.error
    folder = outcome.folder
    facts = json.loads((folder / "manifest.json").read_text())["facts"]
    load = facts["hybrid"]["load"]
    assert "load" in facts["hybrid"]["couplings"]
    assert load["devices"] == 4 and load["gateways"] == 1 and load["refused"] == 0
    messages = pq.read_table(folder / "messages.parquet").to_pandas()
    city = messages[messages["stream"] == "city"]
    # One row per message the schedule emitted in the run's 8 s: the same ids, none lost,
    # none twice, each at the window on gw-a. (Seed 8: each sensor's last emission before
    # the end is 145 ms or more before it, so a late one still counts in the run.)
    expected = {row[0] for row in planned(target_of(experiment.points[0]), 0.0, 8.0)}
    assert len(expected) == 4 * 5 * 8
    assert set(city["id"]) == expected and len(city) == len(expected)
    # The generator's own account: at least those (it emits until the run's time is over),
    # at about the schedule's rate (20/s), its lag well under the drivers' catch-up (1 s).
    assert load["sent"] >= len(expected) and 15 <= load["rate"] <= 22
    assert load["lag_ms"]["p99"] < 1000
    assert not city["lost"].any() and set(city["sink"]) == {"gw-a"}
    assert (city["latency"] > 0.002).all()  # the device link, then the broker's legs
    if facts["fidelity"]["saturated_share"] < 0.05:
        # On a host with CPU to spare; a saturated one (CPU pressure near 100 %, the
        # gateway's agent held at its CPU limit under QEMU) queued them for seconds.
        assert city["latency"].median() < 0.5
    mask = (1 << SEQUENCE_BITS) - 1
    assert all((int(i) & mask) >= LOAD_SEQUENCE for i in city["id"])
    # The gateway's window counted them: each closed window as many as arrived in it.
    windows = pq.read_table(folder / "windows.parquet").to_pandas()
    windows = windows[windows["operator"] == "count"]
    assert len(windows) >= 3
    arrived = Counter((city["t_received"] // 2).astype(int))
    assert {int(w): int(n) for w, n in zip(windows["window"], windows["count"], strict=True)} \
        == {w: arrived[w] for w in windows["window"]}
