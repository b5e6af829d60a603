"""Probabilistic sketches for discrete stream values: a Bloom filter and HyperLogLog."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable


def _hash64(item: str, salt: bytes = b"") -> int:
    # blake2b, not hash(): Python salts str hashes per process, and sketches must be the
    # same on every node that rebuilds or restores them.
    digest = hashlib.blake2b(item.encode(), digest_size=8, salt=salt).digest()
    return int.from_bytes(digest, "big")


class BloomFilter:
    """Set membership with no false negatives and about `fp_rate` false positives."""

    def __init__(self, capacity: int, fp_rate: float = 0.01) -> None:
        if capacity < 1 or not 0.0 < fp_rate < 1.0:
            raise ValueError("a Bloom filter needs capacity >= 1 and 0 < fp_rate < 1")
        # The optimal size and hash count for `capacity` items at `fp_rate`.
        self.bits = max(8, math.ceil(-capacity * math.log(fp_rate) / math.log(2) ** 2))
        self.hashes = max(1, round(self.bits / capacity * math.log(2)))
        self._array = bytearray((self.bits + 7) // 8)

    def add(self, item: str) -> None:
        for position in self._positions(item):
            self._array[position >> 3] |= 1 << (position & 7)

    def update(self, items: Iterable[str]) -> None:
        for item in items:
            self.add(item)

    def __contains__(self, item: str) -> bool:
        return all(self._array[p >> 3] & (1 << (p & 7)) for p in self._positions(item))

    def _positions(self, item: str) -> list[int]:
        # Double hashing (Kirsch and Mitzenmacher): k positions from two hashes.
        first, second = _hash64(item), _hash64(item, b"second") | 1
        return [(first + i * second) % self.bits for i in range(self.hashes)]


class HyperLogLog:
    """Distinct count in 2**precision one-byte registers, standard error 1.04 / sqrt(2**p)."""

    def __init__(self, precision: int = 10) -> None:
        if not 4 <= precision <= 16:
            raise ValueError(f"HyperLogLog precision must be 4..16, got {precision}")
        self.precision = precision
        self.load(bytes(1 << precision))

    @property
    def standard_error(self) -> float:
        return 1.04 / math.sqrt(len(self.registers))

    def load(self, registers: bytes) -> None:
        """Take over saved registers (from `bytes(sketch.registers)`)."""
        if len(registers) != 1 << self.precision:
            raise ValueError(f"{len(registers)} registers given, precision {self.precision} "
                             f"has {1 << self.precision}")
        self.registers = bytearray(registers)
        # sum(2**-r) scaled by 2**64 is an exact integer: kept up to date per add, it makes
        # estimate() O(1), and a restored sketch gives bit-identical estimates.
        self._scaled_sum = sum(1 << (64 - r) for r in self.registers)
        self._zeros = self.registers.count(0)

    def add(self, item: str) -> None:
        h = _hash64(item)
        rest_bits = 64 - self.precision
        index, rest = h >> rest_bits, h & ((1 << rest_bits) - 1)
        rank = rest_bits - rest.bit_length() + 1  # position of the first 1 bit
        old = self.registers[index]
        if rank > old:
            self.registers[index] = rank
            self._scaled_sum += (1 << (64 - rank)) - (1 << (64 - old))
            self._zeros -= old == 0

    def estimate(self) -> float:
        m = len(self.registers)
        alpha = 0.7213 / (1.0 + 1.079 / m)
        raw = alpha * m * m * 2.0**64 / self._scaled_sum
        if raw <= 2.5 * m and self._zeros:
            return m * math.log(m / self._zeros)  # linear counting is better for small counts
        return raw  # 64-bit hashes need no large-range correction at stream scales
