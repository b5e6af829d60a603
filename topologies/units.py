"""Quantities written with units in experiment files: durations, rates, sizes, ratios, clocks."""

from __future__ import annotations

import math
import re

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_QUANTITY = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-zµ/%]*)\s*$")
# A number and the unit after it, whatever the unit (a rate's `/min` or `/10s` included).
_QUANTITY_TEXT = re.compile(rf"^\s*{_NUMBER}\s*([^\s\d.eE].*?)\s*$")

_DURATION = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9,
             "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
# Bandwidths are in bits per second; "MB/s" style units are bytes and count eight bits each.
# Sizes are in bytes, with an upper-case B (a lower-case b is a bit, as a bandwidth reads it:
# `_bits` refuses it); the prefix in either case (kB or KB).
_SIZE = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3,
         "kib": 1024, "mib": 1024**2, "gib": 1024**3}
_BITS = re.compile(r"^([kKmMgG]i?)?(b|bits?)$")
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


# Two units each quantity takes, for an error that shows how to write the number given.
_SUGGESTED = {"a duration": ("ms", "s"), "a rate": ("/s", "/min"), "a size": ("B", "KB"),
              "a bandwidth": ("Mbit", "MB/s"), "a clock frequency": ("MHz", "GHz")}


def require_unit(text: object, what: str) -> object:
    """`text` as given, unless it is a number written without a unit (`10`, `"10"`), which
    is refused: a bare number is ambiguous (10 s or 10 ms?). Zero passes, being zero in every
    unit. `what` is a key of _SUGGESTED: "a duration", "a rate", "a size", ..."""
    if isinstance(text, bool) or not isinstance(text, int | float | str):
        return text  # the parser says what it expected
    if isinstance(text, str):
        match = _QUANTITY.match(text)
        if not match or match.group(2):
            return text
        number = match.group(1)
    else:
        number = f"{text:g}" if isinstance(text, float) else str(text)
    if float(number) == 0:
        return text
    first, second = _SUGGESTED[what]
    raise ValueError(f"{number} has no unit; write {number}{first} or {number}{second}")


def written_like(written: object, parsed: float, limit: float) -> str | None:
    """`limit` (in the base unit, as `parsed`, which is `written` parsed) in the unit of
    `written`: a limit of 2592000 s for `40d` reads `30d`. None where `written` has no unit."""
    match = _QUANTITY_TEXT.match(written) if isinstance(written, str) else None
    if not match or not parsed or float(match.group(1)) == 0:
        return None
    value = limit / (parsed / float(match.group(1)))
    return f"{round(value, 6):g}{match.group(2)}"


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
    """Bits per second from `100Mbit`, `250kbit`, `10Mb/s`, `1Gbps`; bytes from `10MB/s`.

    As networking writes them: a lower-case b is a bit, an upper-case B a byte.
    """
    value, unit = _split(text, "a bandwidth", "100Mbit or 10MB/s")
    if not unit:
        if isinstance(text, str):
            raise ValueError(f"a bandwidth needs a unit such as Mbit or MB/s, got {text!r}")
        return value
    bytes_ = unit.endswith("B/s")
    stem = unit[:-3] if bytes_ else unit.removesuffix("/s")
    for suffix in ("bit", "bps", "b"):
        if not bytes_ and stem.lower().endswith(suffix) and (suffix != "b" or stem[-1] == "b"):
            stem = stem[:-len(suffix)]
            break
    else:
        if not bytes_:
            raise ValueError(f"unknown unit {unit!r} in {text!r}: a bandwidth takes bit, kbit, "
                             "Mbit, Gbit, Mb/s, Mbps or bytes as kB/s, MB/s, GB/s")
    prefix = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}.get(stem.lower())
    if prefix is None:
        raise ValueError(f"unknown unit {unit!r} in {text!r}: a bandwidth takes bit, kbit, "
                         "Mbit, Gbit, Mb/s, Mbps or bytes as kB/s, MB/s, GB/s")
    scaled = value * prefix * (8.0 if bytes_ else 1.0)
    if not math.isfinite(scaled):
        raise ValueError(f"{text!r} is too large for a bandwidth")
    return scaled


def size(text: object) -> int:
    """Bytes from `200B`, `1KB`, `4MiB` or a bare number of bytes; bits (`1Mb`, `8bit`: a
    lower-case b, as a bandwidth writes them) are refused."""
    _bits(text)
    return int(round(_scaled(text, _SIZE, "a size", "200B, 4KB or 1GiB")))


def _bits(text: object) -> None:
    """Refuse a size written in bits: `1Mb` is a million bits as a bandwidth, and read as a
    size it would silently have been a million bytes."""
    match = _QUANTITY.match(text) if isinstance(text, str) else None
    bits = _BITS.match(match.group(2)) if match else None
    if bits is None:
        return
    prefix = bits.group(1) or ""
    prefix = prefix[:1].upper() + prefix[1:] if prefix[:1] in "mMgG" else prefix
    number, eighth = match.group(1), f"{float(match.group(1)) / 8:g}{prefix}B"
    if bits.group(2) != "b":  # `bit` said so: the bytes it is
        raise ValueError(f"{text!r} is in bits; a size is in bytes: write B for bytes, "
                         f"{eighth}")
    raise ValueError(f"{text!r} is in bits (a lower-case b); a size is in bytes: write B for "
                     f"bytes, {number}{prefix}B ({eighth} if you meant bits)")


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


def proportion(text: object) -> float:
    """A non-negative multiple from `0.95` or `95%` (`150%` is 1.5): a ratio that may pass 1,
    such as a selectivity (outputs per input)."""
    value, unit = _split(text, "a proportion", "95% or 0.95")
    if unit == "%":
        value /= 100.0
    elif unit:
        raise ValueError(f"a proportion is a number or a percentage such as 95%, got {text!r}")
    return value


def frequency(text: object) -> float:
    """Hertz from `1.5GHz`, `240MHz`, or a number of hertz."""
    _, unit = _split(text, "a clock frequency", "1.5GHz")
    if not unit and isinstance(text, str):
        raise ValueError(f"a clock frequency needs a unit such as GHz, got {text!r}")
    return _scaled(text, _FREQUENCY, "a clock frequency", "1.5GHz")


def rate(text: object) -> float:
    """Events per second from `5/s`, `300/min`, `1/10s`, `2/h` or a bare number per second."""
    if isinstance(text, str) and "/" in text:
        count, _, per = text.partition("/")
        try:
            value, unit = _split(count, "a rate", "5/s or 300/min")
            # A period without a number is one of its unit: `/min` is `/1min`.
            per = per.strip()
            if not per:
                raise ValueError("no period")
            period = duration(per if per[:1].isdigit() else "1" + per)
        except ValueError:
            raise ValueError(f"expected a rate such as 5/s, 300/min or 1/10s, got {text!r}")\
                from None
        if unit or period <= 0:
            raise ValueError(f"expected a rate such as 5/s, 300/min or 1/10s, got {text!r}")
        return value / period
    value, unit = _split(text, "a rate", "5/s or 300/min")
    if unit:
        raise ValueError(f"expected a rate such as 5/s or 300/min, got {text!r}")
    return value


# The units a quantity is read into (topologies.fields.Unit) and the prefixes it is shown
# with again, largest first: each a factor and the text after the number.
_SHOWN = {
    "s": ((86400.0, "d"), (3600.0, "h"), (60.0, "min"), (1.0, "s"), (1e-3, "ms"), (1e-6, "us"),
          (1e-9, "ns")),
    "bit/s": ((1e9, "Gbit"), (1e6, "Mbit"), (1e3, "kbit"), (1.0, "bit")),
    "B": ((1000.0**3, "GB"), (1000.0**2, "MB"), (1000.0, "KB"), (1.0, "B")),
    "Hz": ((1e9, "GHz"), (1e6, "MHz"), (1e3, "kHz"), (1.0, "Hz")),
    "1/s": ((1.0, "/s"),),
}
UNITS = tuple(_SHOWN)


def shown(value: object, unit: str | None) -> str:
    """A number in base units (seconds, bits/s, bytes, hertz, per second) as a file writes
    it: the largest prefix it is a whole number (under 1000) of, else at least one of
    (`20000000.0` bit/s: `20Mbit`, `0.0002` s: `200us`, `90` s: `90s`, `0.0125` s: `12.5ms`,
    `200000` B: `200KB`); anything else (no unit, not a number, 0) as it is."""
    if (unit not in _SHOWN or isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value == 0):
        return str(value)
    fitting = [(f, s) for f, s in _SHOWN[unit] if abs(value) >= f] or [_SHOWN[unit][-1]]
    # The largest prefix the value is a whole number under a thousand of (90 s is `90s`, not
    # `1.5min`), else the largest it is at least one of (`12.5ms`, `1.5GHz`).
    factor, suffix = next(((f, s) for f, s in fitting if abs(value / f) < 1000
                           and math.isclose(value / f, round(value / f), rel_tol=1e-9)),
                          fitting[0])
    return f"{round(value / factor, 6):g}{suffix}"


def shown_duration(seconds: float) -> str:
    """A wall time as a person reads it (a time left, an estimate): 45s, 3m 05s, 2h 10m, and
    beyond two days 2.5 days."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86400 * 2:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds / 86400:.1f} days"
