"""The shape of one emulated link: delay, jitter, bandwidth and loss, validated."""

import math
from dataclasses import dataclass


def _check(field: str, value: object, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"LinkShape.{field} must be {expected}, got {value!r}")


def _is_number(value: object) -> bool:
    # bool is an int to Python but never a meaningful delay or rate
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class LinkShape:
    """One direction of a link: every direction of a shaped link gets the same shape.

    latency_s: one-way delay in seconds; jitter_s: standard deviation of the delay in seconds;
    bandwidth_bps: bits per second, None for unlimited; loss: probability (0..1) that a
    packet is lost.
    """

    latency_s: float
    jitter_s: float = 0
    bandwidth_bps: float | None = None
    loss: float = 0

    def __post_init__(self) -> None:
        for field in ("latency_s", "jitter_s"):
            value = getattr(self, field)
            _check(field, value, _is_number(value) and value >= 0, "a finite number >= 0")
        bandwidth = self.bandwidth_bps
        _check(
            "bandwidth_bps",
            bandwidth,
            bandwidth is None or (_is_number(bandwidth) and bandwidth > 0),
            "None or a finite number > 0",
        )
        _check("loss", self.loss, _is_number(self.loss) and 0 <= self.loss <= 1, "between 0 and 1")
