"""How late an event loop's timers fire: the relays' error beyond their links' shapes.

Every relayed chunk reaches its receiver by a timer on the relays' loop (emu.links.carry), so
the loop's lateness is what a link's delay was off by. A probe ticks on the loop and keeps the
largest and mean lateness since it was last read. Used by the host's relay set
(emu.cluster.relays) and by a swarm node's link agent (emu.links.link_agent).
"""

from __future__ import annotations

import asyncio

# How often the loop's timer lateness is probed (s). Its cost on foglab's loaded 2-core host:
# 0.5 % of a core at 0.05 s, 1 % at 0.02 s (an idle relay set's process, 8 s each); at 0.1 s
# half of the first, and still ten probes between two of the run's samples.
LAG_PROBE_S = 0.1


class LagProbe:
    """A timer on a loop every `interval` seconds, and how late each fired: the largest and
    mean lateness since the last `take` (s). `take` is called on the loop's thread."""

    def __init__(self, interval: float = LAG_PROBE_S) -> None:
        self.interval = interval
        self._count = 0
        self._total = 0.0
        self._max = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            late = max(0.0, loop.time() - due)
            self._count += 1
            self._total += late
            self._max = max(self._max, late)

    def take(self) -> tuple[int, float, float]:
        """(probes, mean lateness, largest lateness) since the last take, and start afresh."""
        taken = (self._count, self._total / self._count if self._count else 0.0, self._max)
        self._count, self._total, self._max = 0, 0.0, 0.0
        return taken
