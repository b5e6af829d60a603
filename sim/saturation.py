"""Saturation on the model: the nodes whose job queue only grew during a run, from its samples."""

from __future__ import annotations

import numpy as np

# A queue this short is no backlog, whatever its trend (a few jobs come and go at any load).
MIN_QUEUE = 50
# At the end, the queue is this many times its median over the run: it grew, never drained
# (a queue growing steadily from empty ends at twice its median).
FACTOR = 1.5
# Or it grew over the run's second half by this share of where it ended: still growing.
GROWTH = 0.25
# Or its CPU stayed this close to its fullest through the second half while the queue grew:
# a node a tenth over its capacity grows slowly and steadily, meeting neither rule above.
BUSY = 0.98


def saturation(nodes: dict[str, np.ndarray]) -> dict[str, dict]:
    """Node -> its queue at the last sample, the median queue and the growth (jobs per second,
    a least-squares slope over the run's second half), for each node whose queue ended
    long and growing, and either far above its median, or still growing by a good share
    over the second half, or with its CPU at its fullest all through it: it could not keep
    up with its load. Read
    from the `nodes` table after the run, so a run pays nothing for it while it goes."""
    t = np.asarray(nodes["t"], dtype=float)
    if not t.size:
        return {}
    names = np.asarray(nodes["node"], dtype=object)
    queue = np.asarray(nodes["queue"], dtype=float)
    cpu = np.asarray(nodes["cpu"], dtype=float)
    found = {}
    for name in dict.fromkeys(names):
        mine = names == name
        times, lengths = t[mine], queue[mine]
        if lengths.size < 4 or lengths[-1] < MIN_QUEUE:
            continue
        median = float(np.median(lengths))
        half = times >= times[0] + (times[-1] - times[0]) / 2
        growth = float(np.polyfit(times[half], lengths[half], 1)[0]) if half.sum() > 1 else 0.0
        span = times[half][-1] - times[half][0]
        share = cpu[mine]
        busy = share.max() > 0 and bool(np.all(share[half] >= BUSY * share.max()))
        if growth > 0 and (lengths[-1] > FACTOR * max(median, 1.0)
                           or growth * span >= GROWTH * lengths[-1] or busy):
            found[str(name)] = {"queue_end": int(lengths[-1]), "queue_median": int(median),
                                "growth_per_s": round(growth, 3)}
    return dict(sorted(found.items()))
