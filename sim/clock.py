"""The model's event loop: SimPy's environment on a two-tier event queue, in SimPy's order,
with the garbage collector paused while the model runs.

A run keeps every source's next emission and every open window's timer queued, tens of
thousands of events, while nearly all the work is in events due within milliseconds (a hop, a
service). In one heap each push and pop walks all its levels through memory the caches no
longer hold. Here only the events of the current time bucket (1/64 s) form a heap; later ones
are appended unsorted to their bucket's list, which is heapified when the clock reaches it.
Events still come out ordered by (time, priority, id) as SimPy orders them: a bucket becomes
current only when every earlier one is empty, and ids are drawn in the same order.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from heapq import heapify, heappop, heappush

import simpy
from simpy.core import URGENT, EmptySchedule, Infinity, StopSimulation
from simpy.events import NORMAL, Event

BUCKETS_PER_S = 64.0  # a power of two: t * 64 and k / 64 are exact, so bucket bounds are
NEVER = 1 << 62  # the bucket of events at infinity


class Environment(simpy.Environment):
    """A simpy.Environment whose queue is the current bucket's heap plus later buckets."""

    def __init__(self, bucketed: bool = True):
        """`bucketed`: off, every event goes to the one heap, as in simpy.Environment."""
        super().__init__()
        # SimPy binds its event classes (timeout, process, ...) to instances of its own class
        # only; bound here once, they are not rebound at every use.
        for name in ("process", "timeout", "event", "all_of", "any_of"):
            setattr(self, name, getattr(self, name))
        # Where the current bucket ends: every event in a later bucket is at or past it.
        self._end = 0.0 if bucketed else Infinity
        self._buckets: dict[int, list] = {}
        self._keys: list[int] = []  # the later buckets' numbers, a heap

    def schedule(self, event: Event, priority: int = NORMAL, delay: float = 0) -> None:
        self.at(event, self._now + delay, priority)

    def event_at(self, time: float, priority: int = NORMAL):
        """A triggered event that fires at the absolute `time` (now, if `time` is past);
        `priority` URGENT: before the other events of that instant that are NORMAL."""
        event = self.event()
        event._ok, event._value = True, None
        self.at(event, max(time, self._now), priority)
        return event

    def at(self, event, time: float, priority: int = NORMAL) -> None:
        """Schedule `event` at the absolute `time` (>= now).

        The model computes absolute times, and `schedule` takes a delay that it adds to now:
        `(t - now) + now` need not give back t exactly, so the model schedules with this.
        """
        entry = (time, priority, next(self._eid), event)
        if time < self._end:
            heappush(self._queue, entry)
            return
        # A later bucket's events are appended unsorted, and heapified when it comes.
        key = int(time * BUCKETS_PER_S) if time < Infinity else NEVER
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = [entry]
            heappush(self._keys, key)
        else:
            bucket.append(entry)

    def _advance(self) -> None:
        """The current bucket is empty: the next non-empty one becomes the heap."""
        if not self._keys:
            raise EmptySchedule
        key = heappop(self._keys)
        queue = self._queue
        queue.extend(self._buckets.pop(key))
        heapify(queue)
        self._end = (key + 1) / BUCKETS_PER_S if key != NEVER else Infinity

    def skip_to(self, time: float) -> bool:
        """Move the clock on to `time` (>= now) if no event is due at or before it, and say
        whether it did: work due at `time` may then be done at once, in place of an event
        that would be the next one (by a caller that does nothing after that work)."""
        queue = self._queue
        if queue:
            due = queue[0][0] <= time
        else:  # the next event is in a later bucket, at or past the current one's end
            due = time >= self._end and self.peek() <= time
        if due:
            return False
        self._now = time
        return True

    def withdraw(self, match) -> list:
        """The queued events for which `match(event)` holds, taken out of the run (each fires
        doing nothing), in queue order: a scenario feature's way to take back work a crash
        ended, or messages it will account for itself."""
        taken = []
        for entries in (self._queue, *self._buckets.values()):
            for entry in entries:
                event = entry[3]
                if event.callbacks is not None and match(event):
                    event.callbacks = []
                    taken.append(event)
        return taken

    def count(self, match) -> int:
        """How many queued events `match(event)` holds for (nothing taken out)."""
        return sum(1 for entries in (self._queue, *self._buckets.values())
                   for entry in entries if match(entry[3]))

    def peek(self) -> float:
        if self._queue:
            return self._queue[0][0]
        if self._keys:
            return min(self._buckets[self._keys[0]])[0]
        return Infinity

    def step(self) -> None:
        if not self._queue:
            self._advance()
        self._now, _, _, event = heappop(self._queue)
        callbacks, event.callbacks = event.callbacks, None
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:
            event.callbacks = callbacks[callbacks.index(callback) + 1:]
            self.schedule(event, -1)
            raise
        if not event._ok and not hasattr(event, "_defused"):
            raise _failure(event)

    def run(self, until: float | Event | None = None):
        """As simpy.Environment.run, with its step loop written out: it runs once per event."""
        if until is not None:
            if not isinstance(until, Event):
                at = until if isinstance(until, int) else float(until)
                if at <= self.now:
                    raise ValueError(f"until ({at}) must be greater than the current "
                                     f"simulation time")
                until = Event(self)
                until._ok = True
                until._value = None
                self.schedule(until, URGENT, at - self.now)
            elif until.callbacks is None:
                return until.value
            until.callbacks.append(StopSimulation.callback)
        queue, advance = self._queue, self._advance
        try:
            while True:
                if not queue:
                    advance()
                self._now, _, _, event = heappop(queue)
                callbacks, event.callbacks = event.callbacks, None
                if len(callbacks) == 1 and event._ok:
                    # Nearly every event: one callback, and no failure to check after it.
                    callback = callbacks[0]
                    callback(event)
                else:
                    for callback in callbacks:
                        callback(event)
                    if not event._ok and not hasattr(event, "_defused"):
                        raise _failure(event)
        except StopSimulation as exc:
            # As simpy.Environment.step: the event's other callbacks run when the run resumes.
            event.callbacks = callbacks[callbacks.index(callback) + 1:]
            self.schedule(event, -1)
            return exc.args[0]
        except EmptySchedule:
            if until is not None:
                raise RuntimeError(f'No scheduled events left but "until" event was not '
                                   f"triggered: {until}") from None
        return None


def _failure(event) -> Exception:
    """What SimPy raises for a failed event that nothing handled: a copy of its exception."""
    exc = type(event._value)(*event._value.args)
    exc.__cause__ = event._value
    return exc


@contextmanager
def collector_paused():
    """Automatic garbage collection off while the model is built and runs (also a decorator).

    A run keeps hundreds of thousands of objects alive and makes millions more, and the
    collector's passes over them cost a sixth of a run. The model frees nearly everything by
    reference counting; the few cycles it leaves (instances a migration retired) are small and
    are collected once the run is over.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
