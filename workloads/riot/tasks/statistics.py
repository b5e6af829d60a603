"""Stateful statistical tasks: interpolation, join, Kalman filter and approximate distinct count."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from workloads.riot.senml import Reading, Value
from workloads.riot.sketches import HyperLogLog
from workloads.riot.tasks.base import Message, Task, register, require_reading


def _is_number(value: Value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@register
class Interpolation(Task):
    """Fill a missing value with the last value seen from the same sensor (RIoTBench INP).

    With `fields` given, an absent field counts as missing too; without, only None does.
    A value missing before any was seen stays missing.
    """

    name = "interpolation"
    stateful = True

    def __init__(self, fields: Sequence[str] | None = None) -> None:
        self.fields = list(fields) if fields is not None else None
        self.last: dict[str, dict[str, Value]] = {}

    def process(self, message: Message) -> list[Message]:
        reading = require_reading(self, message)
        last = self.last.setdefault(reading.sensor, {})
        values = dict(reading.values)
        for field in self.fields if self.fields is not None else list(values):
            value = values.get(field)
            if value is None:
                if field in last:
                    values[field] = last[field]
            else:
                last[field] = value
        return [replace(reading, values=values)]

    def get_state(self) -> dict[str, Any]:
        return {"last": self.last}

    def set_state(self, state: dict[str, Any]) -> None:
        self.last = state["last"]


@register
class Join(Task):
    """Merge readings of one sensor whose times lie within `tolerance` s of the first one.

    A merged reading (at the first one's time) is emitted once it holds every name in
    `fields`; a reading beyond the tolerance discards the incomplete group and starts a new
    one. With one field per input the gain is 1 / len(fields) (RIoTBench JOI, N:1).
    """

    name = "join"
    stateful = True

    def __init__(self, fields: Sequence[str], tolerance: float = 1.0) -> None:
        if not fields:
            raise ValueError("join needs at least one field to wait for")
        self.fields = list(fields)
        self.tolerance = tolerance
        self.selectivity = 1.0 / len(self.fields)
        self.pending: dict[str, tuple[float, dict[str, Value]]] = {}

    def process(self, message: Message) -> list[Message]:
        reading = require_reading(self, message)
        group = self.pending.get(reading.sensor)
        if group is not None and abs(reading.timestamp - group[0]) <= self.tolerance:
            start, values = group[0], group[1] | reading.values
        else:
            start, values = reading.timestamp, dict(reading.values)
        if all(values.get(field) is not None for field in self.fields):
            self.pending.pop(reading.sensor, None)
            return [Reading(start, reading.sensor, values)]
        self.pending[reading.sensor] = (start, values)
        return []

    def get_state(self) -> dict[str, Any]:
        return {"pending": {sensor: [start, values]
                            for sensor, (start, values) in self.pending.items()}}

    def set_state(self, state: dict[str, Any]) -> None:
        self.pending = {sensor: (start, values)
                        for sensor, (start, values) in state["pending"].items()}


@register
class KalmanFilter(Task):
    """A 1-D Kalman filter per sensor and field, replacing each value by its estimate (KAL).

    The RIoTBench update (after Esme's "Kalman filter for dummies"): p += q;
    k = p / (p + r); x += k (z - x); p *= 1 - k. Unlike RIoTBench, whose first estimate is
    0, the first measurement seeds x, so a 25 C stream does not start from 0 C.
    """

    name = "kalman_filter"
    stateful = True

    def __init__(self, fields: Sequence[str] | None = None, process_noise: float = 0.1,
                 sensor_noise: float = 0.1, estimated_error: float = 1.0) -> None:
        self.fields = list(fields) if fields is not None else None
        self.q, self.r, self.p0 = process_noise, sensor_noise, estimated_error
        self.state: dict[str, dict[str, list[float]]] = {}

    def process(self, message: Message) -> list[Message]:
        reading = require_reading(self, message)
        filters = self.state.setdefault(reading.sensor, {})
        values = dict(reading.values)
        for field in self.fields if self.fields is not None else list(values):
            z = values.get(field)
            if not _is_number(z):
                continue
            if field not in filters:
                filters[field] = [float(z), self.p0]
                continue
            x, p = filters[field]
            p += self.q
            gain = p / (p + self.r)
            x += gain * (z - x)
            filters[field] = [x, (1.0 - gain) * p]
            values[field] = x
        return [replace(reading, values=values)]

    def get_state(self) -> dict[str, Any]:
        return {"filters": self.state}

    def set_state(self, state: dict[str, Any]) -> None:
        self.state = state["filters"]


@register
class DistinctApproxCount(Task):
    """The approximate number of distinct values seen so far, by HyperLogLog (RIoTBench DAC).

    It counts values of `field`, or sensor ids when None, over the whole stream, and emits
    `<field>_distinct` at each input's time and sensor.
    """

    name = "distinct_count"
    stateful = True

    def __init__(self, field: str | None = None, precision: int = 10) -> None:
        self.field = field
        self.sketch = HyperLogLog(precision)
        self.output = f"{field or 'sensor'}_distinct"

    def process(self, message: Message) -> list[Message]:
        reading = require_reading(self, message)
        value = reading.sensor if self.field is None else reading.values.get(self.field)
        if value is not None:
            self.sketch.add(str(value))
        return [Reading(reading.timestamp, reading.sensor,
                        {self.output: float(round(self.sketch.estimate()))})]

    def get_state(self) -> dict[str, Any]:
        return {"registers": self.sketch.registers.hex()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.sketch.load(bytes.fromhex(state["registers"]))
