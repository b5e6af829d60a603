"""A STATS query moved live between job processes, by export then by checkpoint, ends as an
unmoved one: no reading lost or duplicated at the sink, per-sensor aggregates without a gap."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from workloads.riot.datasets import city_readings
from workloads.riot.senml import Reading, encode_senml
from workloads.spark.apps import stats
from workloads.spark.job import PAUSED, STANDBY
from workloads.spark.local_broker import LocalMosquitto, find_mosquitto
from workloads.spark.migration import JobProcess, Move, move, request_stop
from workloads.spark.mqtt_source import open_session

from .conftest import run_to_end, senml_stream, write_senml

pytestmark = pytest.mark.slow

# 14 CITY sensors every minute for an hour, in time order (so no reading is late for the
# windows, whatever the batches), with outliers and gaps.
READINGS = city_readings(rows=14 * 60, seed=5, outlier_rate=0.05, missing_rate=0.05)
THIRD = len(READINGS) // 3
PER_READING = ["kalman", "predicted"]
KEY = ["sensor", "field", "statistic", "time"]
RATE = 40.0  # messages per second while a move happens
START_WAIT = 900.0  # a cold JVM on a loaded two-core host
CAUGHT_UP_WAIT = 300.0
SESSION = "foglab-test-stats"


class Publisher:
    """Publishes readings at QoS 1 on one topic, noting when each was acknowledged."""

    def __init__(self, broker: LocalMosquitto) -> None:
        mqtt = pytest.importorskip("paho.mqtt.client")
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        self.client.max_inflight_messages_set(1000)
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        self.sent: list[float] = []

    def publish(self, readings: Sequence[Reading], rate: float | None = None,
                hold: tuple[int, Path] | None = None) -> None:
        """Publish `readings` (at `rate`); with `hold` (n, path), wait after the first n
        until `path` exists."""
        start = time.monotonic()
        for i, reading in enumerate(readings):
            if hold is not None and i == hold[0]:
                deadline = time.monotonic() + CAUGHT_UP_WAIT
                while not hold[1].exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
                start = time.monotonic() - i / rate if rate else start
            if rate:
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
            # Every other message in the emulation's envelope, as the job must unwrap both.
            body = encode_senml(reading)
            payload = json.dumps({"id": len(self.sent), "body": body}) if i % 2 else body
            self.client.publish("clean/gw-1", payload, qos=1).wait_for_publish(60)
            self.sent.append(time.time())

    def in_background(self, readings: Sequence[Reading], rate: float,
                      hold: tuple[int, Path] | None = None) -> threading.Thread:
        thread = threading.Thread(target=self.publish, args=(readings, rate, hold))
        thread.start()
        return thread

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def caught_up(job: JobProcess, offset: int, timeout: float = CAUGHT_UP_WAIT) -> None:
    deadline = time.monotonic() + timeout
    while job.read() < offset:
        if not job.alive():
            raise AssertionError(f"job in {job.work} exited:\n{job.log_tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"job in {job.work} read {job.read()} of {offset} messages "
                                 f"in {timeout:.0f} s")
        time.sleep(0.2)


def closed(job: JobProcess, offset: int, timeout: float = 120.0) -> None:
    """Wait for the batch without data that closes the windows the last watermark passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(
            p["read"] == offset and p["numInputRows"] == 0 for p in job.progress()):
        time.sleep(0.2)


def move_while_publishing(publisher: Publisher, readings: Sequence[Reading], source: JobProcess,
                          target: JobProcess, way: str) -> Move:
    """Start publishing `readings`, move the query once some are out, and publish the rest
    from the moment the source pauses: they wait for the target."""
    before = len(publisher.sent)
    thread = publisher.in_background(readings, RATE, (20, source.work / PAUSED))
    try:
        while len(publisher.sent) < before + 20 and thread.is_alive():
            time.sleep(0.05)
        moved = move(source, target, way)
    finally:
        thread.join()
    return moved


def sink_rows(spark: SparkSession, *outputs: Path) -> pd.DataFrame:
    """Every row the jobs' Parquet sinks committed (Spark reads a sink's log, so a batch's
    files count once it committed, and only then)."""
    frames = []
    for output in outputs:
        rows = spark.read.parquet(str(output)).toPandas()
        frames.append(pd.DataFrame([json.loads(p) for p in rows["payload"]]))
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def unmoved(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """STATS over all READINGS in one query that never moves."""
    root = tmp_path_factory.mktemp("unmoved")
    stream = senml_stream(spark, write_senml(root / "input", READINGS, files=3))
    output, _ = run_to_end(stats(stream), root / "checkpoint")
    return output


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """STATS from MQTT in a job process, moved by export into a standby, then by checkpoint
    into another, each time while readings arrive; the output directories and the moves.
    Meanwhile a job that never gets input is asked to stop: its exit code and stop record
    (its JVM starts with the others', not in a test of its own)."""
    if find_mosquitto() is None:
        pytest.skip("mosquitto is not installed (Debian package 'mosquitto')")
    root = tmp_path_factory.mktemp("moved")
    jobs: list[JobProcess] = []
    with LocalMosquitto() as broker:
        common = ["--app", "stats", "--mqtt", f"{broker.host}:{broker.port}", "--reads",
                  "clean/#", "--trigger", "0.5"]
        standby = ["--standby", "--warmup-messages", "280", "--warmup-batches", "1"]
        publisher = Publisher(broker)
        try:
            # The session before the first message: the job opens it only once Python is up.
            open_session(broker.host, broker.port, "clean/#", SESSION)
            first = JobProcess(root / "first", [*common, "--client-id", SESSION])
            jobs.append(first)
            # By export: a new query, so a new Parquet sink (its batches count from 0 again).
            second = JobProcess(root / "second", [*common, *standby])
            jobs.append(second)
            # By checkpoint: the query carries on, batch numbers and sink log too.
            third = JobProcess(root / "third", [*common, *standby, "--client-id", SESSION,
                                                "--output", str(root / "second" / "output")])
            jobs.append(third)
            # Reads a topic nobody publishes on: no input before its stop request.
            idle = JobProcess(root / "idle", ["--app", "stats", "--mqtt",
                                              f"{broker.host}:{broker.port}", "--reads",
                                              "idle/#", "--trigger", "0.5"])
            jobs.append(idle)
            publisher.publish(READINGS[:THIRD])
            caught_up(first, THIRD, START_WAIT)
            second.wait_for(STANDBY, START_WAIT)
            third.wait_for(STANDBY, START_WAIT)
            idle.wait_for("started", START_WAIT)
            request_stop(idle.work, "checkpoint")
            idle.wait_for("stopped.json", 60)
            idle_exit = idle.process.wait(60)
            by_export = move_while_publishing(publisher, READINGS[THIRD:2 * THIRD], first,
                                              second, "export")
            caught_up(second, 2 * THIRD)
            by_checkpoint = move_while_publishing(publisher, READINGS[2 * THIRD:], second, third,
                                                  "checkpoint")
            caught_up(third, len(READINGS))
            closed(third, len(READINGS))
            yield {"outputs": [root / "first" / "output", root / "second" / "output"],
                   "moves": [by_export, by_checkpoint], "sent": list(publisher.sent),
                   "jobs": jobs, "idle": (idle_exit, json.loads(
                       (idle.work / "stopped.json").read_text()))}
        finally:
            publisher.close()
            for job in jobs:
                job.stop()


def per_reading(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows[rows["statistic"].isin(PER_READING)][[*KEY, "value"]]
    return rows.sort_values([*KEY, "value"]).reset_index(drop=True)


def test_each_move_held_input_and_kept_its_downtime(moved: dict) -> None:
    for step in moved["moves"]:
        held = sum(step.paused < t < step.first_batch for t in moved["sent"])
        assert held > 0, f"{step.way}: nothing was published during the move"
        assert step.paused <= step.stopped <= step.handed_over < step.first_batch
        assert 0 < step.downtime < 120, step
    assert [job.process.returncode for job in moved["jobs"][:2]] == [0, 0]


def test_per_sensor_kalman_and_predictions_carry_on_through_both_moves(
        spark: SparkSession, moved: dict, unmoved: pd.DataFrame) -> None:
    got = per_reading(sink_rows(spark, *moved["outputs"]))
    expected = per_reading(unmoved)
    assert len(expected) > 5000
    counts = got.groupby(KEY).size()
    lost = expected.drop_duplicates(KEY).merge(got, on=KEY, how="left", indicator=True)
    assert (lost["_merge"] == "left_only").sum() == 0, "rows missing after a move"
    # A predicted time repeats (each reading predicts `horizon` ahead): compare multisets.
    assert counts.equals(expected.groupby(KEY).size()), "rows duplicated after a move"
    assert got[KEY].equals(expected[KEY])
    assert (got["value"] - expected["value"]).abs().max() < 1e-9


def test_windows_carry_on_by_checkpoint_and_restart_by_export(
        spark: SparkSession, moved: dict, unmoved: pd.DataFrame) -> None:
    by_export, by_checkpoint = moved["moves"]
    got = sink_rows(spark, *moved["outputs"])
    windows = ["average", "distinct_count"]
    got = got[got["statistic"].isin(windows)].set_index(KEY)["value"]
    expected = unmoved[unmoved["statistic"].isin(windows)].set_index(KEY)["value"]
    assert not got.index.duplicated().any(), "a window emitted twice"
    # Window ends (epoch s) of the readings: a window [end - 10 min, end) holds readings of the
    # first query only, or of the queries after the export only, or of both.
    times = sorted(r.timestamp for r in READINGS)
    export_split = times[by_export.committed]  # the first reading the second query read
    ends = expected.index.get_level_values("time")
    before = ends <= export_split
    after = ends - 600 >= export_split
    # Wholly before the export or after it: as unmoved, the checkpoint move in between
    # changing nothing; a window spanning the export saw the second query's readings only.
    both = expected[before | after].index.intersection(got.index)
    assert len(both) > 100
    assert len(got.index.intersection(expected[after].index)) == after.sum()
    assert (got[both] - expected[both]).abs().max() < 1e-9
    assert by_checkpoint.committed > by_export.committed


def test_a_stop_request_before_any_input_stops_the_job_at_once(moved: dict) -> None:
    exit_code, record = moved["idle"]
    assert exit_code == 0
    assert record["committed"] == record["journal_end"] == 0
    assert record["way"] == "checkpoint"
