"""Drivers: rates, arrivals, ids, the access link, bodies; on a virtual clock and for real."""

from __future__ import annotations

import csv
import heapq
import io
import itertools
import statistics
import time
from collections import Counter, defaultdict

import pytest

from emu.agent.config import DriverConfig
from emu.agent.drivers import CITY_FIELDS, CITY_UNITS, Drivers, layouts
from emu.agent.protocol import SEQUENCE_BITS, Envelope
from workloads.riot.senml import Reading, decode_senml, encode_senml, from_json, to_json
from workloads.riot.tasks import make_task

from .conftest import read_csv, wait_for


class VirtualTime:
    """The scheduler's `at` and `clock` on a virtual clock, run to a given time."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.heap: list = []
        self.order = itertools.count()

    def at(self, t: float, action, *args) -> None:
        heapq.heappush(self.heap, (t, next(self.order), action, args))

    def clock(self) -> float:
        return self.now

    def run(self, until: float) -> None:
        while self.heap and self.heap[0][0] <= until:
            t, _, action, args = heapq.heappop(self.heap)
            self.now = max(self.now, t)
            action(*args)
        self.now = until


def virtual_drivers(configs: list[DriverConfig], index: int = 1, seed: int = 7,
                    epoch: float = 1000.0):
    time_ = VirtualTime(epoch)
    delivered: list[tuple[float, str, Envelope]] = []
    sent: list[tuple[int, str, str, float]] = []
    drivers = Drivers(configs, "gw-1", index, seed, epoch, time_.at, time_.clock,
                      lambda topic, envelope, driver: delivered.append((time_.now, topic,
                                                                        envelope)),
                      lambda *row: sent.append(row))
    drivers.start()
    return time_, drivers, delivered, sent


def test_periodic_devices_send_at_their_rate_from_the_start_time() -> None:
    config = DriverConfig("city", [f"d-{i}" for i in range(5)], rate=4.0, arrivals="periodic",
                          start=2.0)
    clock, _, delivered, sent = virtual_drivers([config])
    clock.run(1012.0)  # 10 s after the start
    per_device = Counter(envelope.src for _, _, envelope in delivered)
    assert set(per_device.values()) <= {40, 41} and len(per_device) == 5
    assert min(t for t, _, _ in delivered) >= 1002.0
    gaps = [b.t - a.t for a, b in itertools.pairwise(
        [e for _, _, e in delivered if e.src == "d-0"])]
    assert max(gaps) == pytest.approx(0.25) and min(gaps) == pytest.approx(0.25)
    assert len(sent) == len(delivered)


BURSTY = {"kind": "bursty", "on": 2.0, "off": 3.0, "high": 4.0, "low": 0.0}


@pytest.mark.parametrize("arrivals", ["periodic", "poisson"])
def test_devices_follow_their_streams_rate_shape_from_the_epoch(arrivals: str) -> None:
    # 2 s at 4 times the rate, 3 s at none: 8 messages per device and 5 s, all in the bursts.
    config = DriverConfig("city", [f"d-{i}" for i in range(10)], rate=1.0, arrivals=arrivals,
                          shape=BURSTY)
    clock, _, delivered, _ = virtual_drivers([config], epoch=1000.0)
    clock.run(1100.0)
    assert len(delivered) == pytest.approx(10 * 8 * 20, rel=0.05 if arrivals == "poisson" else 0.01)
    assert all((t - 1000.0) % 5.0 < 2.0 + 1e-9 for t, _, _ in delivered)


def test_a_shape_at_zero_everywhere_sends_nothing() -> None:
    silent = BURSTY | {"high": 0.0}
    clock, _, delivered, _ = virtual_drivers(
        [DriverConfig("city", ["d-1"], rate=5.0, arrivals=a, shape=silent)
         for a in ("periodic",)])
    clock.run(1100.0)
    assert delivered == []


def test_poisson_devices_average_their_rate() -> None:
    config = DriverConfig("city", [f"d-{i}" for i in range(20)], rate=5.0)
    clock, _, delivered, _ = virtual_drivers([config])
    clock.run(1100.0)
    assert len(delivered) == pytest.approx(20 * 5.0 * 100, rel=0.05)
    gaps = [b.t - a.t for a, b in itertools.pairwise(
        [e for _, _, e in delivered if e.src == "d-3"])]
    # Exponential gaps: the standard deviation is about the mean.
    assert statistics.stdev(gaps) == pytest.approx(statistics.mean(gaps), rel=0.25)


def test_the_same_seed_and_node_give_the_same_messages() -> None:
    def run(index: int, seed: int) -> list[tuple[float, str, str]]:
        config = DriverConfig("city", ["a", "b", "c"], rate=3.0)
        clock, _, delivered, _ = virtual_drivers([config], index=index, seed=seed)
        clock.run(1010.0)
        return [(e.t, e.src, e.body) for _, _, e in delivered]

    assert run(1, 7) == run(1, 7)
    assert run(1, 7) != run(2, 7)
    assert run(1, 7) != run(1, 8)


def test_ids_are_unique_and_carry_the_node_index() -> None:
    configs = [DriverConfig("city", ["a", "b"], rate=20.0),
               DriverConfig("taxi", ["a", "c"], rate=20.0, channel="exclusive")]
    clock, _, delivered, sent = virtual_drivers(configs, index=9)
    clock.run(1005.0)
    ids = [e.id for _, _, e in delivered]
    assert len(ids) == len(set(ids)) > 300
    assert {i >> SEQUENCE_BITS for i in ids} == {9}
    assert sorted(i & ((1 << SEQUENCE_BITS) - 1) for i in ids) == list(range(len(ids)))
    topics = {(e.stream, e.src): topic for _, topic, e in delivered}
    assert topics == {("city", "a"): "city/gw-1", ("city", "b"): "city/gw-1",
                      ("taxi", "a"): "taxi/gw-1/a", ("taxi", "c"): "taxi/gw-1/c"}


def test_the_access_link_delays_around_its_latency_and_drops_some() -> None:
    config = DriverConfig("city", ["a", "b"], rate=5.0, access_latency=0.05,
                          access_jitter=0.02, access_loss=0.2)
    clock, _, delivered, sent = virtual_drivers([config])
    clock.run(1200.0)
    delays = [t - e.t for t, _, e in delivered]
    assert min(delays) >= 0.0
    assert statistics.mean(delays) == pytest.approx(0.05, abs=0.005)
    assert statistics.stdev(delays) == pytest.approx(0.02, abs=0.005)
    # A lost message was sent all the same.
    assert len(delivered) / len(sent) == pytest.approx(0.8, abs=0.04)
    assert {e.id for _, _, e in delivered} < {row[0] for row in sent}
    # ... and recorded as dropped: exactly the ones that never arrived.
    assert {row[0] for row in sent if row[4]} == {row[0] for row in sent} - {
        e.id for _, _, e in delivered}


def test_jitter_never_reorders_a_devices_messages() -> None:
    config = DriverConfig("city", ["a", "b"], rate=50.0, access_latency=0.05,
                          access_jitter=0.05)
    clock, _, delivered, _ = virtual_drivers([config])
    clock.run(1020.0)
    for device in "ab":
        times = [e.t for _, _, e in delivered if e.src == device]
        assert len(times) > 900 and times == sorted(times)
    assert [t for t, _, _ in delivered] == sorted(t for t, _, _ in delivered)


def test_a_rate_change_applies_at_once_and_zero_stops() -> None:
    config = DriverConfig("city", ["a", "b"], rate=2.0, arrivals="periodic")
    clock, drivers, delivered, _ = virtual_drivers([config])
    clock.run(1010.0)
    before = len(delivered)
    drivers.set_rate(10.0, "city")
    clock.run(1020.0)
    assert len(delivered) - before == pytest.approx(2 * 10 * 10, abs=3)
    drivers.set_rate(0.0)
    stopped = len(delivered)
    clock.run(1030.0)
    assert len(delivered) == stopped
    with pytest.raises(ValueError, match="unknown stream 'taxi'"):
        drivers.set_rate(1.0, "taxi")
    with pytest.raises(ValueError, match=">= 0"):
        drivers.set_rate(-1.0)


@pytest.mark.parametrize("fmt", ["senml", "json", "csv"])
def test_bodies_are_city_readings_of_the_configured_size(fmt: str) -> None:
    config = DriverConfig("city", ["boston-01"], rate=5.0, format=fmt, size=400)
    clock, _, delivered, _ = virtual_drivers([config])
    clock.run(1002.0)
    readings = []
    for _, _, envelope in delivered:
        body = envelope.body
        if fmt == "senml":
            assert len(body) == 400
            [reading] = decode_senml(body)
        elif fmt == "json":
            assert len(body) == 400
            reading = from_json(body)
        else:
            [senml] = make_task("csv_to_senml").process(body)
            [reading] = decode_senml(senml)
        assert reading.sensor == "boston-01"
        assert reading.timestamp == pytest.approx(envelope.t, abs=1e-3)
        assert set(CITY_FIELDS) <= set(reading.values)
        readings.append(reading)
    # Valid CITY values: RIoTBench's range filter passes every one.
    range_filter = make_task("range_filter")
    assert len(readings) >= 8 and all(range_filter.process(r) for r in readings)


def test_drivers_emit_their_rate_through_the_broker(config, agents, listen) -> None:
    """Real time: 4 devices at 25 msg/s on a shared channel and 2 at 10 msg/s on exclusive
    ones, measured by a broker-side subscriber over 2 s."""
    listener = listen("city/#", "taxi/#")
    agent = agents(config("gw-5", index=5, drivers=[
        DriverConfig("city", [f"c-{i}" for i in range(4)], 25.0, arrivals="periodic", qos=1),
        DriverConfig("taxi", ["t-0", "t-1"], 10.0, channel="exclusive", qos=1)]))
    wait_for(lambda: listener.snapshot(), timeout=5)
    time.sleep(0.5)
    listener.clear()
    start = time.time()
    time.sleep(2.0)
    # The readings stamped (emitted) in those 2 s, however late a loaded host delivers them:
    # their stamps are the drivers' schedule, which a late driver catches up on.
    def stamped() -> list:
        return [h for h in listener.snapshot() if start <= h.envelope.t < start + 2.0]
    wait_for(lambda: sum(h.envelope.stream == "city" for h in stamped()) >= 180, timeout=10)
    time.sleep(0.2)
    heard = stamped()
    rates = Counter(h.envelope.stream for h in heard)
    assert rates["city"] / 2.0 == pytest.approx(100.0, rel=0.1)
    assert rates["taxi"] / 2.0 == pytest.approx(20.0, rel=0.35)  # Poisson: 40 messages
    topics = {h.topic for h in heard}
    assert topics == {"city/gw-5", "taxi/gw-5/t-0", "taxi/gw-5/t-1"}
    ids = [h.envelope.id for h in heard]
    assert len(ids) == len(set(ids)) and {i >> SEQUENCE_BITS for i in ids} == {5}
    # Latency through a loopback broker: the host clock is the devices' clock, so never
    # negative, and the median far under the 2 s measured (a quarter second holds at CI's
    # worst, load 6 on two cores, where a quiet host's is a few ms).
    latencies = [h.t - h.envelope.t for h in heard]
    assert min(latencies) >= 0 and statistics.median(latencies) < 0.25
    agent.stop()
    rows = read_csv(agent.records.directory / "sent.csv")
    assert len(rows) == agent.records.sent_count >= len(heard)
    per_stream = defaultdict(set)
    for row in rows:
        per_stream[row["stream"]].add(row["source"])
    assert per_stream == {"city": {f"c-{i}" for i in range(4)}, "taxi": {"t-0", "t-1"}}
    sent_ids = {int(row["id"]) for row in rows}
    assert set(ids) <= sent_ids


def test_sent_records_are_valid_csv_with_the_documented_header(config, agents) -> None:
    agent = agents(config("gw-2", drivers=[DriverConfig("city", ["a"], 50.0)]))
    time.sleep(1.5)  # the flush comes at least every second
    text = (agent.records.directory / "sent.csv").read_text()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["id", "stream", "source", "t_sent", "dropped"]
    assert len(rows) > 30
    assert all(len(row) == 5 and float(row[3]) > 1e9 and row[4] == "0" for row in rows[1:])


@pytest.mark.parametrize("sensor", ["boston-01", 'odd "name" 100%', "münchen/ü"])
def test_the_body_layouts_write_what_senml_and_json_encoders_write(sensor: str) -> None:
    values = (1421280000.125, -3.25, 65.1, 0.0, 1e-05, 150.0)
    reading = Reading(values[0], sensor, dict(zip(CITY_FIELDS, values[1:], strict=True)))
    layout = layouts(sensor)
    assert layout["senml"] % values == encode_senml(reading, CITY_UNITS)
    assert layout["json"] % values == to_json(reading)


def test_the_drivers_city_fields_and_units_are_the_datasets() -> None:
    from workloads.riot.specs import CITY

    assert CITY.value_columns == CITY_FIELDS
    assert CITY.units == CITY_UNITS


# The device's radio (its link's bandwidth): each reading's bytes on the air, FIFO per device.
RADIO = 250e3  # bits/s: smart-city's 802.15.4-class radio


def test_a_reading_takes_its_bytes_on_the_radio_then_the_latency() -> None:
    """180 B at 250 kbit/s: 5.76 ms on the air before the link's 5 ms."""
    config = DriverConfig("city", ["a"], rate=2.0, arrivals="periodic", size=180,
                          access_latency=0.005, access_bandwidth=RADIO)
    clock, _, delivered, sent = virtual_drivers([config])
    clock.run(1010.0)
    assert len(delivered) == len(sent) >= 19
    assert {round(t - e.t, 9) for t, _, e in delivered} == {round(180 * 8 / RADIO + 0.005, 9)}


def test_back_to_back_readings_of_one_device_queue_on_its_radio() -> None:
    """5,000 B take 0.16 s on the air, a device emits every 0.1 s: each reading waits for the
    ones before it, k-th arrives (k + 1) * 0.16 s after the first was emitted."""
    on_air = 5000 * 8 / RADIO
    config = DriverConfig("city", ["a"], rate=10.0, arrivals="periodic", size=5000,
                          access_bandwidth=RADIO)
    clock, _, delivered, _ = virtual_drivers([config])
    clock.run(1005.0)
    first = delivered[0][2].t
    arrivals = [t for t, _, _ in delivered]
    assert len(arrivals) >= 25
    assert arrivals == pytest.approx([first + (k + 1) * on_air for k in range(len(arrivals))])
    # Two streams of one device share its radio: the second stream's readings queue too.
    # (2 x 3 readings/s of 0.16 s: the radio is busy 96 % of the time.)
    both = [DriverConfig("city", ["a"], rate=3.0, size=5000, access_bandwidth=RADIO),
            DriverConfig("taxi", ["a"], rate=3.0, size=5000, access_bandwidth=RADIO)]
    clock, _, delivered, sent = virtual_drivers(both)
    clock.run(1030.0)
    free, expected = 0.0, []
    for t in sorted(row[3] for row in sent):
        free = max(free, t) + on_air
        expected.append(free)
    assert {e.stream for _, _, e in delivered} == {"city", "taxi"}
    assert [t for t, _, _ in delivered] == pytest.approx(expected[:len(delivered)])
    assert len(delivered) > 150 and max(t - e.t for t, _, e in delivered) > 3 * on_air


def test_two_devices_do_not_wait_for_each_other() -> None:
    """Twenty devices at 1/s whose readings take 0.64 s each: their emissions overlap, yet
    every reading arrives its own airtime after it was emitted."""
    config = DriverConfig("city", [f"d-{i}" for i in range(20)], rate=1.0, arrivals="periodic",
                          size=20000, access_bandwidth=RADIO)
    clock, _, delivered, _ = virtual_drivers([config])
    clock.run(1020.0)
    assert len(delivered) >= 19 * 20
    assert [t - e.t for t, _, e in delivered] == pytest.approx([20000 * 8 / RADIO]
                                                               * len(delivered))


def test_without_a_bandwidth_the_timing_is_unchanged() -> None:
    def delays(bandwidth):
        config = DriverConfig("city", ["a", "b"], rate=5.0, size=5000, access_latency=0.05,
                              access_jitter=0.02, access_loss=0.1, access_bandwidth=bandwidth)
        clock, drivers, delivered, sent = virtual_drivers([config])
        clock.run(1100.0)
        return drivers.all[0].airtime, [(t, e.id) for t, _, e in delivered], sent

    airtime, plain, sent = delays(None)
    assert airtime == 0.0 and len(plain) > 800
    # Exactly the latency and jitter, as before the radio had a bandwidth ...
    config = DriverConfig("city", ["a"], rate=5.0, arrivals="periodic", access_latency=0.05)
    clock, _, delivered, _ = virtual_drivers([config])
    clock.run(1010.0)
    assert [t - e.t for t, _, e in delivered] == pytest.approx([0.05] * len(delivered))
    # ... and a bandwidth changes when readings arrive, not which are sent or dropped.
    _, radio, sent_radio = delays(RADIO)
    assert sent_radio == sent
    plain_at = {i: t for t, i in plain}
    assert {i for _, i in radio} <= set(plain_at) and len(radio) >= len(plain) - 4
    assert all(t > plain_at[i] for t, i in radio)


def test_the_emulated_radio_is_the_models_link() -> None:
    """The same readings on the model's link from a device to its gateway (sim's Channel,
    which drops what it loses) arrive when the agent's radio delivers them."""
    from sim.stations import Channel

    config = DriverConfig("city", ["a"], rate=8.0, size=3000, access_latency=0.005,
                          access_bandwidth=RADIO)
    clock, _, delivered, sent = virtual_drivers([config])
    clock.run(1030.0)
    channel = Channel(0, "a", "gw-1", 0.005, 0.0, RADIO, 0.0, "s")
    model = [channel.transmit(t, 3000) for _, _, _, t, _ in sent]
    assert len(model) > 200 and max(b - a for a, b in zip([r[3] for r in sent], model,
                                                           strict=True)) > 0.2  # queued
    assert [t for t, _, _ in delivered] == pytest.approx([t for t in model if t <= 1030.0],
                                                         abs=1e-9)


@pytest.mark.parametrize("bandwidth", [0, -1.0, float("inf"), True, "250kbit"])
def test_a_bad_radio_bandwidth_is_named(bandwidth) -> None:
    config = DriverConfig("city", ["a"], rate=1.0, access_bandwidth=bandwidth)
    with pytest.raises(ValueError, match=r"driver 'city': access_bandwidth must be .* not "
                                         + repr(bandwidth).replace("(", r"\(")):
        virtual_drivers([config])
