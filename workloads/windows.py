"""Tumbling and sliding window aggregations (count, sum, average) with snapshot and restore."""

from __future__ import annotations

import contextlib
import gc
import json
import sys
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from itertools import chain
from typing import Any, NamedTuple

Key = str | int | None


class Event(NamedTuple):
    """One stream event; `sn` is the serial number an interceptor stamps on it.

    Operators read only these four attributes, so any object that has them will do.
    """

    sn: int
    timestamp: float
    value: float
    key: Key = None


class WindowResult(NamedTuple):
    """One closed window: its extent, the SNs of its first and most recent events, its value;
    `first` is the first event itself when the operator holds its events, else None."""

    key: Key
    start: float
    end: float
    first_sn: int
    last_sn: int
    count: int
    value: float
    first: Any = None


class Aggregate(StrEnum):
    """What a window computes from its events' values."""

    COUNT = "count"
    SUM = "sum"
    AVERAGE = "average"

    def of(self, count: int, total: float) -> float:
        if self is Aggregate.COUNT:
            return count
        if self is Aggregate.SUM:
            return total
        return total / count


class Basis(StrEnum):
    """What window sizes measure: seconds of event time, or numbers of events."""

    TIME = "time"
    COUNT = "count"


@dataclass(frozen=True)
class Grid:
    """Window extents on a position axis: window k spans [k * slide, k * slide + size)."""

    size: float
    slide: float

    def start(self, k: int) -> float:
        return k * self.slide

    def end(self, k: int) -> float:
        return k * self.slide + self.size

    def windows_of(self, position: float) -> list[int]:
        """The windows holding `position`, oldest first."""
        # Float division can land one off either way; the exact test below decides.
        low = max(0, int((position - self.size) // self.slide))
        high = int(position // self.slide) + 1
        return [k for k in range(low, high + 1) if self.start(k) <= position < self.end(k)]


class EventTime:
    """Event-time progress: the latest timestamp seen (the watermark) closes every key's windows."""

    spans_keys = True

    def __init__(self) -> None:
        self.watermark: float | None = None

    def position(self, event: Event, key: Key) -> float:
        if event.timestamp < 0:
            raise ValueError(f"event {event.sn}: timestamps must be non-negative")
        return event.timestamp

    def advance(self, event: Event, key: Key) -> None:
        if self.watermark is None or event.timestamp > self.watermark:
            self.watermark = event.timestamp

    def reached(self, key: Key) -> float:
        return float("-inf") if self.watermark is None else self.watermark

    def state(self) -> float | None:
        return self.watermark

    def load(self, state: float | None) -> None:
        self.watermark = state


class EventCount:
    """Count progress: each key's own number of events closes that key's windows."""

    spans_keys = False

    def __init__(self) -> None:
        self.seen: dict[Key, int] = {}

    def position(self, event: Event, key: Key) -> int:
        return self.seen.get(key, 0)

    def advance(self, event: Event, key: Key) -> None:
        self.seen[key] = self.seen.get(key, 0) + 1

    def reached(self, key: Key) -> int:
        return self.seen.get(key, 0)

    def state(self) -> list[list[object]]:
        # Pairs, not a JSON object: keys may be None or int, and their order must survive.
        return [[key, n] for key, n in self.seen.items()]

    def load(self, state: list[list[object]]) -> None:
        self.seen = {key: n for key, n in state}


@dataclass(slots=True)
class Pane:
    """Running totals of one open window (and its first event, when events are held)."""

    first_sn: int
    last_sn: int
    count: int
    total: float
    first: Any = None

    @classmethod
    def starting(cls, event: Event, hold: bool) -> Pane:
        return cls(event.sn, event.sn, 1, event.value, event if hold else None)

    def add(self, event: Event) -> None:
        self.last_sn = event.sn
        self.count += 1
        self.total += event.value


class Window:
    """A window operator: assigns events to windows, emits each window's aggregate when it closes.

    Time windows close when an event at or past their end arrives (or when `advance` moves
    time past it); count windows when they hold `size` events. Events arriving after all
    their windows closed are dropped and counted in `late_events`. With `by_key`, each event
    key has its own windows.

    With `hold`, the operator also keeps the events of its open windows, as the migration
    thesis's operator does (its state is the events in the current window): the snapshot
    grows with them, and each result carries its first event. Held events are stored as
    given and written to the snapshot by field, as columns (see `snapshot`), so they must be
    tuples that `event_type(*fields)` rebuilds (any NamedTuple with Event's four fields first).
    """

    def __init__(
        self,
        kind: str,
        size: float,
        slide: float | None = None,
        *,
        basis: str = "time",
        aggregate: str = "count",
        by_key: bool = False,
        hold: bool = False,
        event_type: Callable[..., Any] = Event,
    ) -> None:
        if kind not in ("tumbling", "sliding"):
            raise ValueError(f"kind must be 'tumbling' or 'sliding', not {kind!r}")
        if kind == "tumbling" and slide not in (None, size):
            raise ValueError("a tumbling window slides by its size; leave slide out")
        slide = size if slide is None else slide
        self.basis = Basis(basis)
        self.aggregate = Aggregate(aggregate)
        if self.basis is Basis.COUNT and not (isinstance(size, int) and isinstance(slide, int)):
            raise ValueError("count windows need whole-number size and slide")
        if not 0 < slide <= size:
            raise ValueError(f"need 0 < slide <= size, got slide={slide}, size={size}")
        self.kind = kind
        self.by_key = by_key
        self.grid = Grid(size, slide)
        self.progress: EventTime | EventCount = (
            EventTime() if self.basis is Basis.TIME else EventCount()
        )
        self.panes: dict[Key, dict[int, Pane]] = {}
        self.late_events = 0
        self.hold = hold
        self.event_type = event_type
        # Per key, the events of its open windows in arrival order (with `hold` only).
        self.held: dict[Key, list[Any]] = {}

    @property
    def config(self) -> dict[str, object]:
        config: dict[str, object] = {
            "kind": self.kind,
            "size": self.grid.size,
            "slide": self.grid.slide,
            "basis": self.basis.value,
            "aggregate": self.aggregate.value,
            "by_key": self.by_key,
        }
        if self.hold:  # only then: snapshots of operators without it keep their bytes
            config["hold"] = True
        return config

    @property
    def held_events(self) -> int:
        """How many events the open windows hold (0 without `hold`)."""
        return sum(map(len, self.held.values()))

    def next_end(self) -> float | None:
        """The earliest end of an open window, None when none is open."""
        ends = [self.grid.end(k) for panes in self.panes.values() for k in panes]
        return min(ends) if ends else None

    def push(self, event: Event) -> list[WindowResult]:
        """Add one event; return the windows it closed, oldest first."""
        key = event.key if self.by_key else None
        position = self.progress.position(event, key)
        reached = self.progress.reached(key)
        # slide <= size, so every event has a window; if all have closed, the event is late.
        still_open = [k for k in self.grid.windows_of(position) if self.grid.end(k) > reached]
        if not still_open:
            self.late_events += 1
        panes = self.panes.setdefault(key, {})
        for k in still_open:
            if k in panes:
                panes[k].add(event)
            else:
                panes[k] = Pane.starting(event, self.hold)
        if self.hold and still_open:
            self.held.setdefault(key, []).append(event)
        self.progress.advance(event, key)
        return self._close(list(self.panes) if self.progress.spans_keys else [key])

    def advance(self, timestamp: float) -> list[WindowResult]:
        """Time has reached `timestamp` with no event (a timer): close the windows that ended
        by then, as an event at `timestamp` would. Time windows only."""
        if not isinstance(self.progress, EventTime):
            raise ValueError("count windows close on events; only time windows advance")
        if self.progress.watermark is None or timestamp > self.progress.watermark:
            self.progress.watermark = timestamp
        return self._close(list(self.panes))

    def drop_through(self, k: int) -> int:
        """Forget the open windows numbered k or less (a restored state whose window was
        already sent on before the crash it is restored after); how many events they held."""
        dropped = 0
        for key in list(self.panes):
            panes = self.panes[key]
            for number in [n for n in panes if n <= k]:
                dropped += panes.pop(number).count
            if self.hold:
                self._forget(key, panes)
            if not panes:
                del self.panes[key]
        return dropped

    def flush(self) -> list[WindowResult]:
        """End of stream: emit every open window, complete or not."""
        return self._close(list(self.panes), everything=True)

    def _close(self, keys: list[Key], everything: bool = False) -> list[WindowResult]:
        closed: list[tuple[int, Key, Pane]] = []
        for key in keys:
            panes = self.panes.get(key, {})
            reached = self.progress.reached(key)
            ended = [k for k in panes if everything or self.grid.end(k) <= reached]
            for k in ended:
                closed.append((k, key, panes.pop(k)))
            if ended and self.hold:
                self._forget(key, panes)
            if not panes:
                self.panes.pop(key, None)
        closed.sort(key=lambda item: item[0])  # stable: keys keep their first-seen order
        return [self._result(k, key, pane) for k, key, pane in closed]

    def _positions(self, key: Key, events: list[Any]) -> list[float]:
        """Where a key's held events lie on the window axis."""
        if self.basis is Basis.TIME:
            return [event.timestamp for event in events]
        # Count windows are never late: the held events are the key's last ones, in order.
        seen = self.progress.reached(key)
        return list(range(seen - len(events), seen))

    def _forget(self, key: Key, panes: dict[int, Pane]) -> None:
        """Drop the held events no open window of the key holds any more: those before the
        start of its oldest open window (every later one is in that window)."""
        events = self.held.get(key)
        if not events:
            return
        if not panes:
            del self.held[key]
            return
        oldest = self.grid.start(min(panes))
        positions = self._positions(key, events)
        self.held[key] = [e for e, p in zip(events, positions, strict=True) if p >= oldest]

    def _result(self, k: int, key: Key, pane: Pane) -> WindowResult:
        start, end = self.grid.start(k), self.grid.end(k)
        value = self.aggregate.of(pane.count, pane.total)
        return WindowResult(key, start, end, pane.first_sn, pane.last_sn, pane.count, value,
                            pane.first)

    def snapshot(self) -> bytes:
        """The operator's whole state as deterministic bytes: compact JSON, and with `hold`
        a JSON header line followed by the held events' columns (see `_held_columns`)."""
        state = {
            "config": self.config,
            "progress": self.progress.state(),
            "panes": [
                [key, [[k, p.first_sn, p.last_sn, p.count, p.total] for k, p in panes.items()]]
                for key, panes in self.panes.items()
            ],
            "late_events": self.late_events,
        }
        if not self.hold:
            return json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
        with _no_collection():
            held, blobs = _held_columns(self.held, self.event_type)
        state["held"] = held
        header = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
        return b"".join([header, b"\n", *blobs])

    def restore(self, data: bytes) -> None:
        """Continue from a snapshot taken by an operator with the same configuration."""
        state, columns = _split(data)
        if state["config"] != self.config:
            raise ValueError(f"snapshot of {state['config']} cannot restore {self.config}")
        self.progress.load(state["progress"])
        self.panes = {
            key: {k: Pane(first, last, count, total) for k, first, last, count, total in panes}
            for key, panes in state["panes"]
        }
        self.late_events = state["late_events"]
        if self.hold:
            held = state.get("held")
            if isinstance(held, dict):
                with _no_collection():
                    self.held = _held_events(held, columns, self.event_type)
            else:  # a snapshot of the JSON format, before columns
                make = self.event_type
                self.held = {key: [make(*fields) for fields in events]
                             for key, events in held or []}
            for key, panes in self.panes.items():
                self._find_firsts(key, panes)

    def _find_firsts(self, key: Key, panes: dict[int, Pane]) -> None:
        """Each open window's first event: the first held one in its extent (every event in
        it arrived while it was open, so the first of them started it)."""
        events = self.held.get(key, [])
        # Lazily for time windows: the first event of the oldest window is the first held one.
        positions = (self._positions(key, events) if self.basis is Basis.COUNT
                     else None)
        for k, pane in panes.items():
            start, end = self.grid.start(k), self.grid.end(k)
            if positions is None:
                pane.first = next((e for e in events if start <= e.timestamp < end), None)
            else:
                pane.first = next((e for e, p in zip(events, positions, strict=True)
                                   if start <= p < end), None)
            if pane.first is None or pane.first.sn != pane.first_sn:
                raise ValueError(f"snapshot holds no first event (SN {pane.first_sn}) for "
                                 f"window [{start}, {end}) of key {key!r}")

    @classmethod
    def from_snapshot(cls, data: bytes, event_type: Callable[..., Any] = Event) -> Window:
        """A new operator built from the configuration and state a snapshot carries."""
        config = _split(data)[0]["config"]
        window = cls(
            config["kind"],
            config["size"],
            config["slide"],
            basis=config["basis"],
            aggregate=config["aggregate"],
            by_key=config["by_key"],
            hold=config.get("hold", False),
            event_type=event_type,
        )
        window.restore(data)
        return window

    @property
    def state_bytes(self) -> int:
        """Size of the snapshot: what a state transfer would move."""
        return len(self.snapshot())


# Held events go to a snapshot by field, as columns: a field annotated int or float as packed
# 8-byte numbers (array 'q' or 'd'), str as indices into a table of its distinct values (the
# streams and devices of a window repeat), None as nothing; others, or a column whose values
# do not fit its annotation, as a JSON array. Packing and unpacking such columns runs in C
# (zip, array, map): JSON of 100,000 events took 2.7 s to write and 1.9 s to read on the
# arm64 gateway under QEMU, columns 0.6 s and 0.5 s (benchmarks/emu_migration.py). A float
# column keeps an int value as the float of the same value.
HELD_FORMAT = "columns 1"
_ARRAYS = {"int": "q", "float": "d"}
_INDEX = "I"


@contextlib.contextmanager
def _no_collection():
    """The cyclic collector paused: packing or unpacking columns makes a tuple per event (zip),
    and each few hundred new tuples would have it walk every held event again. On the arm64
    gateway, restoring 150,000 events took 1.2 s with it running, 0.4 s without. None of
    these tuples holds a cycle."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _annotation(event_type: Any, field: str) -> str:
    """A field's annotation by name: int, float, str, None, or another (JSON)."""
    hints = getattr(event_type, "__annotations__", {})
    if field not in hints:
        return "json"
    hint = hints[field]
    # NamedTuple turns postponed annotations into ForwardRefs.
    hint = getattr(hint, "__forward_arg__", hint)
    if hint is None or hint is type(None):
        return "None"
    return hint if isinstance(hint, str) else getattr(hint, "__name__", "json")


def _fields(event_type: Any, width: int) -> list[str]:
    fields = list(getattr(event_type, "_fields", ()))
    return fields if len(fields) == width else [f"field {i}" for i in range(width)]


def _packed(column: tuple, code: str) -> bytes:
    packed = array(code, column)
    if sys.byteorder == "big":  # snapshots are little-endian wherever they are taken
        packed.byteswap()
    return packed.tobytes()


def _unpacked(data: memoryview, code: str) -> array:
    values = array(code)
    values.frombytes(data)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def _held_columns(held: dict[Key, list[Any]], event_type: Any) -> tuple[dict, list[bytes]]:
    """The held events as a header (keys with their event counts, each column's codec and
    length) and the columns' bytes, every key's events one after the other."""
    events = list(chain.from_iterable(held.values()))
    columns = list(zip(*events, strict=True)) if events else []
    fields = _fields(event_type, len(columns))
    specs: list[list[Any]] = []
    blobs: list[bytes] = []
    for field, column in zip(fields, columns, strict=True):
        kind = _annotation(event_type, field)
        spec: list[Any] | None = None
        blob = b""
        if kind in _ARRAYS:
            with contextlib.suppress(TypeError, OverflowError):  # then JSON
                blob, spec = _packed(column, _ARRAYS[kind]), [_ARRAYS[kind], 0]
        elif kind == "str":
            names = list(dict.fromkeys(column))
            if all(type(name) is str for name in names):
                index = {name: i for i, name in enumerate(names)}
                blob = _packed(array(_INDEX, map(index.__getitem__, column)), _INDEX)
                spec = ["str", 0, names]
        elif kind == "None" and column.count(None) == len(column):
            spec = ["none", 0]
        if spec is None:
            blob, spec = json.dumps(column, separators=(",", ":")).encode(), ["json", 0]
        spec[1] = len(blob)
        specs.append(spec)
        blobs.append(blob)
    header = {"format": HELD_FORMAT, "keys": [[key, len(kept)] for key, kept in held.items()],
              "columns": specs}
    return header, blobs


def _split(data: bytes) -> tuple[dict, memoryview | None]:
    """A snapshot's JSON state, and the bytes after its header line (held columns), if any."""
    end = data.find(b"\n")
    if end < 0:
        return json.loads(data), None
    return json.loads(data[:end]), memoryview(data)[end + 1:]


def _held_events(header: dict, data: memoryview | None, event_type: Any) -> dict[Key, list]:
    """The held events back from `_held_columns`'s header and bytes; a ValueError says what
    does not fit (a snapshot cut short, a column of the wrong length or codec)."""
    if header.get("format") != HELD_FORMAT:
        raise ValueError(f"held events in format {header.get('format')!r}: this operator "
                         f"reads {HELD_FORMAT!r}")
    specs = header["columns"]
    total = sum(spec[1] for spec in specs)
    given = 0 if data is None else len(data)
    if given != total:
        raise ValueError(f"the snapshot is cut: its held events' columns take {given} bytes, "
                         f"its header says {total}")
    count = sum(n for _, n in header["keys"])
    fields = _fields(event_type, len(specs))
    columns: list[Any] = []
    offset = 0
    for field, spec in zip(fields, specs, strict=True):
        codec, length = spec[0], spec[1]
        part = data[offset:offset + length] if data is not None else memoryview(b"")
        offset += length
        if codec in ("q", "d"):
            column: Any = _unpacked(part, codec)
        elif codec == "str":
            column = list(map(spec[2].__getitem__, _unpacked(part, _INDEX)))
        elif codec == "none":
            column = [None] * count
        elif codec == "json":
            column = json.loads(bytes(part))
        else:
            raise ValueError(f"held events' {field}: unknown column codec {codec!r}")
        if len(column) != count:
            raise ValueError(f"held events' {field}: {len(column)} values, the snapshot holds "
                             f"{count} events")
        columns.append(column)
    fields_wanted = getattr(event_type, "_fields", None)
    if columns and fields_wanted is not None and len(fields_wanted) != len(columns):
        raise ValueError(f"held events of {len(columns)} fields cannot restore "
                         f"{event_type.__name__}'s {len(fields_wanted)}")
    if not columns:
        events = []
    elif isinstance(event_type, type) and issubclass(event_type, tuple):
        # tuple.__new__ from zip's tuples: no Python frame per event (a NamedTuple's own
        # __new__ is Python code). The lengths are checked above.
        events = list(map(partial(tuple.__new__, event_type), zip(*columns, strict=False)))
    else:
        events = list(map(event_type, *columns))
    held: dict[Key, list] = {}
    start = 0
    for key, n in header["keys"]:
        held[key] = events[start:start + n]
        start += n
    return held
