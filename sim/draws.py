"""Named random streams small enough to give every source its own (SplitMix64).

A stream's draws depend on its name and the run's seed alone, never on what other parts drew
before: a feature that changes the order in which events run (a battery's gate gives every
emission an event of its own) leaves every other draw as it was. `random.Random` would do, at
2.9 kB and 23 us to seed each: 290 MB and 2.3 s for 100,000 sources; this is 56 bytes and
half a microsecond, and its draws pass the same uniformity a source needs (SplitMix64:
Steele, Lea and Flood, OOPSLA 2014; the seeder of xoshiro).
"""

from __future__ import annotations

import hashlib
import math

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_UNIT = 2.0 ** -53


class Draws:
    """One named stream: `random()` in [0, 1) and `expovariate(rate)`, as random.Random's."""

    __slots__ = ("state",)

    def __init__(self, seed: int | str, *names: object):
        key = ":".join(str(part) for part in (seed, *names)).encode()
        self.state = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")

    def random(self) -> float:
        x = self.state = (self.state + _GOLDEN) & _MASK
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
        return ((x ^ (x >> 31)) >> 11) * _UNIT

    def expovariate(self, rate: float) -> float:
        # random() written out: this runs once per message of a Poisson source.
        x = self.state = (self.state + _GOLDEN) & _MASK
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
        return -math.log(1.0 - ((x ^ (x >> 31)) >> 11) * _UNIT) / rate
