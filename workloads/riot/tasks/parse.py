"""Parse tasks: SenML to readings, CSV lines to SenML, and annotation from a static lookup."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import replace

from workloads.riot.senml import Value, decode_senml, encode_senml, from_row
from workloads.riot.specs import CITY
from workloads.riot.tasks.base import Message, Task, register, require_reading


@register
class SenMLParse(Task):
    """SenML text (RFC 8428) in, one reading per sensor and time out (RIoTBench SML)."""

    name = "senml_parse"

    def process(self, message: Message) -> list[Message]:
        if not isinstance(message, (str, bytes)):
            raise TypeError(f"task {self.name!r} takes SenML text, got {type(message).__name__}")
        return list(decode_senml(message))


@register
class CsvToSenML(Task):
    """One CSV line of a known layout in, its SenML text out (RIoTBench C2S)."""

    name = "csv_to_senml"

    def __init__(self, columns: Sequence[str] = CITY.columns,
                 time_column: str = CITY.time_column, sensor_column: str = CITY.sensor_column,
                 units: Mapping[str, str] | None = None) -> None:
        self.columns = list(columns)
        self.time_column = time_column
        self.sensor_column = sensor_column
        self.units = dict(CITY.units if units is None else units)

    def process(self, message: Message) -> list[Message]:
        line = message.decode() if isinstance(message, bytes) else message
        if not isinstance(line, str):
            raise TypeError(f"task {self.name!r} takes a CSV line, got {type(message).__name__}")
        cells = next(csv.reader([line]))
        if len(cells) != len(self.columns):
            raise ValueError(f"CSV line has {len(cells)} cells, the layout has "
                             f"{len(self.columns)} columns: {line!r}")
        row = dict(zip(self.columns, cells, strict=True))
        reading = from_row(row, self.time_column, self.sensor_column)
        return [encode_senml(reading, self.units)]


@register
class Annotate(Task):
    """Add the fields a static lookup holds for the reading's key (RIoTBench ANN).

    The key is the sensor id, or the value of `key` when given. Observed values win over
    looked-up ones of the same name; a key not in the lookup passes unchanged.
    """

    name = "annotate"

    def __init__(self, lookup: Mapping[str, Mapping[str, Value]], key: str | None = None) -> None:
        self.lookup = {str(k): dict(v) for k, v in lookup.items()}
        self.key = key

    def process(self, message: Message) -> list[Message]:
        reading = require_reading(self, message)
        key = reading.sensor if self.key is None else str(reading.values.get(self.key))
        extra = self.lookup.get(key)
        if not extra:
            return [reading]
        values = reading.values | {k: v for k, v in extra.items() if k not in reading.values}
        return [replace(reading, values=values)]
