"""SenML, CSV and JSON forms of a reading: exact encodings, RFC 8428 examples, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.riot.senml import (
    Reading,
    decode_senml,
    encode_senml,
    format_value,
    from_json,
    parse_value,
    read_csv,
    to_json,
    write_csv,
)

READING = Reading(1421280000.0, "boston-01",
                  {"temperature": 21.5, "humidity": None, "status": "ok", "door": True})


def test_encode_is_one_pack_with_base_name_and_time() -> None:
    assert encode_senml(READING, units={"temperature": "Cel"}) == (
        '[{"bn":"boston-01/","bt":1421280000.0,"n":"temperature","v":21.5,"u":"Cel"},'
        '{"n":"status","vs":"ok"},{"n":"door","vb":true}]')


def test_missing_value_is_an_absent_record_after_a_round_trip() -> None:
    assert decode_senml(encode_senml(READING)) == [
        Reading(1421280000.0, "boston-01", {"temperature": 21.5, "status": "ok", "door": True})]


def test_rfc8428_multiple_datapoints() -> None:
    pack = ('[{"bn":"urn:dev:ow:10e2073a01080063:","n":"voltage","u":"V","v":120.1},'
            '{"n":"current","u":"A","v":1.2}]')
    assert decode_senml(pack) == [
        Reading(0.0, "urn:dev:ow:10e2073a01080063", {"voltage": 120.1, "current": 1.2})]


def test_rfc8428_relative_times_and_unit_names() -> None:
    pack = ('[{"bn":"urn:dev:ow:10e2073a01080063","bt":1.320067464e+09,"bu":"%RH","v":20},'
            '{"u":"lon","v":24.30621},{"t":60,"v":20.3}]')
    sensor = "urn:dev:ow:10e2073a01080063"
    assert decode_senml(pack) == [Reading(1320067464.0, sensor, {"%RH": 20.0, "lon": 24.30621}),
                                  Reading(1320067524.0, sensor, {"%RH": 20.3})]


def test_base_value_is_added_and_names_without_base_split_at_slash() -> None:
    assert decode_senml('[{"bv":100,"n":"gw-1/temperature","v":1.5}]') == [
        Reading(0.0, "gw-1", {"temperature": 101.5})]


@pytest.mark.parametrize(("payload", "message"), [
    ("{not json", "not JSON"),
    ('{"bn":"a"}', "JSON array"),
    ("[1]", "record 0 is not a JSON object"),
    ('[{"v":1}]', "has no name"),
])
def test_malformed_packs_are_rejected(payload: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_senml(payload)


names = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=8)
values = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                   st.text(max_size=10))


@given(sensor=names, timestamp=st.floats(0, 2e9), fields=st.dictionaries(names, values,
                                                                         min_size=1, max_size=5))
def test_senml_round_trip(sensor: str, timestamp: float, fields: dict) -> None:
    reading = Reading(timestamp, sensor, fields)
    assert decode_senml(encode_senml(reading)) == [reading]


def test_json_round_trip_keeps_missing_values() -> None:
    assert from_json(to_json(READING)) == READING


@pytest.mark.parametrize(("value", "cell"), [
    (1421280000.0, "1421280000"), (21.5, "21.5"), (None, ""), ("CRD", "CRD")])
def test_csv_cells(value: float | str | None, cell: str) -> None:
    assert format_value(value) == cell
    assert parse_value(cell) == value


def test_csv_file_round_trip(tmp_path) -> None:
    readings = [Reading(10.0, "s1", {"t": 21.5, "h": None}), Reading(70.25, "s2", {"t": -3.0})]
    path = write_csv(tmp_path / "r.csv", readings, "timestamp", "source", ["t", "h"])
    assert path.read_text().splitlines() == ["timestamp,source,t,h", "10,s1,21.5,",
                                             "70.25,s2,-3,"]
    assert list(read_csv(path, "timestamp", "source")) == [
        readings[0], Reading(70.25, "s2", {"t": -3.0, "h": None})]


def test_read_csv_names_a_missing_column(tmp_path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("time,source,t\n1,s1,2\n")
    with pytest.raises(ValueError, match="no column 'timestamp'"):
        list(read_csv(path, "timestamp", "source"))
