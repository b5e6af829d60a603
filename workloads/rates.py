"""Rate shapes of IoT streams (RIoTBench: constant, bursty, saw-tooth, diurnal, bimodal)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from topologies.fields import NonNegativeDuration, PositiveDuration
from workloads import shapes


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def factor(self, t: float) -> float:
        """The rate at time t as a multiple of the stream's base rate."""
        raise NotImplementedError

    @property
    def peak(self) -> float:
        """The largest factor the shape reaches; thinning draws candidates at this rate."""
        raise NotImplementedError


class Constant(_Shape):
    kind: Literal["constant"] = "constant"

    def factor(self, t: float) -> float:
        return 1.0

    @property
    def peak(self) -> float:
        return 1.0


class Bursty(_Shape):
    """Bursts of `high` times the base rate for `on`, then `low` times it for `off`."""

    kind: Literal["bursty"]
    on: PositiveDuration = 10.0
    off: PositiveDuration = 50.0
    high: float = Field(default=5.0, ge=0)
    low: float = Field(default=0.2, ge=0)

    def factor(self, t: float) -> float:
        return shapes.bursty(t, self.on, self.off, self.high, self.low)

    @property
    def peak(self) -> float:
        return max(self.high, self.low)


class Sawtooth(_Shape):
    """A ramp from `low` to `high` times the base rate over each period, then a drop."""

    kind: Literal["sawtooth"]
    period: PositiveDuration = 60.0
    low: float = Field(default=0.2, ge=0)
    high: float = Field(default=1.8, ge=0)

    def factor(self, t: float) -> float:
        return shapes.sawtooth(t, self.period, self.low, self.high)

    @property
    def peak(self) -> float:
        return max(self.high, self.low)


class Diurnal(_Shape):
    """Daily peaks (one: businesses; two: traffic) on a floor, as Gaussian bumps in time of day.

    `day` may be shortened so that a simulated hour shows a whole day's pattern.
    """

    kind: Literal["diurnal"]
    day: PositiveDuration = 86400.0
    peaks: list[NonNegativeDuration] = Field(default_factory=lambda: [14 * 3600.0], min_length=1,
                                             max_length=24)
    width: PositiveDuration = 2 * 3600.0
    floor: float = Field(default=0.2, ge=0)
    height: float = Field(default=1.8, ge=0)
    scale_with_day: bool = Field(
        default=True, description="peaks and width are given for a 24 h day and shrink with `day`")

    @model_validator(mode="after")
    def _peaks_within_day(self) -> Diurnal:
        limit = 86400.0 if self.scale_with_day else self.day
        for peak in self.peaks:
            if peak > limit:
                raise ValueError(f"a peak at {peak:g} s lies beyond the day of {limit:g} s")
        return self

    def factor(self, t: float) -> float:
        return shapes.diurnal(t, self.day, self.peaks, self.width, self.floor, self.height,
                              self.scale_with_day)

    @property
    def peak(self) -> float:
        return self.floor + self.height


def shape_shorthand(value: object) -> object:
    """Accept `shape: bursty` for `shape: {kind: bursty}`, and `bimodal` for a two-peak day."""
    if isinstance(value, str):
        value = {"kind": value}
    if isinstance(value, dict) and value.get("kind") == "bimodal":
        # Written as a file would write them: a file's peaks need their units.
        value = {**value, "kind": "diurnal", "peaks": value.get("peaks", ["8h", "18h"])}
    return value


Shape = Annotated[Constant | Bursty | Sawtooth | Diurnal, Field(discriminator="kind")]
