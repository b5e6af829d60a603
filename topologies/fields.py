"""Pydantic field types for quantities with units, shared by every experiment-file schema."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, ValidationInfo, WithJsonSchema

from topologies import units

# The validation context of a description written by hand (a file, --set, --sweep): every
# quantity in it needs its unit. Without it (specs built in code, numbers in base units) a
# bare number is taken in seconds, bytes, bits per second, hertz or events per second.
WRITTEN = {"units": "required"}


def _parser(parse, what: str):
    """`parse`, refusing a bare number first where the text was written by hand."""
    def parse_written(value: object, info: ValidationInfo) -> object:
        if info.context is not None and info.context.get("units") == "required":
            value = units.require_unit(value, what)
        return parse(value)

    return parse_written


def _listed(value: object) -> object:
    return [value] if isinstance(value, str) else value


# Names or patterns, at least one, where one may be written alone (`on: gw-1` for `on: [gw-1]`);
# the JSON Schema says both forms, so that an editor takes what the loader takes.
Names = Annotated[list[str], Field(min_length=1), BeforeValidator(
    _listed, json_schema_input_type=str | Annotated[list[str], Field(min_length=1)])]

# A written quantity is a string with its unit; 0 alone is the same in every unit.
_WRITTEN_SCHEMA = [{"type": "string"}, {"const": 0}]


def _quantity(parse, what: str, example: str, description: str, kind: type = float):
    return Annotated[
        kind,
        BeforeValidator(_parser(parse, what)),
        WithJsonSchema({"anyOf": _WRITTEN_SCHEMA, "examples": [example],
                        "description": description}),
    ]


Duration = _quantity(units.duration, "a duration", "20ms", "a duration: 20ms, 600s, 10m, 1h")
NonNegativeDuration = Annotated[Duration, Field(ge=0)]
PositiveDuration = Annotated[Duration, Field(gt=0)]
Bandwidth = Annotated[_quantity(units.bandwidth, "a bandwidth", "100Mbit",
                                "bits per second: 250kbit, 100Mbit, 1Gbit, 10MB/s"), Field(gt=0)]
# A ratio has no unit: 0.001 and 0.1% are both written as meant.
Ratio = Annotated[float, BeforeValidator(units.ratio),
                  WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}],
                                  "examples": ["0.1%"],
                                  "description": "a fraction: 0.1% or 0.001"})]
# A proportion may pass 1 (a selectivity: outputs per input); written as 0.95 or 95%.
Proportion = Annotated[float, BeforeValidator(units.proportion),
                       WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}],
                                       "examples": ["95%"],
                                       "description": "a number or a percentage: 95% or 0.95"})]
Frequency = Annotated[_quantity(units.frequency, "a clock frequency", "1.5GHz",
                                "a clock: 1.5GHz"), Field(gt=0)]
Rate = Annotated[_quantity(units.rate, "a rate", "5/s", "events per second: 5/s, 300/min"),
                 Field(ge=0)]
Size = Annotated[_quantity(units.size, "a size", "200B", "bytes: 200B, 4KB, 1MiB", int),
                 Field(ge=0)]
Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_.-]*$", max_length=64)]
