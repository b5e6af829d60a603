"""Filter tasks: drop readings with values out of range, or whose key a Bloom filter rejects."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from workloads.riot.sketches import BloomFilter
from workloads.riot.specs import CITY
from workloads.riot.tasks.base import Message, Task, register, require_reading

# The generated CITY and TAXI streams carry 1 % outliers, so a filter passes about 99 %.
DEFAULT_PASS_RATE = 0.99


@register
class RangeFilter(Task):
    """Pass a reading only if each value named in `ranges` lies in its [low, high] (RIoTBench RGF).

    A missing value (None or absent) passes: filling it in is the interpolation task's job.
    """

    name = "range_filter"
    selectivity = DEFAULT_PASS_RATE

    def __init__(self, ranges: Mapping[str, Sequence[float]] | None = None,
                 selectivity: float = DEFAULT_PASS_RATE) -> None:
        self.ranges = {field: (float(low), float(high))
                       for field, (low, high) in (ranges or CITY.ranges).items()}
        self.selectivity = selectivity

    def process(self, message: Message) -> list[Message]:
        reading = require_reading(self, message)
        for field, (low, high) in self.ranges.items():
            value = reading.values.get(field)
            if isinstance(value, (int, float)) and not low <= value <= high:
                return []
        return [reading]


@register
class BloomFilterCheck(Task):
    """Pass a reading whose key is (probably) one of `members` (RIoTBench BLF).

    The key is the sensor id, or the value of `field` when given. Members never fail; a
    non-member passes with probability about `fp_rate`.
    """

    name = "bloom_filter"
    selectivity = DEFAULT_PASS_RATE

    def __init__(self, members: Iterable[str], field: str | None = None, fp_rate: float = 0.01,
                 selectivity: float = DEFAULT_PASS_RATE) -> None:
        members = [str(member) for member in members]
        self.bloom = BloomFilter(max(1, len(members)), fp_rate)
        self.bloom.update(members)
        self.field = field
        self.selectivity = selectivity

    def process(self, message: Message) -> list[Message]:
        reading = require_reading(self, message)
        key = reading.sensor if self.field is None else reading.values.get(self.field)
        return [reading] if key is not None and str(key) in self.bloom else []
