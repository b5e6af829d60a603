"""A sensor reading and its wire forms: SenML (RFC 8428 JSON), CSV rows and plain JSON."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

Value = float | str | bool | None


@dataclass(frozen=True, slots=True)
class Reading:
    """Named values one sensor observed at one time (seconds since the epoch); None is missing."""

    timestamp: float
    sensor: str
    values: dict[str, Value] = field(default_factory=dict)


# SenML ----------------------------------------------------------------------------------------

# The base name ends with this so a resolved record name (bn + n) reads "sensor/field".
_SEP = "/"
_SEPARATORS = "/:"


def encode_senml(reading: Reading, units: Mapping[str, str] | None = None) -> str:
    """One SenML pack: the sensor as base name, the time as base time, a record per value."""
    records: list[dict[str, object]] = []
    for name, value in reading.values.items():
        if value is None:
            continue  # SenML has no null value: a missing reading is an absent record
        record: dict[str, object] = {"n": name}
        if isinstance(value, bool):  # before the number test: bool is an int in Python
            record["vb"] = value
        elif isinstance(value, str):
            record["vs"] = value
        else:
            record["v"] = value
        if units and name in units:
            record["u"] = units[name]
        records.append(record)
    base = {"bn": reading.sensor + _SEP, "bt": reading.timestamp}
    if records:
        records[0] = base | records[0]
    else:
        records = [base]
    return json.dumps(records, separators=(",", ":"))


def decode_senml(payload: str | bytes) -> list[Reading]:
    """Resolve a SenML pack (RFC 8428, section 4.6) into readings, one per (sensor, time).

    The base name (less a trailing "/" or ":") is the sensor and the record name the field;
    a record without a name is named by its unit, as in RFC 8428's own examples. A pack
    without base names takes "sensor/field" apart at the last "/".
    """
    try:
        pack = json.loads(payload)
    except json.JSONDecodeError as error:
        raise ValueError(f"SenML pack is not JSON: {error}") from None
    if not isinstance(pack, list):
        raise ValueError("SenML pack must be a JSON array of records")
    base_name, base_time, base_unit, base_value = "", 0.0, "", 0.0
    grouped: dict[tuple[str, float], dict[str, Value]] = {}
    for index, record in enumerate(pack):
        if not isinstance(record, dict):
            raise ValueError(f"SenML record {index} is not a JSON object")
        base_name = record.get("bn", base_name)
        base_time = float(record.get("bt", base_time))
        base_unit = record.get("bu", base_unit)
        base_value = float(record.get("bv", base_value))
        value = _record_value(record, base_value)
        name = record.get("n", "")
        if value is None and not name:
            continue  # a record that only sets base fields
        if base_name:
            sensor = base_name[:-1] if base_name[-1] in _SEPARATORS else base_name
            field_name = name or record.get("u", base_unit) or "v"
        elif name:
            sensor, _, field_name = name.rpartition(_SEP)
            if not sensor:
                sensor, field_name = name, record.get("u", base_unit) or "v"
        else:
            raise ValueError(f"SenML record {index} has no name (bn + n is empty)")
        time = base_time + float(record.get("t", 0.0))
        grouped.setdefault((sensor, time), {})[field_name] = value
    return [Reading(time, sensor, values) for (sensor, time), values in grouped.items()]


def _record_value(record: Mapping[str, object], base_value: float) -> Value:
    if "v" in record:
        return base_value + float(record["v"])  # type: ignore[arg-type]
    for key in ("vs", "vb", "vd"):
        if key in record:
            return record[key]  # type: ignore[return-value]
    return None


# Plain JSON -----------------------------------------------------------------------------------


def to_json(reading: Reading) -> str:
    return json.dumps({"timestamp": reading.timestamp, "sensor": reading.sensor,
                       "values": reading.values}, separators=(",", ":"))


def from_json(payload: str | bytes) -> Reading:
    data = json.loads(payload)
    return Reading(float(data["timestamp"]), str(data["sensor"]), dict(data.get("values", {})))


# CSV ------------------------------------------------------------------------------------------


def format_value(value: Value) -> str:
    """A CSV cell: integral floats without ".0" (epoch seconds, counts), missing as empty."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse_value(cell: str) -> Value:
    """The inverse of format_value: numbers become floats, empty cells None, the rest text."""
    if cell == "":
        return None
    try:
        return float(cell)
    except ValueError:
        return cell


def from_row(row: Mapping[str, str], time_column: str, sensor_column: str) -> Reading:
    """A CSV row (column -> cell) as a reading; every other column becomes a value."""
    values = {name: parse_value(cell) for name, cell in row.items()
              if name not in (time_column, sensor_column)}
    return Reading(float(row[time_column]), row[sensor_column], values)


def to_row(reading: Reading, value_columns: Sequence[str]) -> list[str]:
    """Cells for a header [time, sensor, *value_columns]."""
    return [format_value(reading.timestamp), reading.sensor,
            *(format_value(reading.values.get(name)) for name in value_columns)]


def write_csv(path: str | Path, readings: Iterable[Reading], time_column: str,
              sensor_column: str, value_columns: Sequence[str]) -> Path:
    path = Path(path)
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow([time_column, sensor_column, *value_columns])
        writer.writerows(to_row(reading, value_columns) for reading in readings)
    return path


def read_csv(path: str | Path, time_column: str, sensor_column: str) -> Iterator[Reading]:
    """Readings of a CSV file in file order, read lazily."""
    with Path(path).open(newline="") as source:
        rows = csv.DictReader(source)
        missing = [c for c in (time_column, sensor_column) if c not in (rows.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}: no column {missing[0]!r} in header {rows.fieldnames}")
        for row in rows:
            yield from_row(row, time_column, sensor_column)
