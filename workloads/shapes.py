"""Rate shapes as plain functions of their fields: a stream's rate at time t as a multiple of
its base rate, and the largest multiple a shape reaches.

`workloads.rates` validates shapes (pydantic) and its models compute with these; the gateway
agent, which has the standard library only, computes with them from a shape's fields as a
dict (`Shape.model_dump()`), so a shaped stream emits the same rate on `sim` and on `emu`.
Both schedule a shaped stream's emissions with `next_emission`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence


def bursty(t: float, on: float, off: float, high: float, low: float) -> float:
    """`high` for `on` seconds, then `low` for `off` seconds."""
    return high if t % (on + off) < on else low


def sawtooth(t: float, period: float, low: float, high: float) -> float:
    """A ramp from `low` to `high` over each period, then a drop."""
    return low + (high - low) * ((t % period) / period)


def diurnal(t: float, day: float, peaks: Sequence[float], width: float, floor: float,
            height: float, scale_with_day: bool) -> float:
    """Gaussian bumps of `height` on a `floor` around each peak time of day; with
    `scale_with_day`, peaks and width are given for a 24 h day and shrink with `day`."""
    scale = day / 86400.0 if scale_with_day else 1.0
    width *= scale
    phase = t % day
    bump = 0.0
    for peak in peaks:
        # Distance on the circle of the day, so a peak at 23:00 also lifts 01:00.
        d = abs(phase - peak * scale)
        d = min(d, day - d)
        bump = max(bump, math.exp(-0.5 * (d / width) ** 2))
    return floor + height * bump


def factor(shape: Mapping, t: float) -> float:
    """The factor at time t of a shape given as its fields (with `kind`)."""
    kind = shape.get("kind", "constant")
    if kind == "constant":
        return 1.0
    if kind == "bursty":
        return bursty(t, shape["on"], shape["off"], shape["high"], shape["low"])
    if kind == "sawtooth":
        return sawtooth(t, shape["period"], shape["low"], shape["high"])
    if kind == "diurnal":
        return diurnal(t, shape["day"], shape["peaks"], shape["width"], shape["floor"],
                       shape["height"], shape["scale_with_day"])
    raise ValueError(f"unknown rate shape kind {kind!r}")


def peak(shape: Mapping) -> float:
    """The largest factor a shape given as its fields reaches."""
    kind = shape.get("kind", "constant")
    if kind == "constant":
        return 1.0
    if kind in ("bursty", "sawtooth"):
        return max(shape["high"], shape["low"])
    if kind == "diurnal":
        return shape["floor"] + shape["height"]
    raise ValueError(f"unknown rate shape kind {kind!r}")


def next_emission(rng: random.Random, t: float, rate: float, peak_rate: float,
                  factor: Callable[[float], float], poisson: bool, first: bool = False,
                  end: float = math.inf) -> float:
    """A shaped stream's emission after one at time t, or with `first` its first at or after
    t, before `end` (else a time at or past it). `rate` is the base rate, `factor` the shape's
    factor at a time and `peak_rate` (> 0) the base rate times the shape's peak.

    A periodic stream waits the interval of its current rate and skips instants of rate zero;
    a Poisson one draws candidates at the peak rate and keeps each with probability
    rate(t) / peak (thinning).
    """
    if poisson:
        if not first:
            t += rng.expovariate(peak_rate)
        while t < end and rng.random() * peak_rate > rate * factor(t):
            t += rng.expovariate(peak_rate)
        return t
    if not first:
        current = rate * factor(t)
        t += 1.0 / current if current > 0 else 1.0 / peak_rate
    while t < end and factor(t) <= 0:
        t += 1.0 / peak_rate
    return t
