"""Columnar buffers for what a run records; turned into arrays once, at the end."""

from __future__ import annotations

from array import array

import numpy as np

from sim.message import Message


class MessageLog:
    """One row per delivered or lost message, appended to typed arrays on the hot path."""

    def __init__(self):
        self.id = array("q")
        self.stream = array("i")
        self.source = array("i")
        self.sink = array("i")  # -1 for a lost message
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
        self.delivered(msg, -1, float("nan"))

    def columns(self, streams: list[str], nodes: list[str]) -> dict[str, np.ndarray]:
        sink = np.frombuffer(self.sink, dtype=np.int32)
        t_sent = np.frombuffer(self.t_sent, dtype=np.float64)
        t_received = np.frombuffer(self.t_received, dtype=np.float64)
        node_names = np.array(nodes + [None], dtype=object)  # index -1 picks None
        return {
            "id": np.frombuffer(self.id, dtype=np.int64).copy(),
            "stream": np.array(streams, dtype=object)[np.frombuffer(self.stream, dtype=np.int32)],
            "source": node_names[np.frombuffer(self.source, dtype=np.int32)],
            "sink": node_names[sink],
            "t_sent": t_sent.copy(),
            "t_received": t_received.copy(),
            "latency": t_received - t_sent,
            "hops": np.frombuffer(self.hops, dtype=np.int32).copy(),
            "lost": sink < 0,
        }


class SeriesLog:
    """A time series table: named columns appended row by row at each sample."""

    def __init__(self, *names: str):
        self._columns: dict[str, list] = {name: [] for name in names}

    def append(self, **row) -> None:
        for name, column in self._columns.items():
            column.append(row[name])

    def columns(self) -> dict[str, np.ndarray]:
        return {name: np.array(values, dtype=object if values and isinstance(values[0], str)
                               else None) for name, values in self._columns.items()}


def migration_columns(records: list) -> dict[str, np.ndarray]:
    """The migrations table from the coordinator's records."""
    names = ("id", "operator", "strategy", "source", "target", "start", "end", "downtime",
             "output_gap", "state_bytes", "chunks", "held", "duplicates", "lost", "reordered",
             "synchronised")
    text = ("operator", "strategy", "source", "target", "synchronised")
    return {name: np.array([getattr(r, name) for r in records],
                           dtype=object if name in text else None)
            for name in names}


def window_columns(forwards: list) -> dict[str, np.ndarray]:
    """The windows table: every window output that went downstream."""
    return {
        "t": np.array([f.t for f in forwards], dtype=float),
        "operator": np.array([f.output.operator for f in forwards], dtype=object),
        "node": np.array([f.output.node for f in forwards], dtype=object),
        "window": np.array([f.output.index for f in forwards], dtype=np.int64),
        "last_sn": np.array([f.last_sn for f in forwards], dtype=np.int64),
        "count": np.array([f.count for f in forwards], dtype=np.int64),
        "processing_time": np.array([f.t - f.output.t_first for f in forwards], dtype=float),
        "migration": np.array([f.migration for f in forwards], dtype=np.int64),
        "adjusted": np.array([f.adjusted for f in forwards], dtype=bool),
    }
