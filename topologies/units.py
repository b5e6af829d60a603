"""Quantities written with units in experiment files: durations, rates, sizes, ratios, clocks."""

from __future__ import annotations

import math
import re

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_QUANTITY = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z/%]*)\s*$")

_DURATION = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9,
             "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
# Bandwidths are in bits per second; "MB/s" style units are bytes and count eight bits each.
_BANDWIDTH = {"": 1.0, "bit": 1.0, "bps": 1.0, "kbit": 1e3, "kbps": 1e3, "mbit": 1e6, "mbps": 1e6,
              "gbit": 1e9, "gbps": 1e9, "b/s": 8.0, "kb/s": 8e3, "mb/s": 8e6, "gb/s": 8e9}
_SIZE = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3,
         "kib": 1024, "mib": 1024**2, "gib": 1024**3}
_FREQUENCY = {"": 1.0, "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}


def _split(text: object, what: str, example: str) -> tuple[float, str]:
    if isinstance(text, bool) or not isinstance(text, int | float | str):
        raise ValueError(f"expected {what} such as {example}, got {text!r}")
    if isinstance(text, str):
        match = _QUANTITY.match(text)
        if not match:
            raise ValueError(f"expected {what} such as {example}, got {text!r}")
        value, unit = float(match.group(1)), match.group(2)
    else:
        value, unit = float(text), ""
    if not math.isfinite(value):
        raise ValueError(f"expected a finite {what.removeprefix('a ')}, got {text!r}")
    return value, unit


def _scaled(text: object, table: dict, what: str, example: str, lower: bool = True) -> float:
    value, unit = _split(text, what, example)
    key = unit.lower() if lower else unit
    if key not in table:
        units = ", ".join(sorted(k for k in table if k))
        raise ValueError(f"unknown unit {unit!r} in {text!r}: {what} takes {units}")
    scaled = value * table[key]
    if not math.isfinite(scaled):
        raise ValueError(f"{text!r} is too large for {what}")
    return scaled


def duration(text: object) -> float:
    """Seconds from `600s`, `20ms`, `10m`, `1h` or a bare number of seconds."""
    return _scaled(text, _DURATION, "a duration", "20ms, 600s or 1h", lower=False)


def bandwidth(text: object) -> float:
    """Bits per second from `100Mbit`, `250kbit`, `1Gbit`, `10MB/s`, or a number of bits/s."""
    _, unit = _split(text, "a bandwidth", "100Mbit or 10MB/s")
    if not unit and isinstance(text, str):
        raise ValueError(f"a bandwidth needs a unit such as Mbit or MB/s, got {text!r}")
    return _scaled(text, _BANDWIDTH, "a bandwidth", "100Mbit or 10MB/s")


def size(text: object) -> int:
    """Bytes from `200B`, `1KB`, `4MiB` or a bare number of bytes."""
    return int(round(_scaled(text, _SIZE, "a size", "200B, 4KB or 1GiB")))


def ratio(text: object) -> float:
    """A fraction in [0, 1] from `0.1%` or `0.001`."""
    value, unit = _split(text, "a ratio", "0.1% or 0.001")
    if unit == "%":
        value /= 100.0
    elif unit:
        raise ValueError(f"a ratio is a fraction or a percentage such as 0.1%, got {text!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"a ratio must lie between 0 and 1 (0% and 100%), got {text!r}")
    return value


def frequency(text: object) -> float:
    """Hertz from `1.5GHz`, `240MHz`, or a number of hertz."""
    _, unit = _split(text, "a clock frequency", "1.5GHz")
    if not unit and isinstance(text, str):
        raise ValueError(f"a clock frequency needs a unit such as GHz, got {text!r}")
    return _scaled(text, _FREQUENCY, "a clock frequency", "1.5GHz")


def rate(text: object) -> float:
    """Events per second from `5/s`, `300/min`, `2/h` or a bare number per second."""
    if isinstance(text, str) and "/" in text:
        count, _, per = text.partition("/")
        value, unit = _split(count, "a rate", "5/s or 300/min")
        if unit:
            raise ValueError(f"expected a rate such as 5/s or 300/min, got {text!r}")
        period = duration("1" + per.strip()) if per.strip() else 0.0
        if period <= 0:
            raise ValueError(f"expected a rate such as 5/s or 300/min, got {text!r}")
        return value / period
    value, unit = _split(text, "a rate", "5/s or 300/min")
    if unit:
        raise ValueError(f"expected a rate such as 5/s or 300/min, got {text!r}")
    return value
