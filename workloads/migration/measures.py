"""What a migration did to an operator's window outputs: the output gap, and lost, duplicated
and reordered events. One definition for the model and the emulation (sim.migration,
emu.run.emulate), computed from the windows table's times, last serial numbers and counts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple


def output_gap(times: Sequence[float], start: float, end: float, period: float) -> float:
    """The longest gap between consecutive window outputs (`times`, in order) that overlaps
    the migration [start, end], beyond the window's `period`: what a consumer downstream sees
    as missing output; 0 when outputs came on time."""
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)
            if b >= start and a <= end + period]
    return max(0.0, max(gaps, default=0.0) - period)


class Coverage(NamedTuple):
    lost: int
    duplicates: int
    reordered: int


def coverage(outputs: Iterable[tuple[int, int]]) -> Coverage:
    """Each window output (last_sn, count), in the order they went downstream, covers the
    serial numbers (last_sn - count, last_sn]: a gap between outputs is lost events, an
    overlap duplicated ones, a step back a reordering (tumbling windows over
    serial-numbered events, as the thesis's count operator)."""
    lost = duplicates = reordered = 0
    previous = None
    for last, count in outputs:
        first = last - count
        if previous is not None:
            if last < previous:
                reordered += 1
            if first > previous:
                lost += first - previous
            elif first < previous:
                duplicates += min(previous, last) - first
        previous = max(previous or 0, last)
    return Coverage(lost, duplicates, reordered)
