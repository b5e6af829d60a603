"""Numbers in description files read as YAML 1.2's core schema reads them: no sexagesimal
(`1:30` was 90), no octal with a bare leading zero (`010` was 8), no underscores; `0o` and
`0x` ints, floats with or without a dot (`1e3`), `.inf` and `.nan`. What is then no number is
refused where a number is expected, naming the file or option, the field and the value."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from experiments.loader import load, parse_text
from topologies.documents import dump, load_text, parse
from topologies.errors import SpecError

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(("text", "value"), [
    ("1:30", "1:30"),  # YAML 1.1: 90
    ("12:30:00", "12:30:00"),  # YAML 1.1: 45000
    ("010", 10),  # YAML 1.1: 8
    ("-010", -10),
    ("0o10", 8),  # YAML 1.1: the string
    ("0x1F", 31),
    ("0b101", "0b101"),  # YAML 1.1: 5
    ("1_000", "1_000"),  # YAML 1.1: 1000
    ("+5", 5),
    ("0", 0),
    ("7", 7),
    ("1e3", 1000.0),  # YAML 1.1: the string (its floats needed a dot)
    ("1e-3", 0.001),
    ("-2E+2", -200.0),
    ("1.5e3", 1500.0),
    ("1.0e+3", 1000.0),
    ("1.", 1.0),
    (".5", 0.5),
    ("+.5", 0.5),  # YAML 1.1: the string
    (".inf", math.inf),
    ("-.Inf", -math.inf),
    ("+.INF", math.inf),
    ("true", True),
    ("on", "on"),
    ("10ms", "10ms"),
    ("1e3ms", "1e3ms"),
])
def test_a_number_reads_as_yaml_1_2_core_reads_it(text: str, value: object) -> None:
    for parsed in (load_text(text), parse(f"key: {text}\n", "f.yaml").data["key"]):
        assert parsed == value and type(parsed) is type(value), (text, parsed)


@pytest.mark.parametrize("text", [".nan", ".NaN", ".NAN"])
def test_nan_is_a_float(text: str) -> None:
    assert math.isnan(load_text(text))


def test_what_is_no_number_stays_a_string_in_a_list_and_a_key() -> None:
    assert parse("[1:30, 010, 0o17]\n", "f.yaml").data == ["1:30", 10, 15]
    assert parse("010: a\n1:30: b\n", "f.yaml").data == {10: "a", "1:30": "b"}


def test_a_clock_time_where_a_duration_is_expected_is_refused_naming_it() -> None:
    with pytest.raises(SpecError) as caught:
        load("quickstart", overrides=["run.duration=1:30"])
    said = str(caught.value)
    assert caught.value.file == "--set run.duration=1:30"
    assert "run.duration" in said and "'1:30'" in said and "90" not in said, said


def test_a_clock_time_in_a_file_names_its_line() -> None:
    text = (ROOT / "experiments" / "quickstart.yaml").read_text()
    with pytest.raises(SpecError) as caught:
        parse_text(text.replace("duration: 10m", "duration: 1:30"), "quick.yaml")
    said = str(caught.value)
    line = duration_line(text)
    assert said.startswith(f"quick.yaml:{line}: run.duration: ") and "'1:30'" in said, said


def test_a_leading_zero_is_decimal() -> None:
    assert load("quickstart", overrides=["run.seed=010"]).spec.run.seed == 10
    assert load("quickstart", overrides=["run.seed=0o10"]).spec.run.seed == 8


def test_an_exponent_without_a_dot_is_a_float_a_field_reads() -> None:
    # 1e3 is the float 1000.0 now (a string before, which the unit parsers read as well).
    point = load("quickstart", overrides=["run.seed=1e3", "workload.streams.0.size=1e3B"])
    assert point.spec.run.seed == 1000
    assert point.spec.workload.streams[0].size == 1000


def test_a_bare_exponent_where_a_unit_is_needed_is_refused() -> None:
    with pytest.raises(SpecError, match="1000 has no unit"):
        load("quickstart", overrides=["run.duration=1e3"])


@pytest.mark.parametrize("value", ["1e5", "0o17", "010", "1:30", "+.5", "1_000", 8, 1e20,
                                   -math.inf, "true", "on", "x86_64", "12:30:00"])
def test_what_dump_writes_parse_reads_back(value: object) -> None:
    assert parse(dump({"key": value}), "f.yaml").data == {"key": value}


def duration_line(text: str) -> int:
    """The line of quickstart's run.duration, counted from 1."""
    return 1 + next(n for n, line in enumerate(text.splitlines()) if "duration: 10m" in line)
