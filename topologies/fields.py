"""Pydantic field types for quantities with units, shared by every experiment-file schema."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Annotated, Union

from pydantic import BaseModel, BeforeValidator, Field, ValidationInfo, WithJsonSchema

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


@dataclass(frozen=True)
class Unit:
    """A quantity field's unit, the one its number is in once read (topologies.units.UNITS):
    what a value of it is shown in again (`unit_of`, units.shown)."""

    name: str


def _quantity(parse, what: str, example: str, description: str, unit: str,
              kind: type = float):
    return Annotated[
        kind,
        BeforeValidator(_parser(parse, what)),
        WithJsonSchema({"anyOf": _WRITTEN_SCHEMA, "examples": [example],
                        "description": description}),
        Unit(unit),
    ]


Duration = _quantity(units.duration, "a duration", "20ms", "a duration: 20ms, 600s, 10m, 1h",
                     "s")
NonNegativeDuration = Annotated[Duration, Field(ge=0)]
PositiveDuration = Annotated[Duration, Field(gt=0)]
Bandwidth = Annotated[_quantity(units.bandwidth, "a bandwidth", "100Mbit",
                                "bits per second: 250kbit, 100Mbit, 1Gbit, 10MB/s", "bit/s"),
                      Field(gt=0)]
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
                                "a clock: 1.5GHz", "Hz"), Field(gt=0)]
Rate = Annotated[_quantity(units.rate, "a rate", "5/s", "events per second: 5/s, 300/min",
                           "1/s"), Field(ge=0)]
Size = Annotated[_quantity(units.size, "a size", "200B", "bytes: 200B, 4KB, 1MiB", "B", int),
                 Field(ge=0)]
Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_.-]*$", max_length=64)]


def unit_of(model: type[BaseModel], key: str) -> str | None:
    """The unit of the quantity at `key` (a dotted path as --set names it: `run.duration`,
    `topology.links.1.bandwidth`, `pipeline.0.cost`) of `model`'s fields, or None where the
    path is no quantity (a count, a name) or no field: so that a value read back in base
    units can be shown as a user writes it (topologies.units.shown)."""
    found = [model]
    for part in key.split("."):
        found = [child for annotation in found for child in _children(annotation, part)]
        if not found:
            return None
    named = {unit for annotation in found for unit in _units(annotation)}
    return named.pop() if len(named) == 1 else None


def _options(annotation) -> list:
    """An annotation's types: a union's members, an Annotated's type with its extras kept."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return [option for member in typing.get_args(annotation) for option in _options(member)]
    if origin is Annotated:  # a union under a discriminator: its members
        inner = typing.get_args(annotation)[0]
        if typing.get_origin(inner) in (Union, types.UnionType, Annotated):
            return _options(inner) if not _extras_units(annotation) else [annotation]
    return [annotation]


def _extras_units(annotation) -> list[str]:
    return [e.name for e in typing.get_args(annotation)[1:] if isinstance(e, Unit)]


def _children(annotation, part: str) -> list:
    """The annotations `part` can name inside `annotation`: a model's field (by name or
    alias, with its metadata), a list's or tuple's item (by index or an item's name), a
    mapping's value."""
    children = []
    for option in _options(annotation):
        bare = typing.get_args(option)[0] if typing.get_origin(option) is Annotated else option
        origin = typing.get_origin(bare)
        if isinstance(bare, type) and issubclass(bare, BaseModel):
            field = next((f for name, f in bare.model_fields.items()
                          if part in (name, f.alias)), None)
            if field is not None:
                children.append(Annotated[(field.annotation, *field.metadata)]
                                if field.metadata else field.annotation)
        elif origin in (list, tuple) and typing.get_args(bare):
            children.extend(a for a in typing.get_args(bare) if a is not Ellipsis)
        elif origin is dict and len(typing.get_args(bare)) == 2:
            children.append(typing.get_args(bare)[1])
    return children


def _units(annotation) -> list[str]:
    """The Unit marks an annotation's options carry (nested Annotated included)."""
    found = []
    for option in _options(annotation):
        if typing.get_origin(option) is Annotated:
            found += _extras_units(option) + _units(typing.get_args(option)[0])
    return found
