"""Consistency checker of parallel migration: the thesis's worked examples and its invariants."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.migration import (
    Forwarded,
    Output,
    Side,
    Synchroniser,
    SyncMode,
    SyncReport,
    alternating,
    synchronise,
)
from workloads.windows import Event, Window

OLD, NEW = Side.OLD, Side.NEW

# Thesis, section 6.4.3 (Fig. 6.7): twenty events, SN 1..20, with these payloads. The
# operators count, so every output sequence forwarded downstream must sum to 20.
PAYLOADS = [3.6, 2.8, 2.4, 0.5, 1.7, 1.3, 3.3, 3.2, 4.9, 5.4,
            2.4, 1.8, 1.6, 0.2, 1.9, 6.7, 5.1, 2.0, 3.5, 1.2]  # fmt: skip

# Each example: source (old) and target (new) outputs as [SN, count] (Figs 6.9, 6.13, 6.17),
# and the arrival order at the checker. The figures (6.10, 6.14, 6.18) print the first six
# arrivals, alternating source and target; the rest is taken to alternate too, and
# test_arrivals_after_consistency_do_not_change_the_output shows it does not matter.
STRONG = {
    "old": [(3, 3), (7, 4), (9, 2), (13, 4), (18, 5), (20, 2)],
    "new": [(2, 2), (5, 3), (9, 4), (12, 3), (17, 5), (20, 3)],
    "first_arrivals": [(OLD, (3, 3)), (NEW, (2, 2)), (OLD, (7, 4)),
                       (NEW, (5, 3)), (OLD, (9, 2)), (NEW, (9, 4))],  # Fig. 6.10
}  # fmt: skip
OLD_AHEAD = {
    "old": [(5, 5), (9, 4), (13, 4), (18, 5), (20, 2)],
    "new": [(1, 1), (5, 4), (10, 5), (15, 5), (20, 5)],
    "first_arrivals": [(OLD, (5, 5)), (NEW, (1, 1)), (OLD, (9, 4)),
                       (NEW, (5, 4)), (OLD, (13, 4)), (NEW, (10, 5))],  # Fig. 6.14
}  # fmt: skip
NEW_AHEAD = {
    "old": [(1, 1), (10, 9), (11, 1), (15, 4), (17, 2), (20, 3)],
    "new": [(6, 6), (14, 8), (15, 1), (17, 2), (19, 2), (20, 1)],
    "first_arrivals": [(OLD, (1, 1)), (NEW, (6, 6)), (OLD, (10, 9)),
                       (NEW, (14, 8)), (OLD, (11, 1)), (NEW, (15, 1))],  # Fig. 6.18
}  # fmt: skip


def pairs(report: SyncReport) -> list[tuple[int, int]]:
    return [(f.sn, f.count) for f in report.forwarded]


@pytest.mark.parametrize("example", [STRONG, OLD_AHEAD, NEW_AHEAD], ids=["strong", "old", "new"])
def test_examples_use_the_thesis_stream_and_arrival_order(example: dict) -> None:
    for outputs in (example["old"], example["new"]):
        assert sum(count for _, count in outputs) == len(PAYLOADS) == 20
    streams = {OLD: iter(example["old"]), NEW: iter(example["new"])}
    order = alternating(len(example["old"]), len(example["new"]))
    assert [(side, next(streams[side])) for side in order[:6]] == example["first_arrivals"]


def test_strong_synchronisation_example_with_s_0() -> None:
    # Fig. 6.11: [3,3] [7,4] [9,2] from the source, then [12,3] [17,5] [20,3] from the target.
    # The printed output needs S = 0 (notes, erratum 3): [9,2] and [9,4] have equal SNs.
    report = synchronise(STRONG["old"], STRONG["new"], 0)
    assert report.forwarded == (
        Forwarded(3, 3, OLD),
        Forwarded(7, 4, OLD),
        Forwarded(9, 2, OLD),
        Forwarded(12, 3, NEW),
        Forwarded(17, 5, NEW),
        Forwarded(20, 3, NEW),
    )
    assert (report.synchronised, report.mode, report.offset) == (True, SyncMode.STRONG, 0)
    # Suppressed: target [2,2] [5,3] [9,4] before consistency, source [13,4] [18,5] [20,2] after.
    assert (report.suppressed_old, report.suppressed_new) == (3, 3)


def test_strong_example_with_the_stated_s_3_synchronises_weakly_at_once() -> None:
    # Notes, erratum 3: [3,3]S / [2,2]T has offset 1 <= 3, so the source is one event ahead
    # and the target's [5,3] becomes [5,2].
    report = synchronise(STRONG["old"], STRONG["new"], 3)
    assert pairs(report) == [(3, 3), (5, 2), (9, 4), (12, 3), (17, 5), (20, 3)]
    assert sum(count for _, count in pairs(report)) == 20
    assert (report.mode, report.offset) == (SyncMode.OLD_AHEAD, 1)
    assert [f.adjusted for f in report.forwarded] == [False, True, False, False, False, False]


def test_source_ahead_example() -> None:
    # Fig. 6.15: [5,5] [9,4] [13,4] from the source, [15,2] [20,5] from the target;
    # [13,4] and [10,5] give offset 3 = S, so [15,5] loses 3 events.
    report = synchronise(OLD_AHEAD["old"], OLD_AHEAD["new"], 3)
    assert report.forwarded == (
        Forwarded(5, 5, OLD),
        Forwarded(9, 4, OLD),  # lost by the literal Alg. 6.2 (erratum 2)
        Forwarded(13, 4, OLD),
        Forwarded(15, 2, NEW, adjusted=True),
        Forwarded(20, 5, NEW),
    )
    assert (report.synchronised, report.mode, report.offset) == (True, SyncMode.OLD_AHEAD, 3)
    assert (report.suppressed_old, report.suppressed_new) == (2, 3)


def test_target_ahead_example() -> None:
    # Fig. 6.19: [1,1] [10,9] then [11,1] replaced by [14,4], then the target's outputs.
    # [6,6] arrives with offset -5: only |offset| > S keeps it from synchronising (erratum 1).
    report = synchronise(NEW_AHEAD["old"], NEW_AHEAD["new"], 3)
    assert pairs(report) == [(1, 1), (10, 9), (14, 4), (15, 1), (17, 2), (19, 2), (20, 1)]
    assert report.forwarded[2] == Forwarded(14, 4, OLD, adjusted=True)
    assert [f.side for f in report.forwarded] == [OLD, OLD, OLD, NEW, NEW, NEW, NEW]
    assert (report.synchronised, report.mode, report.offset) == (True, SyncMode.NEW_AHEAD, -3)
    assert (report.suppressed_old, report.suppressed_new) == (3, 2)


@pytest.mark.parametrize(
    ("example", "sync_factor", "expected"),
    [
        (STRONG, 0, [(3, 3), (7, 4), (9, 2), (12, 3), (17, 5), (20, 3)]),
        (OLD_AHEAD, 3, [(5, 5), (9, 4), (13, 4), (15, 2), (20, 5)]),
        (NEW_AHEAD, 3, [(1, 1), (10, 9), (14, 4), (15, 1), (17, 2), (19, 2), (20, 1)]),
    ],
    ids=["strong", "old", "new"],
)
@pytest.mark.parametrize("rest_first", [OLD, NEW])
def test_arrivals_after_consistency_do_not_change_the_output(
    example: dict, sync_factor: int, expected: list, rest_first: Side
) -> None:
    old, new = example["old"], example["new"]
    rest = {OLD: [OLD] * (len(old) - 3), NEW: [NEW] * (len(new) - 3)}
    order = [OLD, NEW] * 3 + rest[rest_first] + rest[OLD if rest_first is NEW else NEW]
    assert pairs(synchronise(old, new, sync_factor, order)) == expected


def test_streaming_form_reports_consistency_as_outputs_arrive() -> None:
    checker = Synchroniser(3)
    assert checker.offer_old((1, 1)) == []  # held until it can be paired
    assert checker.offer_new((6, 6)) == [Forwarded(1, 1, OLD)]  # offset -5: not yet
    assert checker.offer_old((10, 9)) == []
    assert checker.offer_new((14, 8)) == [Forwarded(10, 9, OLD)]  # offset -4
    assert not checker.synchronised
    assert checker.offer_old((11, 1)) == [Forwarded(14, 4, OLD, adjusted=True)]  # offset -3
    assert checker.synchronised
    assert checker.offer_new((15, 1)) == [Forwarded(15, 1, NEW)]
    assert checker.offer_old((15, 4)) == []
    assert checker.flush() == []


def test_source_ahead_by_more_than_one_target_window() -> None:
    # Alg. 6.3 line 14 read as offset <- |value_new| (erratum 4): the 7 events the source is
    # ahead are taken off [3,2] (5 still owed), [6,3] (2 owed), then [10,4] becomes [10,2].
    report = synchronise([(8, 8), (10, 2)], [(1, 1), (3, 2), (6, 3), (10, 4)], 7)
    assert pairs(report) == [(8, 8), (10, 2)]
    assert (report.mode, report.offset) == (SyncMode.OLD_AHEAD, 7)
    assert (report.suppressed_old, report.suppressed_new) == (1, 3)


def test_target_window_exactly_absorbing_the_offset_is_dropped() -> None:
    report = synchronise([(4, 4), (9, 5)], [(2, 2), (4, 2), (9, 5)], 2)
    assert report.forwarded == (Forwarded(4, 4, OLD), Forwarded(9, 5, NEW))


def test_old_ahead_at_the_end_of_the_stream_is_not_yet_synchronised() -> None:
    # The target still owes the 2 events of the source's last window: Alg. 6.3 keeps waiting.
    report = synchronise([(5, 5)], [(3, 3)], 2)
    assert pairs(report) == [(5, 5)]
    assert (report.synchronised, report.mode) == (False, SyncMode.OLD_AHEAD)


def test_without_consistency_every_source_output_is_forwarded() -> None:
    report = synchronise([(4, 4), (8, 4), (12, 4)], [(1, 1), (6, 5), (10, 4)], 0)
    assert pairs(report) == [(4, 4), (8, 4), (12, 4)]
    assert (report.synchronised, report.mode, report.suppressed_new) == (False, None, 3)


def test_windows_feed_the_checker() -> None:
    # The source counts every 3 events from SN 1; the target, launched at SN 5, every 4.
    events = [Event(sn, sn / 10, payload) for sn, payload in enumerate(PAYLOADS, start=1)]
    source, target = Window("tumbling", 3, basis="count"), Window("tumbling", 4, basis="count")
    old = [Output.of(r) for e in events for r in source.push(e)] + [
        Output.of(r) for r in source.flush()
    ]
    new = [Output.of(r) for e in events[4:] for r in target.push(e)]
    assert old == [(3, 3), (6, 3), (9, 3), (12, 3), (15, 3), (18, 3), (20, 2)]
    assert new == [(8, 4), (12, 4), (16, 4), (20, 4)]
    # [3,3] / [8,4]: offset -5 > S; [6,3] / [8,4]: offset -2, target ahead, [6,3] -> [8,5].
    report = synchronise(old, new, 2)
    assert pairs(report) == [(3, 3), (8, 5), (12, 4), (16, 4), (20, 4)]
    assert (report.suppressed_old, report.suppressed_new) == (5, 1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Synchroniser(-1), "synchronisation factor"),
        (lambda: synchronise([(3, 3), (2, 1)], [], 1), "must increase"),
        (lambda: synchronise([(3, 0)], [], 1), "at least one event"),
        (lambda: synchronise([(3, 3)], [(3, 3)], 1, order=[OLD, OLD]), "once per output"),
    ],
)
def test_invalid_input_is_rejected(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def windowing(ends: set[int], first: int) -> list[tuple[int, int]]:
    """[SN, count] outputs of tumbling windows ending at `ends`, the first starting at `first`."""
    outputs, previous = [], first - 1
    for end in sorted(ends):
        outputs.append((end, end - previous))
        previous = end
    return outputs


@st.composite
def migrations(draw: st.DrawFn) -> tuple[int, list, list, list[Side], int]:
    """Events 1..n windowed at random by the source; the target starts at a random SN."""
    n = draw(st.integers(1, 60), label="events")
    old = windowing(draw(st.sets(st.integers(1, n))) | {n}, first=1)
    start = draw(st.integers(1, n), label="target starts at SN")
    new = windowing(draw(st.sets(st.integers(start, n))) | {n}, first=start)
    order = draw(st.permutations([OLD] * len(old) + [NEW] * len(new)), label="arrivals")
    return n, old, new, list(order), draw(st.integers(0, n + 1), label="S")


@given(migrations())
def test_every_event_is_forwarded_once_in_sn_order(migration: tuple) -> None:
    n, old, new, order, sync_factor = migration
    report = synchronise(old, new, sync_factor, order)
    covered = 0
    for forwarded in report.forwarded:
        # Each output covers the SNs after the previous one up to its own: no gap, no overlap.
        assert forwarded.sn > covered
        assert forwarded.count == forwarded.sn - covered
        covered = forwarded.sn
    assert covered == n
    assert sum(f.count for f in report.forwarded) == n
    handled = len(report.forwarded) + report.suppressed_old + report.suppressed_new
    assert handled == len(old) + len(new)


@given(migrations())
def test_streaming_and_batch_forms_agree(migration: tuple) -> None:
    _, old, new, order, sync_factor = migration
    checker, streams = Synchroniser(sync_factor), {OLD: iter(old), NEW: iter(new)}
    streamed = []
    for side in order:
        offer = checker.offer_old if side is OLD else checker.offer_new
        streamed += offer(next(streams[side]))
    streamed += checker.flush()
    assert tuple(streamed) == synchronise(old, new, sync_factor, order).forwarded


@given(migrations())
def test_an_s_beyond_the_stream_length_synchronises_at_the_first_mixed_pair(
    migration: tuple,
) -> None:
    n, old, new, order, _ = migration
    report = synchronise(old, new, n, order)
    # The first arrival from the other side meets the last one held from the first side.
    switch = order.index(NEW if order[0] is OLD else OLD)
    first_side = {OLD: old, NEW: new}
    held, arriving = first_side[order[0]][switch - 1], first_side[order[switch]][0]
    old_sn, new_sn = (held[0], arriving[0]) if order[0] is OLD else (arriving[0], held[0])
    assert report.offset == old_sn - new_sn
    expected = {0: SyncMode.STRONG, 1: SyncMode.OLD_AHEAD, -1: SyncMode.NEW_AHEAD}
    assert report.mode is expected[(old_sn > new_sn) - (old_sn < new_sn)]
    # Until that pair, source outputs went downstream as they were superseded.
    released = switch - 1 if order[0] is OLD else 0
    assert [f[:2] for f in report.forwarded[:released]] == old[:released]


def test_coverage_counts_gaps_overlaps_and_steps_back() -> None:
    from workloads.migration.measures import coverage

    # (last_sn, count): 1-10, 11-20, [21-25 lost], 26-30, [28-30 again], 31-35, then 29 back
    outputs = [(10, 10), (20, 10), (30, 5), (30, 3), (35, 5), (29, 4)]
    assert coverage(outputs) == (5, 3 + 4, 1)
    assert coverage([(5, 5), (10, 5), (15, 5)]) == (0, 0, 0)


def test_output_gap_is_the_longest_gap_around_the_migration_beyond_the_window() -> None:
    from workloads.migration.measures import output_gap

    times = [5.0, 10.0, 15.0, 27.0, 30.0, 35.0, 50.0]
    # the 12 s gap (15 to 27) overlaps a migration from 18 to 20; the 15 s one after 35 does not
    assert output_gap(times, 18.0, 20.0, 5.0) == 7.0
    assert output_gap(times, 1.0, 2.0, 5.0) == 0.0
