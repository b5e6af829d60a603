"""Random draws of one link: a small counter-based generator per channel.

Each link direction has its own stream, so its draws do not depend on the order in which
events elsewhere happen to be processed (the direct hand-over computes some sends earlier in
event order than an event per finish would). A Python `random.Random` per channel would cost
about 2.5 kB each, too much for 10^5 device links; splitmix64 over (seed, link, counter) costs
one integer.
"""

from __future__ import annotations

import hashlib
import math

_MASK = (1 << 64) - 1


class LinkDraws:
    __slots__ = ("_state", "_spare")

    def __init__(self, seed: int | str, link: str):
        digest = hashlib.blake2b(f"{seed}:{link}".encode(), digest_size=8).digest()
        self._state = int.from_bytes(digest, "little")
        self._spare: float | None = None

    def random(self) -> float:
        """Uniform in [0, 1) (splitmix64)."""
        self._state = z = (self._state + 0x9E3779B97F4A7C15) & _MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return ((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0)

    def gauss(self, mu: float, sigma: float) -> float:
        """Normal (Box-Muller, keeping the second value for the next call)."""
        if self._spare is not None:
            z, self._spare = self._spare, None
            return mu + sigma * z
        u1 = 1.0 - self.random()  # (0, 1]: log stays finite
        u2 = self.random()
        radius = math.sqrt(-2.0 * math.log(u1))
        self._spare = radius * math.sin(2.0 * math.pi * u2)
        return mu + sigma * radius * math.cos(2.0 * math.pi * u2)
