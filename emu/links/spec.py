"""The shape of one emulated link: delay, jitter, bandwidth and loss, validated; and the shape
a shaper installs on the host at a time dilation K (`LinkShape.dilated`, `check_dilation`)."""

import math
from dataclasses import dataclass


def _check(field: str, value: object, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"LinkShape.{field} must be {expected}, got {value!r}")


def _is_number(value: object) -> bool:
    # bool is an int to Python but never a meaningful delay or rate
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_dilation(k: object, where: str = "dilation") -> float:
    """K as a float, or a ValueError naming `where`: a finite number of at least 1 (emulated
    time runs K times slower than the host's; K < 1 would ask the host to run faster)."""
    if not (_is_number(k) and k >= 1):
        raise ValueError(f"{where} must be a finite number >= 1, got {k!r}")
    return float(k)


def host_rate(bandwidth_bps: float | None, k: float) -> float | None:
    """The host's rate for an emulated bandwidth at dilation K: B/K, so that what B carries in
    one emulated second takes K host seconds (None, unlimited, stays unlimited)."""
    return bandwidth_bps if bandwidth_bps is None or k == 1 else bandwidth_bps / k


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

    def dilated(self, k: float) -> "LinkShape":
        """The shape to install on the host at dilation K, for this emulated shape.

        A delay d lasts K*d host seconds and so does a jitter; a bandwidth B carries B/K per
        host second; the loss probability stays (a packet is as likely to be lost whatever the
        clock); buffers, sized in bytes, stay too. The relay also holds a lost chunk back K
        times its retransmission timeout (emu.links.relay). At K = 1 the shape itself, no copy.
        """
        k = check_dilation(k)
        if k == 1:
            return self
        return LinkShape(self.latency_s * k, self.jitter_s * k, host_rate(self.bandwidth_bps, k),
                         self.loss)
