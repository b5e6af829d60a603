"""Device drivers: each device's stream at its rate, held and thinned by its access link."""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable

from emu.agent.config import DriverConfig
from emu.agent.protocol import Envelope, message_id, stream_topic

# CITY's value columns and units (workloads.riot.specs; a test checks they agree), here so an
# idle gateway loads nothing of workloads: the fields of the readings devices send, drawn
# around a city's day.
CITY_FIELDS = ("temperature", "humidity", "light", "dust", "airquality_raw")
CITY_UNITS = {"temperature": "Cel", "humidity": "%RH", "light": "lx"}
# A late node catches up on emissions at most this far back, then skips ahead.
CATCH_UP = 1.0
FORMATS = ("senml", "json", "csv")


class Device:
    """One device's stream: a random stream of its own for arrivals and readings, and one for
    its access link (jitter, loss), so its messages are the same whatever else the node does."""

    __slots__ = ("driver", "name", "topic", "rng", "link", "token", "next_t",
                 "last_arrival", "base", "layout")

    def __init__(self, driver: Driver, name: str, topic: str, seed: str) -> None:
        self.driver = driver
        self.name = name
        self.topic = topic
        self.rng = random.Random(f"{seed}:arrivals")
        self.link = random.Random(f"{seed}:link")
        self.token = 0  # a rate change makes the emission already set a stale one
        self.next_t = 0.0
        self.last_arrival = 0.0
        self.base = self.rng.uniform(-5.0, 25.0)  # this sensor's mean temperature
        self.layout = layouts(name)


class Driver:
    """A DriverConfig at run time: its devices and its current rate (msg/s per device)."""

    def __init__(self, config: DriverConfig, node: str, seed: str) -> None:
        if config.arrivals not in ("periodic", "poisson"):
            raise ValueError(f"driver {config.stream!r}: arrivals must be periodic or poisson, "
                             f"not {config.arrivals!r}")
        if config.format not in FORMATS:
            raise ValueError(f"driver {config.stream!r}: format must be one of "
                             f"{', '.join(FORMATS)}, not {config.format!r}")
        if config.channel not in ("shared", "exclusive"):
            raise ValueError(f"driver {config.stream!r}: channel must be shared or exclusive, "
                             f"not {config.channel!r}")
        if config.rate < 0:
            raise ValueError(f"driver {config.stream!r}: rate must be >= 0, not {config.rate}")
        self.config = config
        self.stream = config.stream
        self.rate = float(config.rate)
        self.poisson = config.arrivals == "poisson"
        self.shape = config.shape
        if self.shape is not None:
            # Imported only for a shaped stream; a plain function of the shape's fields.
            from functools import partial

            from workloads import shapes

            self._next_emission = shapes.next_emission
            self._factor = partial(shapes.factor, self.shape)
            self.peak = shapes.peak(self.shape)  # the largest multiple of the rate reached
        self.devices = [Device(self, device, stream_topic(config.stream, node, device,
                                                          config.channel),
                               f"{seed}:{config.stream}:{device}")
                        for device in config.devices]
        self.topics = sorted({device.topic for device in self.devices})

    def gap(self, rng: random.Random) -> float:
        return rng.expovariate(self.rate) if self.poisson else 1.0 / self.rate

    def phase(self, rng: random.Random) -> float:
        """Devices start at random phases so that periodic ones do not all fire at once."""
        return rng.expovariate(self.rate) if self.poisson else rng.random() / self.rate

    def shaped(self, rng: random.Random, t: float, first: bool = False) -> float:
        """A shaped stream's emission after one at run time t (seconds since the epoch), or its
        first at or after t, as the simulator's sources schedule them
        (`workloads.shapes.next_emission`)."""
        peak = self.rate * self.peak
        if peak <= 0:
            return math.inf  # a shape that is zero everywhere: no emissions
        return self._next_emission(rng, t, self.rate, peak, self._factor, self.poisson, first)

    def body(self, device: Device, t: float) -> str:
        """A CITY-like reading of the device at t, in the stream's format, padded to size."""
        rng = device.rng
        hour = (t / 3600.0) % 24.0
        warmth = math.sin(2 * math.pi * (hour - 9.0) / 24.0)
        sun = max(0.0, math.sin(math.pi * (hour - 6.0) / 12.0))
        temperature = device.base + 4.0 * warmth + rng.gauss(0.0, 0.4)
        dust = 40.0 * math.exp(rng.gauss(0.0, 0.25))
        humidity = min(99.0, max(5.0, 65.0 - 2.5 * (temperature - device.base)
                                 + rng.gauss(0.0, 3.0)))
        values = (round(t, 3), round(temperature, 2), round(humidity, 1),
                  round(3000.0 * sun * rng.uniform(0.6, 1.0) + 10.0, 1), round(dust, 2),
                  round(8.0 + 0.2 * dust + 0.12 * humidity, 1))
        fmt = self.config.format
        if fmt == "csv":
            # Imported here: senml brings csv, pathlib and dataclasses, which a gateway
            # emulating no CSV stream need not load under QEMU.
            from workloads.riot.senml import Reading, to_row

            reading = Reading(values[0], device.name,
                              dict(zip(CITY_FIELDS, values[1:], strict=True)))
            return ",".join(to_row(reading, CITY_FIELDS))
        return _padded(device.layout[fmt] % values, self.config.size, fmt)


def layouts(sensor: str) -> dict[str, str]:
    """What encode_senml and to_json write for a CITY reading of sensor, with %r where the
    time and the values go: the hot path fills them in without building dicts to encode."""
    def quoted(text: str) -> str:
        return json.dumps(text).replace("%", "%%")

    records = []
    for i, name in enumerate(CITY_FIELDS):
        base = f'"bn":{quoted(sensor + "/")},"bt":%r,' if i == 0 else ""
        unit = f',"u":{quoted(CITY_UNITS[name])}' if name in CITY_UNITS else ""
        records.append(f'{{{base}"n":{quoted(name)},"v":%r{unit}}}')
    values = ",".join(f"{quoted(name)}:%r" for name in CITY_FIELDS)
    return {"senml": "[" + ",".join(records) + "]",
            "json": f'{{"timestamp":%r,"sensor":{quoted(sensor)},"values":{{{values}}}}}'}


def _padded(text: str, size: int, fmt: str) -> str:
    """The SenML pack or JSON object with a `pad` string field bringing it to size bytes."""
    if fmt == "senml":
        head, tail, cut = ',{"n":"pad","vs":"', '"}', -1   # a record before the closing "]"
    else:
        head, tail, cut = ',"pad":"', '"', -2              # a value before the closing "}}"
    missing = size - len(text) - len(head) - len(tail)
    if missing < 0:
        return text
    return text[:cut] + head + "x" * missing + tail + text[cut:]


class Drivers:
    """Every device of the node on the scheduler's heap: one timed emission per device, not a
    thread per device. `deliver(topic, envelope, driver)` takes a message once the access
    link has held it; `record(id, stream, device, t_sent, dropped)` notes every emission."""

    def __init__(self, configs: list[DriverConfig], node: str, index: int, seed: int,
                 epoch: float, at: Callable[..., None], clock: Callable[[], float],
                 deliver: Callable[[str, Envelope, Driver], None],
                 record: Callable[[int, str, str, float, bool], None]) -> None:
        streams = [c.stream for c in configs]
        if len(set(streams)) != len(streams):
            raise ValueError(f"node {node}: a stream has two drivers: {streams}")
        self.node = node
        self.index = index
        self.epoch = epoch
        self.by_stream = {c.stream: Driver(c, node, f"{seed}:{index}") for c in configs}
        self._at = at
        self._clock = clock
        self._deliver = deliver
        self._record = record
        self._sequence = itertools.count()
        self.started = False

    @property
    def topics(self) -> set[str]:
        return {topic for driver in self.by_stream.values() for topic in driver.topics}

    def start(self) -> None:
        """Set every device's first emission, at the run's epoch plus the stream's start."""
        if self.started:
            return
        self.started = True
        for driver in self.by_stream.values():
            self._schedule(driver)

    def set_rate(self, rate: float, stream: str | None = None) -> None:
        """Change the rate of one stream or of all; devices continue at the new rate now."""
        if rate < 0 or not math.isfinite(rate):
            raise ValueError(f"publish.rate must be a finite number >= 0, not {rate}")
        if stream is not None and stream not in self.by_stream:
            known = ", ".join(sorted(self.by_stream)) or "none"
            raise ValueError(f"unknown stream {stream!r}; this node's streams: {known}")
        for driver in ([self.by_stream[stream]] if stream else self.by_stream.values()):
            driver.rate = float(rate)
            if self.started:
                self._schedule(driver)

    def _schedule(self, driver: Driver) -> None:
        begin = max(self.epoch + driver.config.start, self._clock())
        for device in driver.devices:
            device.token += 1
            if driver.rate > 0:
                device.next_t = begin + driver.phase(device.rng)
                if driver.shape is not None:
                    device.next_t = self.epoch + driver.shaped(
                        device.rng, device.next_t - self.epoch, first=True)
                if math.isfinite(device.next_t):
                    self._at(device.next_t, self._emit, device, device.token)

    def _emit(self, device: Device, token: int) -> None:
        if token != device.token:
            return  # set before a rate change
        driver = device.driver
        config = driver.config
        t = self._clock()
        envelope = Envelope(message_id(self.index, next(self._sequence)), driver.stream,
                            device.name, t, 0, driver.body(device, t))
        link = device.link
        if config.access_jitter:
            # As the simulator's links: delay around the mean, never below zero, never
            # overtaking the device's previous message.
            delay = link.gauss(config.access_latency, config.access_jitter)
            arrival = t + (delay if delay > 0.0 else 0.0)
            if arrival < device.last_arrival:
                arrival = device.last_arrival
        else:
            arrival = t + config.access_latency
        device.last_arrival = arrival
        dropped = bool(config.access_loss) and link.random() < config.access_loss
        self._record(envelope.id, driver.stream, device.name, t, dropped)
        if not dropped:
            if arrival > t:
                self._at(arrival, self._deliver, device.topic, envelope, driver)
            else:
                self._deliver(device.topic, envelope, driver)
        if driver.shape is None:
            following = device.next_t + driver.gap(device.rng)
        else:
            following = self.epoch + driver.shaped(device.rng, device.next_t - self.epoch)
        if following < t - CATCH_UP:
            following = t
        device.next_t = following
        if math.isfinite(following):
            self._at(following, self._emit, device, token)
