"""Devices emitting their streams: periodic or Poisson arrivals under a rate shape."""

from __future__ import annotations

from sim.message import Message
from workloads.rates import Constant
from workloads.shapes import next_emission
from workloads.spec import StreamSpec


class Source:
    """One device's stream; it is its own SimPy event for its next emission.

    When the device's first link carries nothing but this stream (one stream, no QoS 1
    resends), the link's queue depends on this source alone, so its next message can be
    put on the link arithmetically when the previous one lands: one SimPy event per message
    less, with the same times as emitting at each instant.
    """

    __slots__ = ("callbacks", "_ok", "_value", "env", "stream", "stream_index", "device_index",
                 "topic", "rng", "end", "path", "deliver", "network", "new_id", "emitted",
                 "_rate", "_peak", "_shape", "_poisson", "_private", "_on_fire",
                 "_on_landed", "_at", "allow")

    def __init__(self, env, stream: StreamSpec, stream_index: int, device_index: int, topic: str,
                 rng, end: float, path: tuple, deliver, network, new_id, private: bool):
        """Messages go along `path` to `deliver`; `private`: the first link is this source's."""
        self.callbacks = None
        self._ok = True
        self._value = None
        self.env = env
        self.stream = stream
        self.stream_index = stream_index
        self.device_index = device_index
        self.topic = topic
        self.rng = rng
        self.end = end
        self.path = path
        self.deliver = deliver
        self.network = network
        self.new_id = new_id
        self.emitted = 0
        self._rate = stream.rate
        self._shape = None if isinstance(stream.shape, Constant) else stream.shape
        self._peak = stream.rate * (self._shape.peak if self._shape else 1.0)
        self._poisson = stream.arrivals == "poisson"
        self._private = private and bool(path)
        self._at = env.at
        self._on_fire = [self._fire]  # SimPy only reads callback lists: one serves every time
        self._on_landed = [self._landed]
        self.allow = None  # gate()'s question, asked before each emission
        if self._peak > 0:
            # Sources start at a random phase so that periodic ones do not all fire at once.
            first = stream.start + (rng.expovariate(self._peak) if self._poisson
                                    else rng.random() / self._peak)
            self._arm(self._accept(first))

    def gate(self, allow) -> None:
        """Ask `allow(source, t)` before each emission from now on (a device's battery,
        sim.features.energy): False, and that emission and every later one are not made.
        Called before the run starts. A gated source's emissions each get an event of their
        own (not the private link's shortcut, which puts a message on the link before its
        time comes), at the same times; a source never gated pays nothing for this."""
        self.allow = allow
        self._private = False
        self._on_fire[0] = self._gated_fire

    def _gated_fire(self, event) -> None:
        now = self.env._now
        if self.allow(self, now):
            self._fire(event)
        else:
            self.end = now  # nothing more is armed

    def _next(self, t: float) -> float:
        """The emission after one at time t."""
        if self._shape is None:
            return t + (self.rng.expovariate(self._peak) if self._poisson else 1.0 / self._peak)
        return next_emission(self.rng, t, self._rate, self._peak, self._shape.factor,
                             self._poisson, end=self.end)

    def _accept(self, t: float) -> float:
        """The first emission at or after t."""
        if self._shape is None:
            return t
        return next_emission(self.rng, t, self._rate, self._peak, self._shape.factor,
                             self._poisson, first=True, end=self.end)

    def _arm(self, t: float) -> None:
        if t < self.end:
            self.callbacks = self._on_fire
            self._at(self, t)

    def _message(self, t: float) -> Message:
        self.emitted += 1
        stream = self.stream
        return Message(self.new_id(), self.stream_index, self.device_index, t, stream.size,
                       stream.qos, stream.retry, self.topic)

    def _fire(self, _event) -> None:
        now = self.env._now
        if self._private:
            self._put_on_link(now)
            return
        self.network.send(self._message(now), self.path, self.deliver)
        following = self._next(now)
        if following < self.end:  # _arm written out: this runs once per message
            self.callbacks = self._on_fire
            self._at(self, following)

    def _put_on_link(self, t: float) -> None:
        """Emit at time t (now, or already past) straight onto the private first link."""
        channel, now = self.path[0], self.env._now
        while t < self.end:
            msg = self._message(t)
            msg.path, msg.leg, msg.deliver, msg.t_attempt = self.path, 0, self.deliver, t
            arrival = channel.transmit(t, msg.size)
            if arrival >= 0.0:
                msg.callbacks = self._on_landed
                self._at(msg, arrival)
                return
            self.network.lose(msg, channel, t)
            t = self._next(t)
            if t >= now:
                self._arm(t)  # nothing will land to wake the source: it wakes itself
                return

    def _landed(self, msg: Message) -> None:
        following = self._next(msg.t_sent)
        if following < self.end:
            self._put_on_link(following)
        self.network.arrived(msg)
