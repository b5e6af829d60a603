"""Pydantic field types for quantities with units, shared by every experiment-file schema."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, WithJsonSchema

from topologies import units


def _quantity(parse, example: str, description: str):
    return Annotated[
        float,
        BeforeValidator(parse),
        WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}],
                        "examples": [example], "description": description}),
    ]


Duration = _quantity(units.duration, "20ms", "a duration: 20ms, 600s, 10m, 1h")
NonNegativeDuration = Annotated[Duration, Field(ge=0)]
PositiveDuration = Annotated[Duration, Field(gt=0)]
Bandwidth = Annotated[_quantity(units.bandwidth, "100Mbit",
                                "bits per second: 250kbit, 100Mbit, 1Gbit, 10MB/s"), Field(gt=0)]
Ratio = _quantity(units.ratio, "0.1%", "a fraction: 0.1% or 0.001")
Frequency = Annotated[_quantity(units.frequency, "1.5GHz", "a clock: 1.5GHz"), Field(gt=0)]
Rate = Annotated[_quantity(units.rate, "5/s", "events per second: 5/s, 300/min"), Field(ge=0)]
Size = Annotated[
    int,
    BeforeValidator(units.size),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "integer"}],
                    "examples": ["200B"], "description": "bytes: 200B, 4KB, 1MiB"}),
    Field(ge=0),
]
Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_.-]*$", max_length=64)]
