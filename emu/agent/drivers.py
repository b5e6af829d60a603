"""Device drivers: each device's stream at its rate, held and thinned by its access link.

A device's radio to its gateway is what the model's link from the device to the gateway is
(sim.stations.Channel): each reading takes its size in bytes (the stream's `size`, no headers,
as the model sends it: `airtime`) at the radio's bandwidth, behind the readings the device
queued before it, whatever stream they belong to (a FIFO per device: `Radio`; two devices never
wait for each other), then latency and jitter (never overtaking the device's previous reading),
and a lost reading is dropped after it took its time on the air. All on the agent's clock,
the run's emulated one: a dilated run needs nothing more.

A moving device (the hybrid backend) changes both while the run goes on: `Drivers.link` sets
its access link (latency, jitter, loss, and the radio's bandwidth, which queues its messages
behind each other), and a handover takes it from one gateway's drivers (`leave`, which answers
its whole state: the random streams, the next emission, the link) to another's (`join`), so it
goes on with exactly the readings and emission times it would have had: none skipped, none
sent twice. A message already on the old access link arrives there, as a radio frame sent
before the handover does.
"""

from __future__ import annotations

import dataclasses
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


def airtime(size: int, bits_per_s: float) -> float:
    """Seconds a reading of `size` bytes takes on a radio of `bits_per_s`: its payload alone,
    as sim.stations.Channel.transmit charges it (a test holds the two equal)."""
    return size * 8 / bits_per_s


class Radio:
    """A device's radio, shared by the streams it sends from a node: when it has sent what it
    queued, and when its last reading arrived (jitter never reorders a device's readings)."""

    __slots__ = ("free", "last_arrival")

    def __init__(self) -> None:
        self.free = 0.0
        self.last_arrival = 0.0


class Device:
    """One device's stream: a random stream of its own for arrivals and readings, and one for
    its access link (jitter, loss), so its messages are the same whatever else the node does."""

    __slots__ = ("driver", "name", "topic", "rng", "link", "token", "next_t",
                 "base", "layout", "access", "radio")

    def __init__(self, driver: Driver, name: str, topic: str, seed: str) -> None:
        self.driver = driver
        self.name = name
        self.topic = topic
        self.rng = random.Random(f"{seed}:arrivals")
        self.link = random.Random(f"{seed}:link")
        self.token = 0  # a rate change makes the emission already set a stale one
        self.next_t = 0.0
        self.base = self.rng.uniform(-5.0, 25.0)  # this sensor's mean temperature
        self.layout = layouts(name)
        # Its own access link (latency, jitter, loss, bits/s or 0), set while it moves;
        # None: the driver's.
        self.access: tuple[float, float, float, float] | None = None
        # Its radio, one per device of the node (Drivers gives its streams the same one).
        self.radio = Radio()

    def state(self) -> dict:
        """What a handover carries to the next gateway (JSON)."""
        return {"name": self.name, "rng": _rng_state(self.rng), "link": _rng_state(self.link),
                "next_t": self.next_t, "last_arrival": self.radio.last_arrival,
                "base": self.base, "access": list(self.access) if self.access else None,
                "free": self.radio.free}

    def restore(self, state: dict) -> None:
        self.rng.setstate(_rng_tuple(state["rng"]))
        self.link.setstate(_rng_tuple(state["link"]))
        self.next_t = float(state["next_t"])
        self.base = float(state["base"])
        self.access = tuple(state["access"]) if state.get("access") else None
        # The device's streams share its radio: the latest of what each of them carries.
        radio = self.radio
        radio.last_arrival = max(radio.last_arrival, float(state["last_arrival"]))
        radio.free = max(radio.free, float(state.get("free", 0.0)))


def _rng_state(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_tuple(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


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
        bandwidth = config.access_bandwidth
        if bandwidth is not None and (isinstance(bandwidth, bool)
                                      or not isinstance(bandwidth, (int, float))
                                      or not math.isfinite(bandwidth) or bandwidth <= 0):
            raise ValueError(f"driver {config.stream!r}: access_bandwidth must be a finite "
                             f"number of bits/s > 0 or None, not {bandwidth!r}")
        self.config = config
        self.stream = config.stream
        # Seconds each reading spends on its device's radio (0: a link without a bandwidth).
        self.airtime = 0.0 if bandwidth is None else airtime(config.size, bandwidth)
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
                 record: Callable[[int, str, str, float, bool], None],
                 first_sequence: int = 0) -> None:
        self.node = node
        self.index = index
        self.epoch = epoch
        self.seed = seed
        # A stream may have several drivers on a node: one per device-link shape.
        self.all = [Driver(c, node, f"{seed}:{index}") for c in configs]
        radios: dict[str, Radio] = {}
        for driver in self.all:
            for device in driver.devices:
                device.radio = radios.setdefault(device.name, device.radio)
        self._at = at
        self._clock = clock
        self._deliver = deliver
        self._record = record
        # Message ids' sequence numbers start here (the host's load generator numbers a
        # gateway's simulated devices apart from its agent's: protocol.LOAD_SEQUENCE).
        self._sequence = itertools.count(first_sequence)
        self.started = False

    @property
    def topics(self) -> set[str]:
        return {topic for driver in self.all for topic in driver.topics}

    @property
    def by_stream(self) -> dict[str, Driver]:
        """Each stream's first driver (its rate is all of the stream's drivers' rate)."""
        first: dict[str, Driver] = {}
        for driver in self.all:
            first.setdefault(driver.stream, driver)
        return first

    def start(self) -> None:
        """Set every device's first emission, at the run's epoch plus the stream's start."""
        if self.started:
            return
        self.started = True
        for driver in self.all:
            self._schedule(driver)

    def set_rate(self, rate: float, stream: str | None = None) -> None:
        """Change the rate of one stream or of all; devices continue at the new rate now."""
        if rate < 0 or not math.isfinite(rate):
            raise ValueError(f"publish.rate must be a finite number >= 0, not {rate}")
        if stream is not None and stream not in self.by_stream:
            known = ", ".join(sorted(self.by_stream)) or "none"
            raise ValueError(f"unknown stream {stream!r}; this node's streams: {known}")
        for driver in (d for d in self.all if stream is None or d.stream == stream):
            driver.rate = float(rate)
            if self.started:
                self._schedule(driver)

    def link(self, device: str, latency: float, jitter: float = 0.0, loss: float = 0.0,
             bandwidth: float = 0.0) -> None:
        """Set one device's access link from now on (a moving user's radio)."""
        values = {"latency": latency, "jitter": jitter, "loss": loss, "bandwidth": bandwidth}
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise ValueError(f"device.link: {key} must be a finite number >= 0, not "
                                 f"{value!r}")
        if loss > 1:
            raise ValueError(f"device.link: loss is a fraction from 0 to 1, not {loss}")
        for found in self._devices(device):
            found.access = (float(latency), float(jitter), float(loss), float(bandwidth))

    def leave(self, device: str) -> dict:
        """Take a device off this node (a handover): it emits no more here; its state and its
        drivers' configs, one per stream it sends, go to the next gateway's `join`."""
        streams = []
        for found in self._devices(device):
            driver = found.driver
            found.token += 1  # its emission already set is stale now
            driver.devices.remove(found)
            driver.topics = sorted({d.topic for d in driver.devices})
            config = dataclasses.asdict(driver.config)
            del config["devices"]
            streams.append({"driver": {**config, "rate": driver.rate}, "state": found.state()})
        return {"device": device, "streams": streams}

    def join(self, moved: dict) -> list[str]:
        """Take a device another node's `leave` gave up; it goes on from its next emissions.
        Answers the topics it publishes on here."""
        name = moved["device"]
        if name in self.device_names():
            raise ValueError(f"device {name!r} is on {self.node} already")
        fields = {f.name for f in dataclasses.fields(DriverConfig)}
        topics = []
        radio = Radio()  # its streams' one radio here, as on the node it left
        for stream in moved["streams"]:
            config = dict(stream["driver"])
            unknown = sorted(set(config) - fields)
            if unknown:
                raise ValueError(f"device.join: unknown driver fields {unknown}")
            same = {**config, "devices": []}
            driver = next((d for d in self.all
                           if {**dataclasses.asdict(d.config), "devices": [],
                               "rate": d.rate} == same), None)
            if driver is None:
                driver = Driver(DriverConfig(**same), self.node, f"{self.seed}:{self.index}")
                self.all.append(driver)
            device = Device(driver, name, stream_topic(driver.stream, self.node, name,
                                                       driver.config.channel),
                            f"{self.seed}:moved:{driver.stream}:{name}")
            device.radio = radio
            device.restore(stream["state"])
            driver.devices.append(device)
            driver.topics = sorted({d.topic for d in driver.devices})
            if self.started and driver.rate > 0 and math.isfinite(device.next_t):
                self._at(max(device.next_t, self._clock()), self._emit, device, device.token)
            topics.append(device.topic)
        return topics

    def device_names(self) -> set[str]:
        return {d.name for driver in self.all for d in driver.devices}

    def _devices(self, name: str) -> list[Device]:
        """The device's one Device per stream it sends from this node."""
        found = [device for driver in self.all for device in driver.devices
                 if device.name == name]
        if found:
            return found
        known = sorted(d.name for driver in self.all for d in driver.devices)
        raise ValueError(f"no device {name!r} on {self.node}; its devices: "
                         f"{', '.join(known[:20]) or 'none'}")

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
        if device.access is None:
            latency, jitter, loss, on_air = (config.access_latency, config.access_jitter,
                                             config.access_loss, driver.airtime)
        else:  # its own link, set while it moves
            latency, jitter, loss, bandwidth = device.access
            on_air = airtime(config.size, bandwidth) if bandwidth > 0 else 0.0
        radio = device.radio
        sent = t
        if on_air:
            # As the simulator's links: behind what the device's radio has queued (FIFO).
            sent = (radio.free if radio.free > t else t) + on_air
            radio.free = sent
        if jitter:
            # As the simulator's links: delay around the mean, never below zero, never
            # overtaking the device's previous message.
            delay = link.gauss(latency, jitter)
            arrival = sent + (delay if delay > 0.0 else 0.0)
            if arrival < radio.last_arrival:
                arrival = radio.last_arrival
        else:
            arrival = sent + latency
        radio.last_arrival = arrival
        dropped = bool(loss) and link.random() < loss
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
