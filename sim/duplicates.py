"""Readings a migration's source and target both consumed on record, counted from the messages
table in one pass (sim.migration.Coordinator.consumed_twice).

Only a reading whose id is delivered more than once can be consumed twice, so the table is
sorted by id once and only those rows are kept (a run has few); they are then sorted by sink
node (and reading source) and time, and each migration's rows are found by binary search:
O(n log n) in the run's messages, against one pass over the whole table per migration.

Which operator consumed a delivered row the messages table does not say (its columns: id,
stream, source, sink node, times). A migration's rows are restricted to what the table can
tell of its operator: the streams the operator reads (through the operators upstream of it)
and, for a `follow` operator's group (one per moving user), the user's device as the row's
source. Two sink operators that read the same stream on the same node remain one: a reading
both consume there counts as consumed twice for a migration of either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from workloads.pipeline import topic_filter
from workloads.topics import shared


@dataclass(frozen=True)
class Span:
    """One migration's share of the messages table: rows delivered at one of `nodes` from
    `start` to `stop` (both included), of one of `streams` (None: any) and from `source`
    (None: any)."""

    nodes: tuple[str, ...]
    start: float
    stop: float
    streams: frozenset[str] | None = None
    source: str | None = None


def readings_of(model, group: str) -> tuple[frozenset[str] | None, str | None]:
    """What the messages table can tell of the readings a group consumes: the stream names
    (None: any) and, for a follow operator's group, the device whose readings it reads."""
    spec = model.operator_of(group)
    device = None
    if spec.follow and group.startswith(f"{spec.name}@"):  # sim.assembly.follow_groups' name
        device = group[len(spec.name) + 1:]
    return _streams(model, model.group(group).filters, frozenset({spec.name})), device


def _streams(model, filters: list[str], seen: frozenset[str]) -> frozenset[str] | None:
    """The streams whose readings reach a subscriber of these filters, by the filters' first
    level: a stream's name (its topics begin with it) or an operator's `writes` (the streams
    that operator reads: an operator's output keeps its input's stream). None: any stream
    (a wildcard first level, or a window operator's output, a message of no stream)."""
    names = set(model.stream_names)
    found: set[str] = set()
    for topic_filter_ in filters:
        head = shared(topic_filter_)[1].split("/", 1)[0]
        if head in ("+", "#"):
            return None
        if head in names:
            found.add(head)
        for spec in model.specs.values():
            if spec.writes != head or spec.name in seen:
                continue
            if spec.window is not None:
                return None
            upstream = _streams(model, [topic_filter(r) for r in spec.reads], seen | {spec.name})
            if upstream is None:
                return None
            found |= upstream
    return frozenset(found)


def repeated_rows(ids: np.ndarray, t_received: np.ndarray) -> np.ndarray:
    """The rows, in table order, of readings delivered more than once (a delivered row has a
    reception time; the others' is NaN)."""
    delivered = np.flatnonzero(~np.isnan(t_received))
    if len(delivered) < 2:
        return delivered[:0]
    order = np.argsort(ids[delivered], kind="stable")
    sorted_ids = ids[delivered][order]
    same = sorted_ids[1:] == sorted_ids[:-1]
    repeated = np.zeros(len(sorted_ids), dtype=bool)
    repeated[1:] |= same
    repeated[:-1] |= same
    return np.sort(delivered[order[repeated]])


class _Index:
    """Rows sorted by a key (a node, or a node and a source) and then time."""

    def __init__(self, keys: np.ndarray, t: np.ndarray, rows: np.ndarray):
        order = np.lexsort((t, keys))
        self.keys, self.t, self.rows = keys[order], t[order], rows[order]

    def between(self, key: int, start: float, stop: float) -> np.ndarray:
        first, last = np.searchsorted(self.keys, key, "left"), np.searchsorted(
            self.keys, key, "right")
        times = self.t[first:last]
        return self.rows[first + np.searchsorted(times, start, "left"):
                         first + np.searchsorted(times, stop, "right")]


def count_twice(messages: dict[str, np.ndarray], spans: list[Span],
                rows: np.ndarray | None = None) -> list[int]:
    """For each span, the deliveries beyond the first of each reading among its rows;
    `rows`: the table's repeated_rows when they are known."""
    counts = [0] * len(spans)
    if rows is None:
        rows = repeated_rows(messages["id"], messages["t_received"])
    if not len(rows) or not spans:
        return counts
    ids, t = messages["id"][rows], messages["t_received"][rows]
    sink_names, sinks = np.unique(messages["sink"][rows], return_inverse=True)
    sink_code = {name: i for i, name in enumerate(sink_names)}
    positions = np.arange(len(rows))
    by_node = _Index(sinks, t, positions)
    by_source = streams = None
    source_code: dict[str, int] = {}
    for n, span in enumerate(spans):
        nodes = [sink_code[node] for node in dict.fromkeys(span.nodes) if node in sink_code]
        if not nodes or math.isnan(span.start):
            continue
        if span.source is not None:
            if by_source is None:
                source_names, sources = np.unique(messages["source"][rows], return_inverse=True)
                source_code = {name: i for i, name in enumerate(source_names)}
                by_source = _Index(sources.astype(np.int64) * len(sink_names) + sinks, t,
                                   positions)
            if span.source not in source_code:
                continue
            base = source_code[span.source] * len(sink_names)
            mine = [by_source.between(base + node, span.start, span.stop) for node in nodes]
        else:
            mine = [by_node.between(node, span.start, span.stop) for node in nodes]
        mine = np.concatenate(mine) if len(mine) > 1 else mine[0]
        if span.streams is not None and len(mine):
            if streams is None:
                streams = messages["stream"][rows]
            mine = mine[np.isin(streams[mine], list(span.streams))]
        if len(mine) > 1:
            counts[n] = len(mine) - len(np.unique(ids[mine]))
    return counts
