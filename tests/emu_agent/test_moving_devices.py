"""A moving device: its access link set while it runs, and a handover between two nodes'
drivers that keeps every reading and emission time (virtual clock)."""

from __future__ import annotations

import json

import pytest

from emu.agent.config import DriverConfig
from emu.agent.drivers import Drivers

from .test_drivers import VirtualTime


def _node(time_: VirtualTime, node: str, index: int, configs, delivered: list, sent: list):
    drivers = Drivers(configs, node, index, 7, 1000.0, time_.at, time_.clock,
                      lambda topic, envelope, driver: delivered.append(
                          (time_.now, node, topic, envelope)),
                      lambda *row: sent.append((node, *row)))
    drivers.start()
    return drivers


def _config(devices, arrivals="poisson"):
    return DriverConfig("city", devices, rate=5.0, arrivals=arrivals, size=100,
                        access_latency=0.002)


@pytest.mark.parametrize("arrivals", ["periodic", "poisson"])
def test_a_handover_keeps_every_reading_and_emission_time(arrivals: str) -> None:
    # Unmoved: device u-1 on gw-1 for 20 s.
    still_time = VirtualTime(1000.0)
    still: list = []
    _node(still_time, "gw-1", 1, [_config(["u-1", "u-2"], arrivals)], still, [])
    still_time.run(1020.0)

    # Moved: the same device leaves gw-1 at 8 s and joins gw-2 (which had no such stream).
    time_ = VirtualTime(1000.0)
    delivered: list = []
    sent: list = []
    gw1 = _node(time_, "gw-1", 1, [_config(["u-1", "u-2"], arrivals)], delivered, sent)
    gw2 = _node(time_, "gw-2", 2, [], delivered, sent)
    time_.run(1008.0)
    moved = json.loads(json.dumps(gw1.leave("u-1")))  # crosses the wire as JSON
    assert gw2.join(moved) == ["city/gw-2"]
    time_.run(1020.0)

    def readings(rows, device):
        return [(round(t, 9), envelope.body) for t, *_, envelope in rows
                if envelope.src == device]

    def emitted(rows, device):
        return [envelope.t for _t, *_, envelope in rows if envelope.src == device]

    assert emitted(delivered, "u-1") == pytest.approx(emitted(still, "u-1"))
    assert [b for _, b in readings(delivered, "u-1")] == [b for _, b in readings(still, "u-1")]
    assert len(emitted(still, "u-1")) > 80
    nodes = [node for _t, node, _topic, envelope in delivered if envelope.src == "u-1"]
    before = [e.t for _t, node, _topic, e in delivered if e.src == "u-1" and node == "gw-1"]
    after = [e.t for _t, node, _topic, e in delivered if e.src == "u-1" and node == "gw-2"]
    assert nodes == ["gw-1"] * len(before) + ["gw-2"] * len(after)
    assert max(before) < 1008.0 <= min(after)
    ids = [e.id for *_, e in delivered]
    assert len(ids) == len(set(ids))  # ids stay unique: each node numbers its own
    # The device that stayed is untouched by its neighbour's move.
    assert readings(delivered, "u-2") == readings(still, "u-2")


def test_a_devices_own_link_delays_queues_and_drops() -> None:
    time_ = VirtualTime(1000.0)
    delivered: list = []
    gw = _node(time_, "gw-1", 1, [_config(["u-1"], "periodic")], delivered, [])
    time_.run(1002.0)
    # 50 ms, and a radio that sends 100 B in 0.1 s: at 5/s each message waits its turn.
    gw.link("u-1", latency=0.05, bandwidth=8000)
    time_.run(1004.0)
    late = [(t - e.t) for t, _n, _topic, e in delivered if e.t >= 1002.0]
    assert late and min(late) == pytest.approx(0.05 + 0.1, abs=1e-9)
    gw.link("u-1", latency=0.0, loss=1.0)  # out of range: everything lost
    count = len(delivered)
    time_.run(1010.0)
    in_flight = [e for t, _n, _topic, e in delivered[count:] if e.t < 1004.0]
    assert len(delivered) - count == len(in_flight)


@pytest.mark.parametrize(("args", "message"), [
    ({"latency": -1.0}, "latency must be a finite number >= 0"),
    ({"latency": 0.0, "loss": 2.0}, "loss is a fraction"),
    ({"latency": float("nan")}, "latency must be a finite number"),
])
def test_bad_link_values_are_refused(args, message) -> None:
    gw = _node(VirtualTime(), "gw-1", 1, [_config(["u-1"])], [], [])
    with pytest.raises(ValueError, match=message):
        gw.link("u-1", **args)


def test_unknown_and_duplicate_devices_are_named() -> None:
    time_ = VirtualTime()
    gw1 = _node(time_, "gw-1", 1, [_config(["u-1"])], [], [])
    with pytest.raises(ValueError, match="no device 'u-9' on gw-1; its devices: u-1"):
        gw1.leave("u-9")
    moved = gw1.leave("u-1")
    gw2 = _node(time_, "gw-2", 2, [_config(["u-1"])], [], [])
    with pytest.raises(ValueError, match="device 'u-1' is on gw-2 already"):
        gw2.join(moved)


def test_a_device_with_two_streams_moves_with_both() -> None:
    time_ = VirtualTime(1000.0)
    delivered: list = []
    other = DriverConfig("air", ["u-1"], rate=2.0, arrivals="periodic", size=50,
                         channel="exclusive")
    gw1 = _node(time_, "gw-1", 1, [_config(["u-1"]), other], delivered, [])
    gw2 = _node(time_, "gw-2", 2, [], delivered, [])
    time_.run(1003.0)
    moved = gw1.leave("u-1")
    assert [s["driver"]["stream"] for s in moved["streams"]] == ["city", "air"]
    assert gw2.join(moved) == ["city/gw-2", "air/gw-2/u-1"]
    assert gw1.device_names() == set() and gw2.device_names() == {"u-1"}
    count = len(delivered)
    time_.run(1006.0)
    streams = {(node, e.stream) for _t, node, _topic, e in delivered[count:]}
    assert streams == {("gw-2", "city"), ("gw-2", "air")}


def test_a_stream_may_have_a_driver_per_device_link_on_one_node() -> None:
    # Devices of one stream on links of 2 ms and 10 ms: two drivers (emu.cluster.deployment groups
    # devices by their link), which once stopped the agent ("a stream has two drivers").
    time_ = VirtualTime(1000.0)
    delivered: list = []
    near = DriverConfig("city", ["s-1"], rate=5.0, arrivals="periodic", access_latency=0.002)
    far = DriverConfig("city", ["s-2"], rate=5.0, arrivals="periodic", access_latency=0.010)
    gw = _node(time_, "gw-1", 1, [near, far], delivered, [])
    time_.run(1002.0)
    delay = {e.src: round(t - e.t, 6) for t, _n, _topic, e in delivered}
    assert delay == {"s-1": 0.002, "s-2": 0.010}
    gw.set_rate(0.0, "city")  # both drivers of the stream stop
    count = len(delivered)
    time_.run(1005.0)
    assert len(delivered) - count <= 2  # only what was on the links already
    assert gw.device_names() == {"s-1", "s-2"} and gw.topics == {"city/gw-1"}
