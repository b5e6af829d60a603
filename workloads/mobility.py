"""The schema of a mobility scenario: how users move, their radio links, when they hand over.

Part of the experiment description (experiments.spec), so it lives beside the workload and
scenario schemas and imports nothing of the simulator; sim.mobility builds the processes from it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from topologies.fields import Bandwidth, Names, NonNegativeDuration, PositiveDuration, Ratio

Metres = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveMetres = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Speed = Annotated[float, Field(gt=0, allow_inf_nan=False, description="metres per second")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _InArea(_Strict):
    """A model whose users roam a rectangle and draw each leg's speed from a range."""

    area: tuple[PositiveMetres, PositiveMetres] | None = Field(
        default=None, description="[width, height] in metres from (0, 0); null: the gateways' "
                                  "bounding box grown by `margin`")
    margin: Metres = Field(default=100.0, description="metres around the gateways (area: null)")
    # A range reaching down to 0 m/s would let the average speed decay towards zero over a run:
    # slow legs last longest (Yoon, Liu and Noble, "Random waypoint considered harmful", 2003).
    speed: tuple[Speed, Speed] = Field(default=(0.5, 1.5), description="[min, max] m/s, min > 0")

    @field_validator("speed")
    @classmethod
    def _ordered_speed(cls, speed: tuple[float, float]) -> tuple[float, float]:
        if speed[0] > speed[1]:
            raise ValueError(f"speed is [min, max] with min <= max, got {list(speed)}")
        return speed


class RandomWaypointSpec(_InArea):
    """Each user walks straight to a random point at a random speed, pauses, and repeats."""

    kind: Literal["random_waypoint"] = "random_waypoint"
    pause: tuple[NonNegativeDuration, NonNegativeDuration] = Field(
        default=(0.0, 30.0), description="[min, max] pause at each waypoint")

    @field_validator("pause")
    @classmethod
    def _ordered_pause(cls, pause: tuple[float, float]) -> tuple[float, float]:
        if pause[0] > pause[1]:
            raise ValueError(f"pause is [min, max] with min <= max, got {list(pause)}")
        return pause


class ManhattanSpec(_InArea):
    """Users walk along the streets of a square grid, maybe turning at each intersection."""

    kind: Literal["manhattan"]
    block: PositiveMetres = Field(
        default=100.0, description="metres between parallel streets")
    turn: Ratio = Field(default=0.5, description="probability to turn (left or right, equally "
                                                 "likely) at an intersection")


class TraceSpec(_Strict):
    """Users replay recorded positions: CSV `time,user,x,y` in seconds and metres, or GPX."""

    kind: Literal["trace"]
    path: Path

    @field_validator("path")
    @classmethod
    def _known_format(cls, path: Path) -> Path:
        if path.suffix.lower() not in (".csv", ".gpx"):
            raise ValueError(f"a trace is a .csv or .gpx file, got {str(path)!r}")
        return path


MovementSpec = Annotated[RandomWaypointSpec | ManhattanSpec | TraceSpec,
                         Field(discriminator="kind")]


class RadioSpec(_Strict):
    """An access link's quality as a function of the distance to its gateway.

    Latency, bandwidth and loss move from their value at 0 m to their value at `range` along a
    fraction f of the way: `linear` takes f = d / range; `log_distance` takes
    f = log(1 + d / 1 m) / log(1 + range / 1 m), the shape of the received power in dB under
    log-distance path loss (the path-loss exponent cancels out once both ends are fixed), so most
    of the change happens close to the gateway. Loss is 0 at 0 m.
    """

    range: PositiveMetres = Field(
        default=150.0, description="metres; beyond it there is no link")
    latency: tuple[NonNegativeDuration, NonNegativeDuration] = Field(
        default=(0.002, 0.020), description="[at 0 m, at range]")
    bandwidth: tuple[Bandwidth, Bandwidth] = Field(
        default=(54e6, 1e6), description="[at 0 m, at range]")
    loss: Ratio = Field(default=0.05, description="at range")
    model: Literal["linear", "log_distance"] = "linear"

    @model_validator(mode="after")
    def _worse_with_distance(self) -> RadioSpec:
        if self.latency[0] > self.latency[1]:
            raise ValueError(f"latency at 0 m must not exceed latency at range, "
                             f"got {list(self.latency)}")
        if self.bandwidth[0] < self.bandwidth[1]:
            raise ValueError(f"bandwidth at 0 m must not be below bandwidth at range, "
                             f"got {list(self.bandwidth)}")
        return self


class HandoverSpec(_Strict):
    """When a user leaves its gateway for the nearest one."""

    hysteresis: Metres = Field(default=10.0, description="switch only to a gateway closer than "
                                                         "the current one by this many metres")
    min_dwell: NonNegativeDuration = Field(default=5.0, description="least time on a gateway "
                                                                    "before a voluntary switch")


class MobilitySpec(_Strict):
    """Which devices are carried by moving users, how they move, and how often they are updated."""

    model: MovementSpec = Field(default_factory=RandomWaypointSpec)
    devices: Names | None = Field(
        default=None, min_length=1,
        description="device names or patterns (phone-*) that move; null: every device node")
    update: PositiveDuration = Field(default=1.0, description="simulated time between updates")
    record: PositiveDuration | None = Field(
        default=None, description="how often positions are recorded; null: never")
    radio: RadioSpec = Field(default_factory=RadioSpec)
    handover: HandoverSpec = Field(default_factory=HandoverSpec)

    @field_validator("model", mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        # `model: manhattan` is short for a model with every default.
        return {"kind": value} if isinstance(value, str) else value



def check(spec, topology) -> None:
    """`scenario.mobility`: moving devices that are devices, gateways to attach to, updates
    inside the run, and follow operators only with it (reading exclusive channels)."""
    from topologies.errors import SpecError
    from workloads.pipeline import topic_filter
    from workloads.topics import matches

    mobility = spec.scenario.mobility
    if mobility is not None:
        for j, pattern in enumerate(mobility.devices or []):
            found = topology.match(pattern)
            if not found or any(topology.nodes[n].kind != "device" for n in found):
                raise SpecError(("scenario", "mobility", "devices", j), pattern,
                                "device names or patterns that match only devices")
        if not topology.of_kind("gateway"):
            raise SpecError(("scenario", "mobility"), "no gateways",
                            "a topology with gateways for the users to attach to")
        if isinstance(mobility.model, TraceSpec) and not mobility.model.path.is_file():
            # Written in the file, it was resolved there (experiments.loader); this one came
            # from the command line, relative to where the command runs.
            raise SpecError(("scenario", "mobility", "model", "path"), str(mobility.model.path),
                            f"an existing trace file (resolved: "
                            f"{str(mobility.model.path.resolve())!r})")
        if "update" in mobility.model_fields_set and mobility.update >= spec.run.duration:
            raise SpecError(("scenario", "mobility", "update"), mobility.update,
                            f"a period shorter than the run (run.duration: "
                            f"{spec.run.duration:g} s): nobody would move")
    for i, op in enumerate(spec.pipeline):
        if not op.follow:
            continue
        if mobility is None:
            raise SpecError(("pipeline", i, "follow"), op.follow,
                            "a scenario with mobility: a follow operator follows moving users")
        for stream in spec.workload.streams:
            if any(matches(topic_filter(r), f"{stream.name}/x/y") for r in op.reads) and (
                    stream.channel != "exclusive"):
                raise SpecError(("pipeline", i, "reads"), stream.name,
                                "streams on exclusive channels (one topic per device), so a "
                                "user's instance can read its user's messages")
