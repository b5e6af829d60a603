"""Scheduling an event at an absolute time on SimPy's queue.

`Environment.schedule` takes a delay and adds it to `now`; the model computes absolute arrival
times, and `(t - now) + now` need not give back t exactly. Pushing `(time, priority, id, event)`
onto the queue, as `schedule` itself does, keeps times exact and saves a call on the hot path.
"""

from __future__ import annotations

from heapq import heappush

from simpy.core import NORMAL


def scheduler(env):
    """A function `at(event, time)` that schedules `event` to fire at `time` (>= now)."""
    queue = env._queue
    eid = env._eid

    def at(event, time: float) -> None:
        heappush(queue, (time, NORMAL, next(eid), event))

    return at
