"""Consistency checking and synchronisation of parallel migration (thesis ch. 6, Alg. 6.1-6.4).

During a parallel migration the old (source) and new (target) operator consume the same
serial-numbered events and their window outputs, [SN of the window's most recent event, count],
arrive interleaved at one checker. Until consistency only old outputs are forwarded, after it
only new ones, so nothing is counted twice. The checker looks at each pair of contiguous
outputs from different operators, offset = SN_old - SN_new:

- offset = 0, strong synchronisation: forward the old output; both have seen the same events.
- 0 < offset <= S, old ahead: forward the old output, then take `offset` events off the next
  new outputs (Alg. 6.3), dropping those that this empties.
- -S <= offset < 0, new ahead: forward the old output with |offset| added to its SN and count
  (Alg. 6.4), covering the events only the new operator's dropped outputs held.
- otherwise keep checking.

Errata applied (notes on the thesis, section 7):

1. Alg. 6.2 tests `offset > S`, which would synchronise a new operator ahead by any amount;
   the text and the worked examples use |offset| > S, as done here.
2. When |offset| > S, Alg. 6.2 advances E_old only if it is an old output, so an old output
   arriving after a new one would be lost ([9,4] in the old-ahead example); E_old advances in
   both cases here, as the printed figures require.
3. The "strong synchronisation" worked example gives its printed output only for S = 0; with
   the stated S = 3 its first pair already synchronises weakly. Tests pin both.
4. Alg. 6.3 line 14 is garbled; it is read as offset <- |value_new|, the part of the offset
   a dropped new output did not absorb.

Weak synchronisation adjusts counts by numbers of events, so it is only exact for count
windows (as in the thesis); other aggregates must use S = 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from itertools import zip_longest
from typing import NamedTuple

from workloads.windows import WindowResult


class Side(StrEnum):
    """Which operator produced an output: the old (source) or the new (target) one."""

    OLD = "old"
    NEW = "new"


class SyncMode(StrEnum):
    """How the two operators were brought into a consistent state."""

    STRONG = "strong"
    OLD_AHEAD = "old_ahead"
    NEW_AHEAD = "new_ahead"


class Output(NamedTuple):
    """One window output as the thesis writes it: [SN of its most recent event, count]."""

    sn: int
    count: int

    @classmethod
    def of(cls, result: WindowResult) -> Output:
        return cls(result.last_sn, result.count)


class Forwarded(NamedTuple):
    """An output sent downstream; `adjusted` when synchronisation changed its SN or count."""

    sn: int
    count: int
    side: Side
    adjusted: bool = False


class _Phase(Enum):
    CHECKING = "checking"
    TRIMMING = "trimming"
    SYNCHRONISED = "synchronised"


class Synchroniser:
    """The checker fed one output at a time, as outputs reach the broker during a migration."""

    def __init__(self, sync_factor: int) -> None:
        if sync_factor < 0:
            raise ValueError(f"the synchronisation factor must be >= 0, not {sync_factor}")
        self.sync_factor = sync_factor
        self.mode: SyncMode | None = None
        self.offset: int | None = None  # SN_old - SN_new of the pair that synchronised
        self.suppressed_old = 0
        self.suppressed_new = 0
        self._phase = _Phase.CHECKING
        self._held: tuple[Side, Output] | None = None  # the thesis's E_old
        self._owed = 0  # events still to take off new outputs when the old one was ahead
        self._last_sn = {Side.OLD: -1, Side.NEW: -1}  # SNs may count from 0 or from 1

    @property
    def synchronised(self) -> bool:
        """True once the old operator can be stopped (the thesis notifies the coordinator)."""
        return self._phase is _Phase.SYNCHRONISED

    def offer_old(self, output: tuple[int, int]) -> list[Forwarded]:
        return self.offer(Side.OLD, output)

    def offer_new(self, output: tuple[int, int]) -> list[Forwarded]:
        return self.offer(Side.NEW, output)

    def offer(self, side: Side, output: tuple[int, int]) -> list[Forwarded]:
        """Take the next output of one operator; return what to forward downstream now."""
        side, output = Side(side), Output._make(output)
        if output.count < 1:
            raise ValueError(f"{side} output {output}: a window output covers at least one event")
        if output.sn <= self._last_sn[side]:
            raise ValueError(f"{side} output {output}: SNs of one operator must increase")
        self._last_sn[side] = output.sn
        if self._phase is _Phase.SYNCHRONISED:
            return self._after_consistency(side, output)
        if self._phase is _Phase.TRIMMING:
            return self._trim(side, output)
        return self._check(side, output)

    def flush(self) -> list[Forwarded]:
        """End of both streams: release the output still held for pairing."""
        if self._held is None:
            return []
        side, output = self._held
        self._held = None
        return self._release(side, output)

    def _check(self, side: Side, output: Output) -> list[Forwarded]:
        """Algorithms 6.1 and 6.2."""
        if self._held is None:
            self._held = (side, output)
            return []
        held_side, held = self._held
        if held_side is not side:
            old, new = (held, output) if held_side is Side.OLD else (output, held)
            offset = old.sn - new.sn
            if abs(offset) <= self.sync_factor:  # erratum 1
                return self._synchronise(old, offset)
        self._held = (side, output)  # erratum 2: E_old advances whichever side it came from
        return self._release(held_side, held)

    def _synchronise(self, old: Output, offset: int) -> list[Forwarded]:
        """The rest of Alg. 6.2 with Alg. 6.3 and 6.4; the pair's new output is a duplicate."""
        self._held = None
        self.suppressed_new += 1
        self.offset = offset
        if offset == 0:
            self.mode, self._phase = SyncMode.STRONG, _Phase.SYNCHRONISED
            return [Forwarded(old.sn, old.count, Side.OLD)]
        if offset > 0:
            self.mode, self._phase, self._owed = SyncMode.OLD_AHEAD, _Phase.TRIMMING, offset
            return [Forwarded(old.sn, old.count, Side.OLD)]
        self.mode, self._phase = SyncMode.NEW_AHEAD, _Phase.SYNCHRONISED
        return [Forwarded(old.sn - offset, old.count - offset, Side.OLD, adjusted=True)]

    def _trim(self, side: Side, output: Output) -> list[Forwarded]:
        """Alg. 6.3's loop: old outputs are ignored, new ones pay off what the old one was ahead."""
        if side is Side.OLD:
            self.suppressed_old += 1
            return []
        remainder = output.count - self._owed
        if remainder <= 0:
            self._owed = -remainder  # erratum 4
            self.suppressed_new += 1
            return []
        self._phase = _Phase.SYNCHRONISED
        return [Forwarded(output.sn, remainder, Side.NEW, adjusted=self._owed > 0)]

    def _after_consistency(self, side: Side, output: Output) -> list[Forwarded]:
        if side is Side.OLD:
            self.suppressed_old += 1
            return []
        return [Forwarded(output.sn, output.count, Side.NEW)]

    def _release(self, side: Side, output: Output) -> list[Forwarded]:
        """Before consistency an old output goes downstream and a new one is a duplicate."""
        if side is Side.OLD:
            return [Forwarded(output.sn, output.count, Side.OLD)]
        self.suppressed_new += 1
        return []


@dataclass(frozen=True)
class SyncReport:
    """What the checker forwarded, in order, and how consistency was reached."""

    forwarded: tuple[Forwarded, ...]
    synchronised: bool
    mode: SyncMode | None
    offset: int | None
    suppressed_old: int
    suppressed_new: int


def alternating(old_count: int, new_count: int) -> list[Side]:
    """Arrival order old, new, old, new, ... as in the thesis's figures, then the longer rest."""
    pairs = zip_longest([Side.OLD] * old_count, [Side.NEW] * new_count)
    return [side for pair in pairs for side in pair if side is not None]


def synchronise(
    old: Iterable[tuple[int, int]],
    new: Iterable[tuple[int, int]],
    sync_factor: int,
    order: Sequence[Side] | None = None,
) -> SyncReport:
    """Run the checker over both operators' outputs arriving in `order` (default alternating)."""
    outputs = {Side.OLD: list(old), Side.NEW: list(new)}
    if order is None:
        order = alternating(len(outputs[Side.OLD]), len(outputs[Side.NEW]))
    order = [Side(side) for side in order]
    if Counter(order) != Counter({side: len(items) for side, items in outputs.items()}):
        raise ValueError("order must name each side once per output of that side")
    streams = {side: iter(items) for side, items in outputs.items()}
    synchroniser = Synchroniser(sync_factor)
    forwarded: list[Forwarded] = []
    for side in order:
        forwarded += synchroniser.offer(side, next(streams[side]))
    forwarded += synchroniser.flush()
    return SyncReport(
        tuple(forwarded),
        synchroniser.synchronised,
        synchroniser.mode,
        synchroniser.offset,
        synchroniser.suppressed_old,
        synchroniser.suppressed_new,
    )
