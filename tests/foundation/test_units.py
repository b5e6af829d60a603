"""Quantities with units: durations, bandwidths, sizes, ratios, rates and clock frequencies."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topologies import units


@pytest.mark.parametrize(("text", "seconds"), [
    ("20ms", 0.020),
    ("1.5s", 1.5),
    ("10m", 600.0),
    ("10min", 600.0),
    ("1h", 3600.0),
    ("1d", 86400.0),
    ("200us", 200e-6),
    ("3ns", 3e-9),
    ("1e3ms", 1.0),
    (" 20 ms ", 0.020),
    ("45", 45.0),
    ("0.25", 0.25),
    (7, 7.0),
    (2.5, 2.5),
])
def test_duration_in_seconds(text: object, seconds: float) -> None:
    assert units.duration(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize(("text", "bits_per_s"), [
    ("100Mbit", 100e6),
    ("250kbit", 250e3),
    ("1Gbit", 1e9),
    ("10MB/s", 80e6),
    ("1kbps", 1e3),
    ("20Mbps", 20e6),
    ("125B/s", 1000.0),
    (5e6, 5e6),
])
def test_bandwidth_in_bits_per_second(text: object, bits_per_s: float) -> None:
    assert units.bandwidth(text) == pytest.approx(bits_per_s, rel=1e-12)


@pytest.mark.parametrize(("text", "size"), [
    ("200B", 200),
    ("4KB", 4000),
    ("2MB", 2_000_000),
    ("1KiB", 1024),
    ("1.5KiB", 1536),
    ("1MiB", 1024**2),
    ("1GiB", 1024**3),
    ("512", 512),
    (512, 512),
])
def test_size_in_whole_bytes(text: object, size: int) -> None:
    parsed = units.size(text)
    assert parsed == size
    assert isinstance(parsed, int)


@pytest.mark.parametrize(("text", "fraction"), [
    ("0.1%", 0.001),
    ("50%", 0.5),
    ("100%", 1.0),
    (0.5, 0.5),
    ("0.5", 0.5),
    (0, 0.0),
    (1, 1.0),
])
def test_ratio_as_a_fraction(text: object, fraction: float) -> None:
    assert units.ratio(text) == pytest.approx(fraction, rel=1e-12)


@pytest.mark.parametrize("text", [1.5, "150%", "1.01", -0.1])
def test_ratio_outside_zero_to_one_is_refused(text: object) -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        units.ratio(text)


@pytest.mark.parametrize(("text", "per_second"), [
    ("5/s", 5.0),
    ("300/min", 5.0),
    ("2/h", 2 / 3600),
    ("3/ms", 3000.0),
    ("5 / s", 5.0),
    ("5", 5.0),
    (5, 5.0),
    (0, 0.0),
])
def test_rate_in_events_per_second(text: object, per_second: float) -> None:
    assert units.rate(text) == pytest.approx(per_second, rel=1e-12)


@pytest.mark.parametrize(("text", "hertz"), [
    ("1.5GHz", 1.5e9),
    ("240MHz", 240e6),
    ("800kHz", 800e3),
    ("50Hz", 50.0),
    (1e9, 1e9),
])
def test_frequency_in_hertz(text: object, hertz: float) -> None:
    assert units.frequency(text) == pytest.approx(hertz, rel=1e-12)


@pytest.mark.parametrize(("parse", "text"), [
    (units.duration, "20 parsecs"),
    (units.duration, "fast"),
    (units.duration, "20MS"),  # units are case-sensitive: M would be mega
    (units.duration, "-5s"),
    (units.duration, ""),
    (units.bandwidth, "100"),  # a bandwidth in a string needs its unit
    (units.bandwidth, "100Mfurlong"),
    (units.size, "4 bytes please"),
    (units.size, "4KG"),
    (units.ratio, "5ms"),
    (units.rate, "5/"),
    (units.rate, "5Hz"),
    (units.frequency, "1.5"),
    (units.frequency, "1.5GW"),
])
def test_bad_input_raises_value_error_naming_it(parse, text: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse(text)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize("parse", [units.duration, units.bandwidth, units.size, units.ratio,
                                   units.rate, units.frequency])
@pytest.mark.parametrize("value", [True, None, [1], {"ms": 20}])
def test_values_that_are_not_quantities_are_refused_by_every_parser(parse, value) -> None:
    with pytest.raises(ValueError) as caught:
        parse(value)
    assert repr(value) in str(caught.value)


@given(st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False))
def test_a_number_written_in_milliseconds_reads_back(value: float) -> None:
    assert units.duration(f"{value!r}ms") == pytest.approx(value * 1e-3, rel=1e-12, abs=0)


def test_microseconds_written_with_the_micro_sign() -> None:
    assert units.duration("200µs") == pytest.approx(200e-6)


@pytest.mark.parametrize("text", ["5/fortnight", "/s"])
def test_bad_rate_error_names_the_whole_input(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        units.rate(text)
    assert repr(text) in str(caught.value)


def test_rate_with_a_counted_period_is_per_that_period_or_refused() -> None:
    try:
        value = units.rate("5/10s")
    except ValueError:
        return  # refusing the form would be fine too
    assert value == pytest.approx(0.5)


def test_megabit_per_second_written_mb_s_is_not_read_as_megabytes() -> None:
    try:
        value = units.bandwidth("10Mb/s")
    except ValueError:
        return  # refusing the ambiguous form would be fine too
    assert value == pytest.approx(10e6)


@pytest.mark.parametrize("text", [math.inf, "1e400B"])
def test_infinite_size_is_a_value_error(text: object) -> None:
    # found by fuzzing: it raised OverflowError, which pydantic does not turn into an error
    with pytest.raises(ValueError):
        units.size(text)


@pytest.mark.parametrize("text", ["1Mb", "1mb", "1kb", "1Kb", "100b", "1Gb", "1Mib", "2gib",
                                  "1Mbit", "8bit", "1 Mb"])
def test_a_size_in_bits_is_refused_saying_to_write_b_for_bytes(text: str) -> None:
    # 1Mb is a million bits as a bandwidth; as a size it read as a million bytes.
    with pytest.raises(ValueError) as caught:
        units.size(text)
    said = str(caught.value)
    assert repr(text) in said and "B for bytes" in said, said


@pytest.mark.parametrize(("text", "size"), [("1kB", 1000), ("1KB", 1000), ("1MB", 10**6),
                                            ("3B", 3), ("1KiB", 1024), ("1GB", 10**9)])
def test_a_size_in_bytes_has_an_upper_case_b(text: str, size: int) -> None:
    assert units.size(text) == size


@pytest.mark.parametrize(("text", "bits_per_s"), [("1Mb", 1e6), ("1Mbit", 1e6),
                                                  ("1MB/s", 8e6), ("1kb", 1e3)])
def test_a_bandwidth_keeps_its_bits(text: str, bits_per_s: float) -> None:
    assert units.bandwidth(text) == pytest.approx(bits_per_s)


def test_a_size_in_bits_in_an_experiment_names_the_field_and_value() -> None:
    from experiments.loader import load
    from topologies.errors import SpecError

    with pytest.raises(SpecError) as caught:
        load("quickstart", overrides=["workload.streams.0.size=1Mb"])
    said = str(caught.value)
    assert caught.value.file == "--set workload.streams.0.size=1Mb"
    assert "workload.streams[0].size" in said and "'1Mb'" in said and "1MB" in said, said
