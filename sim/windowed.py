"""Windowed operators in the model: a tumbling count per processing-time window.

Each instance closes window k at (k + 1) * size plus a timer jitter of its own, drawn per
window: two instances fed the same events (a parallel migration) then disagree now and then
about which window an event near a boundary belongs to, which is what makes the thesis's
strong synchronisation rare and the synchronisation factor S matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.message import Message
from sim.operators import OperatorInstance


@dataclass(slots=True)
class OpenWindow:
    """The state a migration moves: the window being filled, as the thesis defines state."""

    index: int
    count: int = 0
    first_sn: int = -1
    last_sn: int = -1
    t_first: float = 0.0

    def state_bytes(self, per_event: int, base: int) -> int:
        return base + self.count * per_event


class Alarm:
    """A reusable SimPy event for a timer that is set again each time it rings."""

    __slots__ = ("callbacks", "_ok", "_value", "_ring", "armed")

    def __init__(self, ring):
        self.callbacks = None
        self._ok = True
        self._value = None
        self._ring = [ring]
        self.armed = False

    def set(self, at, time: float) -> None:
        self.callbacks = self._ring
        self.armed = True
        at(self, time)


@dataclass(slots=True)
class WindowOutput:
    operator: str
    node: str
    index: int
    last_sn: int
    count: int
    t_first: float  # when the window's first event was processed
    t_close: float


class WindowedInstance(OperatorInstance):
    """An operator instance that counts events per window and hands each closed window to
    `on_output(instance, output)` instead of passing messages on."""

    __slots__ = ("operator", "size", "jitter", "rng", "on_output", "active", "recording", "open",
                 "boundary", "_alarm", "eager", "recorded_to", "closed_sn")

    def __init__(self, env, node: str, node_index: int, cpu, cost: float, operator: str,
                 size: float, jitter: float, rng, on_output, log,
                 state: OpenWindow | None = None):
        """`log`: where a sink records the messages it consumed (None: not a sink)."""
        super().__init__(env, node, node_index, cpu, cost, 1.0, None, None, None, log)
        self.operator = operator
        self.size = size
        self.jitter = jitter
        self.rng = rng
        self.on_output = on_output
        self.active = True
        self.recording = log is not None  # off while a parallel migration's target mirrors
        # The serial number up to which another instance recorded the consumption (a parallel
        # migration's source): a mirrored copy of one of those is not recorded again here.
        self.recorded_to = -1
        self.closed_sn = -1  # the last serial number in a window this instance closed
        self.open = state or OpenWindow(int(env.now // size))
        self.boundary = self._end_of(self.open.index)
        self._alarm = Alarm(self._ring)
        # Off: each input counted when its job finishes (sim.features.recovery's checkpoints and
        # crashes must see only finished work).
        self.eager = True
        if self.open.count:  # a restored window may have ended already: closed at once
            self._alarm.set(self._at, max(self.boundary, env.now))

    def _end_of(self, index: int) -> float:
        return (index + 1) * self.size + (abs(self.rng.gauss(0.0, self.jitter))
                                          if self.jitter else 0.0)

    def receive(self, msg: Message) -> None:
        now = self.env._now
        done = self.cpu.admit(now, self.cost) if self.cost else now
        if done < self.boundary and self.eager:
            # Nothing follows a window operator's input but the count: a job that finishes
            # inside the current window is counted now, with its finish time, as for a sink.
            self._count(msg, done)
        else:
            msg.callbacks = self._on_processed
            self._at(msg, done)

    def _processed(self, msg: Message) -> None:
        self._count(msg, self.env._now)

    def _count(self, msg: Message, t: float) -> None:
        self._settle(t)
        if not self.active:
            return  # stopped by a migration: the events are the other instance's now
        while t >= self.boundary:
            self._close(t)
        window = self.open
        if window.count == 0:
            window.first_sn, window.t_first = msg.sn, t
            if not self._alarm.armed:  # only a window with events needs closing
                self._alarm.set(self._at, self.boundary)
        window.count += 1
        window.last_sn = msg.sn
        if self.recording and msg.sn > self.recorded_to:
            self._log.delivered(msg, self.node_index, t)

    def _ring(self, _alarm) -> None:
        """The window timer: close the window if its end has come, and set the next alarm
        (an event may have closed it already and moved the end)."""
        self._alarm.armed = False
        if not self.active:
            return
        now = self.env._now
        if now >= self.boundary:
            self._close(now)
        if self.open.count:  # the end moved on while the alarm waited: wait for the new one
            self._alarm.set(self._at, max(self.boundary, now))

    def _close(self, now: float) -> None:
        window = self.open
        if window.count:
            self.closed_sn = window.last_sn
            self.on_output(self, WindowOutput(self.operator, self.node, window.index,
                                              window.last_sn, window.count, window.t_first, now))
        self.open = OpenWindow(window.index + 1)
        self.boundary = self._end_of(self.open.index)

    def crash(self) -> None:
        """As an operator's crash, and its open window is empty (its events are lost)."""
        super().crash()
        self.open = OpenWindow(self.open.index)

    def stop(self) -> OpenWindow:
        """Stop consuming and closing windows; returns the open window (the state)."""
        self.active = False
        return self.open

    def counted_to(self) -> int:
        """The serial number of the last input this instance counted (in its input's order)."""
        return self.open.last_sn if self.open.count else self.closed_sn
