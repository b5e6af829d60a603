"""SenML parsing in Spark SQL agrees with decode_senml; the session has foglab's settings."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pyspark.sql import SparkSession

from workloads.riot.datasets import CITY
from workloads.riot.senml import decode_senml, encode_senml
from workloads.spark.apps import parse_senml
from workloads.spark.session import ROCKSDB_PROVIDER

from .conftest import READINGS

PACKS = [
    encode_senml(READINGS[0], CITY.units),
    encode_senml(READINGS[1]),
    # No base name: "sensor/field" names, one pack holding two sensors.
    json.dumps([{"n": "a-1/temperature", "v": 20.5, "t": 1.0e9},
                {"n": "b-2/humidity", "v": 40.0, "t": 1.0e9}]),
    # Base value and relative times: two readings of one sensor; the later record of a field wins.
    json.dumps([{"bn": "c-3:", "bt": 1.0e9, "bv": 10.0, "n": "dust", "v": 1.5},
                {"n": "dust", "v": 2.5}, {"n": "light", "v": 3.0, "t": 60.0}]),
    # A base-only record, a text value (missing here) and an unnamed record named by its unit.
    json.dumps([{"bn": "d-4/", "bt": 1.0e9}, {"n": "temperature", "vs": "warm"},
                {"u": "humidity", "v": 55.0}]),
]


def expected(pack: str) -> set[tuple]:
    return {(r.sensor, r.timestamp, *(v if isinstance(v, float) else None
                                      for v in map(r.values.get, CITY.value_columns)))
            for r in decode_senml(pack)}


def test_parse_resolves_packs_like_decode_senml(spark: SparkSession) -> None:
    frame = spark.createDataFrame([(p,) for p in [*PACKS, "not json", "{}"]], "payload string")
    rows = parse_senml(frame).select("sensor", "time", *CITY.value_columns).collect()
    assert {tuple(row) for row in rows} == set().union(*map(expected, PACKS))
    assert len(rows) == 7


def test_parse_reads_bytes_and_keeps_topic_and_receive_time(spark: SparkSession) -> None:
    received = dt.datetime(2025, 1, 1, 12, 0, 0)
    frame = spark.createDataFrame([("city/boston", PACKS[1].encode(), received)],
                                  "topic string, payload binary, received timestamp")
    [row] = parse_senml(frame).collect()
    assert (row.topic, row.ingest_time, row.sensor) == ("city/boston", received, "boston-01")
    assert row.event_time == dt.datetime(2015, 1, 15, 0, 0, 4, 286000)


@pytest.mark.parametrize(("key", "value"), [
    ("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER),
    ("spark.sql.execution.arrow.pyspark.enabled", "true"),
    ("spark.sql.session.timeZone", "UTC"),
    ("spark.master", "local[2]"),
])
def test_session_defaults(spark: SparkSession, key: str, value: str) -> None:
    assert spark.conf.get(key) == value
