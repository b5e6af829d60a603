"""The job on a standalone cluster (1 master, 2 workers of 1 core): STATS equals local mode's,
a worker killed mid-run loses and repeats no message, a bad master is refused at once."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as mqtt
import pandas as pd
import pytest
from pyspark.sql import SparkSession

from workloads.riot.datasets import city_readings
from workloads.riot.senml import Reading, encode_senml
from workloads.spark import job
from workloads.spark.local_broker import LocalMosquitto
from workloads.spark.mqtt_source import default_client_id, open_session
from workloads.spark.standalone import StandaloneCluster, free_ports

from .conftest import JOB_START_S, JobProcess

pytestmark = pytest.mark.slow

# 14 CITY sensors, one reading a minute for 40 minutes; every field present and in range, so
# each message gives exactly one "kalman" row per field (FIELDS) at the sink.
READINGS = city_readings(rows=14 * 40, seed=3, outlier_rate=0.0, missing_rate=0.0)
FIELDS = 5
KEY = ["sensor", "field", "statistic", "time"]
PER_READING = ["kalman", "predicted"]
TOPIC = "clean/gw-1"
DRAIN_S = 120.0


def publish(broker: LocalMosquitto, readings: list[Reading], seconds: float = 0.0) -> None:
    """Each reading as a SenML pack at QoS 1, spread over `seconds`; returns once all are
    acknowledged."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    client.max_inflight_messages_set(1000)
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        start = time.monotonic()
        sent = []
        for n, reading in enumerate(readings):
            delay = start + n * seconds / len(readings) - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent.append(client.publish(TOPIC, encode_senml(reading), qos=1))
        for info in sent:
            info.wait_for_publish(60)
    finally:
        client.disconnect()
        client.loop_stop()


def sink_rows(output: Path) -> pd.DataFrame:
    """The rows Spark's file sink committed: the files its log (`_spark_metadata`) lists, not
    every file in the directory (a task killed with its executor may have left one)."""
    files: set[str] = set()
    for entry in (output / "_spark_metadata").iterdir():
        if entry.name.startswith("."):
            continue
        for line in entry.read_text().splitlines()[1:]:  # after the version line
            record = json.loads(line)
            if record.get("action") == "add":
                files.add(record["path"].removeprefix("file://"))
    frames = [pd.read_parquet(path) for path in sorted(files)]
    payloads = pd.concat(frames, ignore_index=True)["payload"]
    return pd.DataFrame([json.loads(p) for p in payloads])


def counts(rows: pd.DataFrame) -> tuple[int, int, int]:
    """(lost, duplicated, seen): messages with fewer, more, any kalman rows than FIELDS."""
    per_message = rows[rows["statistic"] == "kalman"].groupby(["sensor", "time"]).size()
    sent = {(r.sensor, r.timestamp) for r in READINGS}
    got = per_message.to_dict()
    lost = sum(1 for key in sent if got.get(key, 0) < FIELDS)
    duplicated = sum(1 for key in sent if got.get(key, 0) > FIELDS)
    return lost, duplicated, len(got)


@dataclass
class ClusterRun:
    rows: pd.DataFrame
    returncode: int
    alive_after_kill: int
    read_at_kill: int
    batches_after_kill: int


@pytest.fixture(scope="module")
def cluster_run(cluster: StandaloneCluster, broker: LocalMosquitto,
                tmp_path_factory: pytest.TempPathFactory) -> ClusterRun:
    """STATS on the cluster: half the readings, then the other half over 3 s with worker 1
    (its executor, Python workers and state stores) SIGKILLed 1 s into it."""
    work = tmp_path_factory.mktemp("cluster-job")
    args = ["--app", "stats", "--mqtt", f"{broker.host}:{broker.port}", "--reads", "clean/#",
            "--master", cluster.master_url, "--trigger", "0.5", "--partitions", "2"]
    open_session(broker.host, broker.port, "clean/#", default_client_id(work / "journal"))
    half = len(READINGS) // 2
    publish(broker, READINGS[:half])
    spark_job = JobProcess(args, work)
    try:
        spark_job.wait_for(lambda: spark_job.read() >= half, JOB_START_S, "the first half read")
        rest = threading.Thread(target=publish, args=(broker, READINGS[half:], 3.0))
        rest.start()
        time.sleep(1.0)
        read_at_kill = spark_job.read()
        cluster.kill_worker(0)
        rest.join()
        spark_job.wait_for(lambda: spark_job.read() >= len(READINGS), DRAIN_S,
                           "every reading read after the kill")
        alive = len(cluster.alive_workers())
    finally:
        returncode = spark_job.stop()
    progress = [json.loads(line) for line in (work / "progress.jsonl").read_text().splitlines()]
    after = sum(1 for p in progress if (p["from"] or 0) >= read_at_kill and p["numInputRows"])
    return ClusterRun(sink_rows(work / "output"), returncode, alive, read_at_kill, after)


@pytest.fixture(scope="module")
def local_rows(spark: SparkSession, broker: LocalMosquitto,
               tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """STATS over the same readings in local mode (the tests' one local Spark)."""
    work = tmp_path_factory.mktemp("local-job")
    args = job.parse_args(["--app", "stats", "--mqtt", f"{broker.host}:{broker.port}",
                           "--reads", "clean/#", "--work", str(work), "--trigger", "0.2"])
    open_session(broker.host, broker.port, "clean/#", job.client_id(args))
    publish(broker, READINGS)
    query = job.start(spark, args)
    try:
        deadline = time.monotonic() + DRAIN_S
        while max((job.read_offset(p) or 0 for p in query.recentProgress), default=0) < len(
                READINGS):
            assert query.isActive, query.exception()
            assert time.monotonic() < deadline, "local mode did not read every reading"
            query.processAllAvailable()
            time.sleep(0.2)
    finally:
        query.stop()
    return sink_rows(work / "output")


def test_a_worker_killed_mid_run_loses_and_repeats_nothing(cluster_run: ClusterRun) -> None:
    assert cluster_run.alive_after_kill == 1  # the master saw the worker go
    assert 0 < cluster_run.read_at_kill < len(READINGS)
    assert cluster_run.batches_after_kill >= 1  # the survivor ran the rest
    assert counts(cluster_run.rows) == (0, 0, len(READINGS))
    assert cluster_run.returncode == 0


def test_stats_on_the_cluster_equals_local_mode(cluster_run: ClusterRun,
                                                local_rows: pd.DataFrame) -> None:
    assert counts(local_rows) == (0, 0, len(READINGS))
    ordered = KEY + ["value"]

    def per_reading(rows: pd.DataFrame) -> pd.DataFrame:
        rows = rows[rows["statistic"].isin(PER_READING)][ordered]
        return rows.sort_values(ordered).reset_index(drop=True)

    got, expected = per_reading(cluster_run.rows), per_reading(local_rows)
    assert len(got) == len(expected) > 10_000
    assert got[KEY].equals(expected[KEY])
    assert (got["value"] - expected["value"]).abs().max() < 1e-9
    # Window rows appear as the watermark passes, which depends on the batches' bounds: the
    # windows both closed must agree, and most did.
    windows = [rows[~rows["statistic"].isin(PER_READING)].set_index(KEY)["value"]
               for rows in (cluster_run.rows, local_rows)]
    common = windows[0].index.intersection(windows[1].index)
    assert len(common) >= 0.9 * min(len(w) for w in windows) > 1000
    assert (windows[0][common] - windows[1][common]).abs().max() < 1e-9


def test_a_malformed_master_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        job.parse_args(["--app", "stats", "--mqtt", "127.0.0.1:1883", "--reads", "a/#",
                        "--work", "/tmp/unused", "--master", "spark:/cloud-1:7077"])
    error = capsys.readouterr().err
    assert "spark:/cloud-1:7077" in error and "spark://host:port" in error


def test_a_master_that_does_not_answer_is_refused(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    master = f"spark://127.0.0.1:{free_ports(1)[0]}"
    begun = time.monotonic()
    code = job.main(["--app", "stats", "--mqtt", "127.0.0.1:1883", "--reads", "a/#",
                     "--work", str(tmp_path), "--master", master])
    assert code == 2 and time.monotonic() - begun < 10
    out = capsys.readouterr().out
    assert master in out and "does not answer" in out


def test_a_daemon_that_cannot_start_is_named_with_its_log(tmp_path: Path) -> None:
    """A master whose port is taken fails at once (no moving to the next port), and the error
    quotes its log."""
    from workloads.spark.standalone import ClusterError, WorkerPorts

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ui_port, worker_port, worker_ui = free_ports(3)
        broken = StandaloneCluster(tmp_path, port, ui_port, [WorkerPorts(worker_port,
                                                                         worker_ui)])
        with pytest.raises(ClusterError, match=r"master exited before it was up") as error:
            broken.start(timeout=60)
    assert str(tmp_path / "master.log") in str(error.value)
    assert "Address already in use" in str(error.value)  # the log's tail says why
    assert broken.master is not None and not broken.master.alive() and not broken.workers
