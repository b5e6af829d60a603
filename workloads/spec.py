"""The schema of a workload file: the streams IoT devices emit, their rates, sizes and QoS."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from topologies.fields import Name, Names, NonNegativeDuration, PositiveDuration, Rate, Size
from workloads.rates import Constant, Shape, shape_shorthand


class StreamSpec(BaseModel):
    """One stream: every device matching `sources` emits it at `rate`, shaped over time."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    sources: Names = Field(min_length=1, description="device names or patterns (sensor-*)")
    rate: Rate = Field(description="messages per second per source at shape factor 1")
    arrivals: Literal["periodic", "poisson"] = "poisson"
    shape: Shape = Field(default_factory=Constant)
    size: Size = 200
    format: Literal["senml", "json", "csv"] = "senml"
    qos: Literal[0, 1] = 0
    retry: PositiveDuration = Field(default=1.0, description="QoS 1 redelivery timeout")
    # Seed 001, 3.3: shared channels map to one topic per gateway, exclusive ones to one
    # topic per driver instance (here: per device).
    channel: Literal["shared", "exclusive"] = "shared"
    start: NonNegativeDuration = Field(default=0.0, description="time before the first message")

    def topic(self, device: str, gateway: str | None) -> str:
        """The MQTT topic a device's messages go out on: per gateway on a shared channel, per
        device on an exclusive one (or when the device publishes without a gateway)."""
        if gateway is None:
            return f"{self.name}/{device}"
        if self.channel == "shared":
            return f"{self.name}/{gateway}"
        return f"{self.name}/{gateway}/{device}"

    @field_validator("shape", mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        return shape_shorthand(value)


class WorkloadSpec(BaseModel):
    """A workload file as written."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    description: str = ""
    streams: list[StreamSpec] = Field(min_length=1)

    @field_validator("streams")
    @classmethod
    def _unique_names(cls, streams: list[StreamSpec]) -> list[StreamSpec]:
        seen: set[str] = set()
        for stream in streams:
            if stream.name in seen:
                raise ValueError(f"stream names must be unique; {stream.name} appears twice")
            seen.add(stream.name)
        return streams
