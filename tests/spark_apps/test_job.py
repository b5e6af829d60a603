"""The cloud VM's Spark job: STATS from MQTT, enveloped or bare, equals STATS from files."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from workloads.riot.senml import encode_senml
from workloads.spark import job
from workloads.spark.mqtt_source import default_client_id, open_session

from .conftest import READINGS, Run

pytestmark = pytest.mark.slow
PER_READING = ["kalman", "predicted"]
KEY = ["sensor", "field", "statistic", "time"]


def test_the_envelope_is_unwrapped_and_a_bare_pack_kept(spark: SparkSession) -> None:
    pack = encode_senml(READINGS[0])
    envelope = json.dumps({"id": 7, "src": "s", "t": 1.0, "body": pack})
    rows = spark.createDataFrame(
        [("a/b", bytearray(envelope.encode()), datetime(2026, 1, 1)),
         ("a/b", bytearray(pack.encode()), datetime(2026, 1, 1))],
        "topic string, payload binary, received timestamp")
    assert [r.payload for r in job.unwrapped(rows).collect()] == [pack, pack]


def test_stats_from_mqtt_equals_stats_from_files(spark: SparkSession, stats_run: Run,
                                                 tmp_path: Path) -> None:
    mqtt = pytest.importorskip("paho.mqtt.client")
    from workloads.spark.local_broker import LocalMosquitto

    expected = stats_run.output
    expected = expected[expected["statistic"].isin(PER_READING)][KEY + ["value"]]
    with LocalMosquitto() as broker:
        args = job.parse_args(["--app", "stats", "--mqtt", f"{broker.host}:{broker.port}",
                               "--reads", "clean/#", "--work", str(tmp_path), "--trigger", "0.2"])
        open_session(broker.host, broker.port, args.reads, default_client_id(tmp_path / "journal"))
        publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        publisher.connect(broker.host, broker.port)
        publisher.loop_start()
        for i, reading in enumerate(READINGS):
            body = encode_senml(reading)
            payload = json.dumps({"id": i, "body": body}) if i % 2 else body
            publisher.publish("clean/gw-1", payload, qos=1).wait_for_publish()
        publisher.loop_stop()
        query = job.start(spark, args)
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                query.processAllAvailable()
                if sum(p["numInputRows"] for p in query.recentProgress) >= 2 * len(READINGS):
                    break
                time.sleep(0.5)
        finally:
            query.stop()
    rows = spark.read.parquet(str(tmp_path / "output")).toPandas()
    got = pd.DataFrame([json.loads(p) for p in rows["payload"]])
    got = got[got["statistic"].isin(PER_READING)][KEY + ["value"]]
    assert len(got) == len(expected) > 1000
    # A predicted time repeats (each reading predicts `horizon` ahead): compare sorted rows.
    ordered = KEY + ["value"]
    got = got.sort_values(ordered).reset_index(drop=True)
    expected = expected.sort_values(ordered).reset_index(drop=True)
    assert got[KEY].equals(expected[KEY])
    assert (got["value"] - expected["value"]).abs().max() < 1e-9
