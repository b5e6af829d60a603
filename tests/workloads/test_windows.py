"""Window operators: hand-computed aggregates and snapshot/restore equivalence."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.windows import Event, Window, WindowResult

# (sn, timestamp, value); the expected numbers below were worked out by hand from this table.
STREAM = [
    Event(1, 0.5, 2),
    Event(2, 1.0, 4),
    Event(3, 1.5, 6),
    Event(4, 2.2, 1),
    Event(5, 3.0, 3),
    Event(6, 3.9, 5),
    Event(7, 4.0, 7),
    Event(8, 6.1, 9),
]


def emissions(window: Window, events: list[Event]) -> list[list[tuple[float, float, float]]]:
    """(start, end, value) of the windows closed by each push, then by the final flush."""
    steps = [window.push(event) for event in events] + [window.flush()]
    return [[(r.start, r.end, r.value) for r in step] for step in steps]


def run(window: Window, events: list[Event]) -> list[WindowResult]:
    results = [r for event in events for r in window.push(event)]
    return results + window.flush()


def test_tumbling_time_sum_closes_when_a_later_event_arrives() -> None:
    assert emissions(Window("tumbling", 2, aggregate="sum"), STREAM) == [
        [], [], [],
        [(0, 2, 12)],  # t=2.2 closes [0, 2): 2 + 4 + 6
        [], [],
        [(2, 4, 9)],  # t=4.0 closes [2, 4): 1 + 3 + 5
        [(4, 6, 7)],  # t=6.1 closes [4, 6)
        [(6, 8, 9)],  # flush
    ]  # fmt: skip


def test_tumbling_time_count_and_average() -> None:
    counts = run(Window("tumbling", 2, aggregate="count"), STREAM)
    averages = run(Window("tumbling", 2, aggregate="average"), STREAM)
    assert [r.value for r in counts] == [3, 3, 1, 1]
    assert [r.value for r in averages] == [4.0, 3.0, 7.0, 9.0]
    assert [(r.first_sn, r.last_sn, r.count) for r in averages] == [
        (1, 3, 3), (4, 6, 3), (7, 7, 1), (8, 8, 1)
    ]  # fmt: skip


def test_sliding_time_sum() -> None:
    assert emissions(Window("sliding", 2, 1, aggregate="sum"), STREAM) == [
        [], [], [],
        [(0, 2, 12)],
        [(1, 3, 11)],  # t=3.0 closes [1, 3): 4 + 6 + 1
        [],
        [(2, 4, 9)],
        [(3, 5, 15), (4, 6, 7)],  # t=6.1 closes two windows: 3 + 5 + 7, then 7
        [(5, 7, 9), (6, 8, 9)],
    ]  # fmt: skip


def test_sliding_time_average_and_count() -> None:
    averages = run(Window("sliding", 2, 1, aggregate="average"), STREAM)
    counts = run(Window("sliding", 2, 1, aggregate="count"), STREAM)
    assert [r.value for r in averages] == [4.0, 11 / 3, 3.0, 5.0, 7.0, 9.0, 9.0]
    assert [r.value for r in counts] == [3, 3, 3, 3, 1, 1, 1]


def test_tumbling_count_average() -> None:
    assert emissions(Window("tumbling", 3, basis="count", aggregate="average"), STREAM) == [
        [], [],
        [(0, 3, 4.0)],  # events 1-3: (2 + 4 + 6) / 3
        [], [],
        [(3, 6, 3.0)],  # events 4-6: (1 + 3 + 5) / 3
        [], [],
        [(6, 9, 8.0)],  # flush: events 7-8, (7 + 9) / 2
    ]  # fmt: skip


def test_sliding_count_sum_and_count() -> None:
    assert emissions(Window("sliding", 3, 2, basis="count", aggregate="sum"), STREAM) == [
        [], [],
        [(0, 3, 12)],  # events 1-3
        [],
        [(2, 5, 10)],  # events 3-5: 6 + 1 + 3
        [],
        [(4, 7, 15)],  # events 5-7: 3 + 5 + 7
        [],
        [(6, 9, 16)],  # flush: events 7-8
    ]  # fmt: skip
    counts = run(Window("sliding", 3, 2, basis="count", aggregate="count"), STREAM)
    assert [(r.first_sn, r.last_sn, r.value) for r in counts] == [
        (1, 3, 3), (3, 5, 3), (5, 7, 3), (7, 8, 2)
    ]  # fmt: skip


def test_by_key_keeps_separate_windows_per_key() -> None:
    events = [Event(sn, float(sn), sn * 10, "a" if sn % 3 else "b") for sn in range(1, 9)]
    results = run(Window("tumbling", 2, basis="count", aggregate="sum", by_key=True), events)
    # Keys: a = sn 1, 2, 4, 5, 7, 8; b = sn 3, 6.
    assert [(r.key, r.first_sn, r.last_sn, r.value) for r in results] == [
        ("a", 1, 2, 30), ("a", 4, 5, 90), ("b", 3, 6, 90), ("a", 7, 8, 150)
    ]  # fmt: skip


def test_time_windows_of_all_keys_close_on_any_later_event_oldest_first() -> None:
    window = Window("sliding", 2, 1, aggregate="sum", by_key=True)
    for event in [Event(1, 0.2, 1, "a"), Event(2, 0.7, 2, "b"), Event(3, 1.3, 4, "a")]:
        assert window.push(event) == []
    assert window.push(Event(4, 1.6, 8, "b")) == []
    # t=3.5 closes [0, 2) and [1, 3) of both keys: a = 1 + 4 then 4, b = 2 + 8 then 8.
    closed = window.push(Event(5, 3.5, 16, "b"))
    assert [(r.key, r.start, r.value) for r in closed] == [
        ("a", 0, 5), ("b", 0, 10), ("a", 1, 4), ("b", 1, 8)
    ]  # fmt: skip


def test_an_event_at_a_window_end_closes_it_and_belongs_to_the_next() -> None:
    window = Window("tumbling", 2, aggregate="count")
    window.push(Event(1, 0.5, 1))
    assert [(r.start, r.end, r.value) for r in window.push(Event(2, 2.0, 1))] == [(0, 2, 1)]
    assert window.push(Event(3, 1.0, 1)) == []  # [0, 2) has closed: late
    assert window.late_events == 1
    assert [(r.start, r.first_sn, r.value) for r in window.flush()] == [(2, 2, 1)]


def test_late_events_join_only_open_windows() -> None:
    window = Window("sliding", 2, 1, aggregate="sum")
    window.push(Event(1, 0.5, 1))
    assert [(r.start, r.value) for r in window.push(Event(2, 2.5, 2))] == [(0, 1)]
    # t=1.8 belongs to [0, 2), already closed, and to [1, 3), still open.
    assert window.push(Event(3, 1.8, 4)) == []
    assert window.late_events == 0
    # t=0.1 belongs only to [0, 2): it is dropped and counted.
    assert window.push(Event(4, 0.1, 8)) == []
    assert window.late_events == 1
    assert [(r.start, r.value, r.last_sn) for r in window.flush()] == [(1, 6, 3), (2, 2, 2)]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("hopping", 2), {}),
        (("tumbling", 2, 1), {}),
        (("sliding", 2, 3), {}),
        (("sliding", 2, 0), {}),
        (("tumbling", 2.5), {"basis": "count"}),
        (("tumbling", 2), {"aggregate": "median"}),
        (("tumbling", 2), {"basis": "space"}),
    ],
)
def test_invalid_configurations_are_rejected(args: tuple, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Window(*args, **kwargs)


def test_negative_timestamps_are_rejected() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        Window("tumbling", 1).push(Event(1, -0.5, 1))


def test_snapshot_is_deterministic_json() -> None:
    window = Window("sliding", 3, 2, basis="count", aggregate="sum")
    for event in STREAM[:5]:
        window.push(event)
    expected = (
        b'{"config":{"aggregate":"sum","basis":"count","by_key":false,"kind":"sliding",'
        b'"size":3,"slide":2},"late_events":0,"panes":[[null,[[2,5,5,1,3]]]],'
        b'"progress":[[null,5]]}'
    )
    assert window.snapshot() == expected
    assert window.state_bytes == len(expected) == 166
    window.flush()  # closed windows leave no state behind
    assert b'"panes":[]' in window.snapshot()
    assert window.state_bytes == 166 - len(b"[null,[[2,5,5,1,3]]]")


def test_restore_rejects_a_snapshot_of_another_configuration() -> None:
    snapshot = Window("tumbling", 2).snapshot()
    with pytest.raises(ValueError, match="cannot restore"):
        Window("tumbling", 3).restore(snapshot)


def test_from_snapshot_rebuilds_configuration_and_state() -> None:
    window = Window("tumbling", 2, aggregate="average")
    for event in STREAM[:3]:
        window.push(event)
    copy = Window.from_snapshot(window.snapshot())
    assert [(r.start, r.value) for r in run(copy, STREAM[3:])] == [
        (0, 4.0), (2, 3.0), (4, 7.0), (6, 9.0)
    ]  # fmt: skip


@st.composite
def configurations(draw: st.DrawFn) -> dict:
    basis = draw(st.sampled_from(["time", "count"]))
    kind = draw(st.sampled_from(["tumbling", "sliding"]))
    if basis == "time":
        size = draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
        slide = size / draw(st.sampled_from([1, 2, 4]))
    else:
        size = draw(st.integers(1, 6))
        slide = draw(st.integers(1, size))
    return {
        "kind": kind,
        "size": size,
        "slide": slide if kind == "sliding" else None,
        "basis": basis,
        "aggregate": draw(st.sampled_from(["count", "sum", "average"])),
        "by_key": draw(st.booleans()),
    }


@st.composite
def streams(draw: st.DrawFn) -> list[Event]:
    # Mostly increasing timestamps with some disorder, so late events occur too.
    steps = draw(st.lists(st.floats(-1.0, 2.0, allow_nan=False), max_size=60))
    values = st.floats(-1e6, 1e6, allow_nan=False) | st.integers(-100, 100)
    events, t = [], 0.0
    for sn, step in enumerate(steps, start=1):
        t = max(0.0, t + step)
        events.append(Event(sn, t, draw(values), draw(st.sampled_from(["a", "b", None]))))
    return events


@given(configurations(), streams(), st.data())
def test_restored_operator_continues_exactly_as_the_original(
    config: dict, events: list[Event], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(events)), label="cut")
    original = Window(**config)
    uninterrupted = run(original, events)

    before = Window(**config)
    head = [r for event in events[:cut] for r in before.push(event)]
    snapshot = before.snapshot()
    after = Window(**config)
    after.restore(snapshot)
    assert after.snapshot() == snapshot
    assert head + run(after, events[cut:]) == uninterrupted
    assert after.late_events == original.late_events
    assert after.snapshot() == original.snapshot()


# Held events: the thesis's state, the events of the open windows ------------------------------


@given(configurations(), streams(), st.data())
def test_held_events_are_those_of_the_open_windows_and_survive_a_restore(
    config: dict, events: list[Event], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(events)), label="cut")
    plain = run(Window(**config), events)
    original = Window(**config, hold=True)
    uninterrupted = run(original, events)
    # Holding changes no result; each result carries its first event.
    assert [r._replace(first=None) for r in uninterrupted] == plain
    by_sn = {event.sn: event for event in events}
    assert all(r.first == by_sn[r.first_sn] for r in uninterrupted)

    before = Window(**config, hold=True)
    head = [r for event in events[:cut] for r in before.push(event)]
    # Each open window counts exactly the held events in its extent, and none is held twice.
    for key, panes in before.panes.items():
        kept = before.held[key]
        positions = before._positions(key, kept)
        for k, pane in panes.items():
            inside = [e for e, p in zip(kept, positions, strict=True)
                      if before.grid.start(k) <= p < before.grid.end(k)]
            assert len(inside) == pane.count and inside[0] is pane.first
    held = [(key, e.sn) for key, kept in before.held.items() for e in kept]
    assert len(set(held)) == len(held)
    assert before.held_events == len(held)
    snapshot = before.snapshot()
    after = Window.from_snapshot(snapshot)
    assert after.snapshot() == snapshot
    assert head + run(after, events[cut:]) == uninterrupted
    assert after.snapshot() == original.snapshot()


def test_a_held_snapshot_grows_with_the_events_of_the_open_window() -> None:
    window = Window("tumbling", 10.0, hold=True)
    sizes = []
    for sn in range(1, 1001):
        window.push(Event(sn, sn * 0.001, 1.0))
        if sn % 250 == 0:
            sizes.append(window.state_bytes)
    per_event = [(b - a) / 250 for a, b in zip(sizes, sizes[1:], strict=False)]
    assert window.held_events == 1000
    assert all(20 <= step <= 40 for step in per_event), per_event
    closed = window.push(Event(1001, 10.5, 1.0))  # closes [0, 10): its events go
    assert [(r.count, r.first.sn) for r in closed] == [(1000, 1)]
    assert window.held_events == 1 and window.state_bytes < sizes[0] / 20


def test_advance_closes_time_windows_without_an_event() -> None:
    window = Window("sliding", 2, 1, aggregate="sum", hold=True)
    window.push(Event(1, 0.5, 1))
    window.push(Event(2, 1.5, 2))
    assert window.next_end() == 2
    assert window.advance(1.9) == []
    assert [(r.start, r.value, r.first.sn) for r in window.advance(2.0)] == [(0, 3, 1)]
    assert window.next_end() == 3 and window.held_events == 1
    assert [(r.start, r.value) for r in window.advance(10.0)] == [(1, 2)]
    assert window.next_end() is None and window.held_events == 0
    # An event at a time the window has advanced past is late, as after a later event.
    assert window.push(Event(3, 7.5, 4)) == [] and window.late_events == 1
    with pytest.raises(ValueError, match="only time windows advance"):
        Window("tumbling", 3, basis="count").advance(1.0)


def test_a_held_snapshot_without_a_window_s_first_event_is_refused() -> None:
    window = Window("tumbling", 2, hold=True)
    window.push(Event(1, 0.5, 1))
    header, _ = window.snapshot().split(b"\n", 1)
    state = json.loads(header)
    state["held"] = {"format": "columns 1", "keys": [], "columns": []}
    broken = json.dumps(state, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    with pytest.raises(ValueError, match="no first event"):
        Window("tumbling", 2, hold=True).restore(broken)


def test_held_events_go_to_the_snapshot_as_columns_and_a_bad_one_says_what_is_wrong() -> None:
    window = Window("tumbling", 10.0, hold=True)
    for sn in range(1, 4):
        window.push(Event(sn, sn * 0.5, 2.0, "a" if sn % 2 else None))
    snapshot = window.snapshot()
    header, columns = snapshot.split(b"\n", 1)
    held = json.loads(header)["held"]
    # sn, timestamp, value packed; the key, annotated Key, as JSON
    assert [c[:2] for c in held["columns"]] == [["q", 24], ["d", 24], ["d", 24], ["json", 14]]
    assert held["keys"] == [[None, 3]] and len(columns) == 86
    copy = Window.from_snapshot(snapshot)
    assert copy.held == window.held and copy.snapshot() == snapshot
    with pytest.raises(ValueError, match="the snapshot is cut: .* 85 bytes, .* says 86"):
        Window("tumbling", 10.0, hold=True).restore(snapshot[:-1])
    with pytest.raises(ValueError, match="cannot restore"):
        Window("tumbling", 5.0, hold=True).restore(snapshot)
    unknown = snapshot.replace(b'"columns 1"', b'"columns 9"')
    with pytest.raises(ValueError, match="format 'columns 9'"):
        Window("tumbling", 10.0, hold=True).restore(unknown)
    # a value that does not fit its column's annotation goes as JSON, and comes back
    odd = Window("tumbling", 10.0, hold=True)
    odd.push(Event(2**70, 0.5, 1.0))
    assert Window.from_snapshot(odd.snapshot()).held[None][0].sn == 2**70


def test_a_snapshot_of_the_json_format_still_restores() -> None:
    old = (b'{"config":{"aggregate":"count","basis":"time","by_key":false,"hold":true,'
           b'"kind":"tumbling","size":2,"slide":2},"held":[[null,[[1,0.5,1,null]]]],'
           b'"late_events":0,"panes":[[null,[[0,1,1,1,1]]]],"progress":0.5}')
    window = Window("tumbling", 2, hold=True)
    window.restore(old)
    assert window.held == {None: [Event(1, 0.5, 1, None)]}
    assert [r.first.sn for r in window.advance(2.0)] == [1]
