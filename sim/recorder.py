"""Columnar buffers for what a run records; turned into arrays once, at the end."""

from __future__ import annotations

from array import array

import numpy as np

from sim.message import Message
from workloads.migration.record import COLUMNS

# Every reading ends in one state; a row's sink index says which (>= 0: the sink's node).
LOST, FILTERED, IN_FLIGHT = -1, -2, -3
STATES = ("delivered", "filtered", "lost", "in_flight")


class MessageLog:
    """One row per message delivered, filtered (an operator's selectivity dropped it, or no
    operator reads its topic), lost, or in flight at the end (queued on a CPU, held by a
    paused operator, or on a link), appended to typed arrays on the hot path."""

    def __init__(self):
        self.id = array("q")
        self.stream = array("i")
        self.source = array("i")
        self.sink = array("i")  # a node's index, or LOST, FILTERED, IN_FLIGHT
        self.t_sent = array("d")
        self.t_received = array("d")  # NaN for a lost message
        self.hops = array("i")

    def delivered(self, msg: Message, sink: int, now: float) -> None:
        self.id.append(msg.id)
        self.stream.append(msg.stream)
        self.source.append(msg.source)
        self.sink.append(sink)
        self.t_sent.append(msg.t_sent)
        self.t_received.append(now)
        self.hops.append(msg.hops)

    def lost(self, msg: Message, now: float) -> None:
        self.delivered(msg, LOST, float("nan"))

    def filtered(self, msg: Message, now: float) -> None:
        self.delivered(msg, FILTERED, float("nan"))

    def in_flight(self, msg: Message) -> None:
        self.delivered(msg, IN_FLIGHT, float("nan"))

    def columns(self, streams: list[str], nodes: list[str],
                end: float = float("inf")) -> dict[str, np.ndarray]:
        """The messages table; a sink's job that finishes after `end` (the run's end) was
        still queued then: in flight, not delivered.

        Its rows are in a canonical order, by time sent, source, stream, then sink, time
        received and hops, and the ids number the messages in that order (copies of one
        message keep one id): the table says what happened, not the order the model's
        events ran in, so a change that only reorders events (a feature that does nothing,
        the private link's shortcut) leaves it byte-identical."""
        sink = np.frombuffer(self.sink, dtype=np.int32).copy()
        t_received = np.frombuffer(self.t_received, dtype=np.float64).copy()
        late = t_received > end
        if late.any():
            sink[late], t_received[late] = IN_FLIGHT, np.nan
        t_sent = np.frombuffer(self.t_sent, dtype=np.float64)
        source = np.frombuffer(self.source, dtype=np.int32)
        stream = np.frombuffer(self.stream, dtype=np.int32)
        hops = np.frombuffer(self.hops, dtype=np.int32)
        ids = np.frombuffer(self.id, dtype=np.int64)
        order = _canonical(t_sent, (source, stream, ids, sink, t_received, hops))
        sink, t_received = sink[order], t_received[order]
        t_sent, source, stream, hops = t_sent[order], source[order], stream[order], hops[order]
        state = np.array(["delivered", "in_flight", "filtered", "lost"],
                         dtype=object)[np.minimum(sink, 0)]  # 0, -3, -2, -1
        node_names = np.array(nodes + [None], dtype=object)  # index -1 picks None
        return {
            "id": _numbered(ids[order]),
            "stream": np.array(streams, dtype=object)[stream],
            "source": node_names[source],
            "sink": node_names[np.maximum(sink, -1)],
            "t_sent": t_sent,
            "t_received": t_received,
            "latency": t_received - t_sent,
            "hops": hops,
            "lost": sink == LOST,
            "state": state,
        }


def _canonical(first: np.ndarray, then: tuple) -> np.ndarray:
    """The rows' order by `first`, rows equal in it by the `then` columns in turn: one sort of
    `first` (times sent: ties are a message's copies, mostly), then the tied rows alone."""
    order = np.argsort(first, kind="stable")
    ordered = first[order]
    same = ordered[1:] == ordered[:-1]
    if same.any():
        tied = np.flatnonzero(np.concatenate(([False], same)) | np.concatenate((same, [False])))
        group = np.cumsum(np.concatenate(([True], ~same)))[tied]
        rows = order[tied]
        keys = [column[rows] for column in reversed(then)]
        order[tied] = rows[np.lexsort((*keys, group))]
    return order


def _numbered(ids: np.ndarray) -> np.ndarray:
    """Ids renumbered 0, 1, 2, ... in the order each first appears (copies keep one id).
    A message's copies are next to each other in the canonical order (a copy keeps its
    time sent, source and stream, and the id comes next): a count of the changes, unless a
    message came apart (then a sort)."""
    if not len(ids):
        return ids.copy()
    change = np.empty(len(ids), dtype=bool)
    change[0] = True
    np.not_equal(ids[1:], ids[:-1], out=change[1:])
    first = ids[change]
    if first.min() >= 0 and np.bincount(first).max() <= 1:
        return np.cumsum(change) - 1
    unique, where, inverse = np.unique(ids, return_index=True, return_inverse=True)
    rank = np.empty(len(unique), dtype=np.int64)
    rank[np.argsort(where, kind="stable")] = np.arange(len(unique))
    return rank[inverse]


class SeriesLog:
    """A time series table: named columns appended row by row at each sample."""

    def __init__(self, *names: str):
        self._columns: dict[str, list] = {name: [] for name in names}
        self._lists = list(self._columns.values())

    def append(self, **row) -> None:
        for name, column in self._columns.items():
            column.append(row[name])

    def add(self, *values) -> None:
        """A row given in the order of the columns."""
        for column, value in zip(self._lists, values, strict=True):
            column.append(value)

    def extend(self, *columns: list) -> None:
        """Rows given as one list per column, in the order of the columns."""
        for column, values in zip(self._lists, columns, strict=True):
            column.extend(values)

    def columns(self) -> dict[str, np.ndarray]:
        return {name: np.array(values, dtype=object if values and isinstance(values[0], str)
                               else None) for name, values in self._columns.items()}


def migration_columns(records: list) -> dict[str, np.ndarray]:
    """The migrations table from the coordinator's records."""
    names = COLUMNS
    text = ("operator", "strategy", "source", "target", "synchronised", "spark_way", "status")
    return {name: np.array([getattr(r, name) for r in records],
                           dtype=object if name in text else None)
            for name in names}


class WindowLog:
    """One row per window output that went downstream (the sink's view of an operator),
    appended to typed arrays: a run forwards hundreds of them per simulated second."""

    def __init__(self):
        self.t = array("d")
        self.operator: list[str] = []
        self.node: list[str] = []
        self.window = array("q")
        self.last_sn = array("q")
        self.count = array("q")
        self.t_first = array("d")  # when the window's first event was processed
        self.migration = array("q")  # -1 outside migrations
        self.adjusted = array("b")

    def append(self, t: float, output, last_sn: int, count: int, migration: int,
               adjusted: bool) -> None:
        self.t.append(t)
        self.operator.append(output.operator)
        self.node.append(output.node)
        self.window.append(output.index)
        self.last_sn.append(last_sn)
        self.count.append(count)
        self.t_first.append(output.t_first)
        self.migration.append(migration)
        self.adjusted.append(adjusted)

    def rows_of(self, operators: set[str]) -> dict[str, list[int]]:
        """The rows of each of these operators, in order."""
        rows: dict[str, list[int]] = {name: [] for name in operators}
        for i, name in enumerate(self.operator):
            if name in rows:
                rows[name].append(i)
        return rows

    def columns(self) -> dict[str, np.ndarray]:
        """The windows table."""
        t = np.frombuffer(self.t, dtype=np.float64).copy()
        return {
            "t": t,
            "operator": np.array(self.operator, dtype=object),
            "node": np.array(self.node, dtype=object),
            "window": np.frombuffer(self.window, dtype=np.int64).copy(),
            "last_sn": np.frombuffer(self.last_sn, dtype=np.int64).copy(),
            "count": np.frombuffer(self.count, dtype=np.int64).copy(),
            "processing_time": t - np.frombuffer(self.t_first, dtype=np.float64),
            "migration": np.frombuffer(self.migration, dtype=np.int64).copy(),
            "adjusted": np.frombuffer(self.adjusted, dtype=np.int8).astype(bool),
        }
