"""The MQTT source on a real Mosquitto and a local Spark: exactly once, across a restart too."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from workloads.spark.local_broker import LocalMosquitto
from workloads.spark.mqtt_source import (
    ARROW_SCHEMA,
    SCHEMA,
    Journal,
    MqttDataSource,
    MqttStreamReader,
    open_session,
)

CLIENT_ID = "foglab-test-source"


def mqtt_stream(
    spark: SparkSession, broker: LocalMosquitto, journal: Path, **options: str
) -> DataFrame:
    return (
        spark.readStream.format("mqtt")
        .option("host", broker.host)
        .option("port", broker.port)
        .option("topic", "city/#")
        .option("client_id", CLIENT_ID)
        .option("journal", str(journal))
        .options(**options)
        .load()
    )


def processed(query: StreamingQuery) -> int:
    """Rows the query has read so far (raises what made it fail)."""
    if query.exception() is not None:
        raise AssertionError(f"the query failed: {query.exception()}")
    return sum(progress["numInputRows"] for progress in query.recentProgress)


def ids_of(rows: DataFrame) -> list[int]:
    payloads = rows.where("topic = 'city/sensor'").select("payload").collect()
    return [int(row.payload) for row in payloads]


def reader_for(broker: LocalMosquitto, journal: Path, **extra: str) -> MqttStreamReader:
    options = {"host": broker.host, "port": str(broker.port), "topic": "city/#"}
    return MqttStreamReader(options | {"client_id": CLIENT_ID, "journal": str(journal)} | extra)


def journaled(reader: MqttStreamReader) -> int:
    return reader.latestOffset(reader.initialOffset(), ReadAllAvailable())["offset"]


def test_the_arrow_schema_is_the_one_spark_expects() -> None:
    assert to_arrow_schema(SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="journal"):
        MqttStreamReader({"topic": "city/#"})
    with pytest.raises(ValueError, match="qos 0 and 1"):
        MqttStreamReader({"topic": "city/#", "journal": "/tmp/j", "qos": "2"})
    with pytest.raises(ValueError, match="maxRecordsPerTrigger"):
        MqttStreamReader({"topic": "city/#", "journal": "/tmp/j", "maxRecordsPerTrigger": "0"})


def test_the_read_limit_bounds_each_batch_and_reads_every_message_once(
    broker: LocalMosquitto,
    journal: Path,
    publish: Callable[..., float],
    wait_until: Callable[..., float],
) -> None:
    assert reader_for(broker, journal).getDefaultReadLimit() == ReadAllAvailable()
    open_session(broker.host, broker.port, "city/#", CLIENT_ID)
    reader = reader_for(broker, journal, maxRecordsPerTrigger="30")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(30)
    try:
        assert reader.reportLatestOffset() is None  # not connected yet
        for first in (0, 50):  # two segments: [0, 50) and [50, 100)
            publish(broker, "city/sensor", range(first, first + 50), threads=1)
            wait_until(lambda end=first + 50: journaled(reader) == end, 10, "journaled messages")
        assert reader.reportLatestOffset() == {"offset": 100}

        start, ends, ids = reader.initialOffset(), [], []
        while start["offset"] < 100:
            end = reader.latestOffset(start, limit)
            ids += [int(p) for part in reader.partitions(start, end)
                    for b in reader.read(part) for p in b["payload"].to_pylist()]
            reader.commit(end)
            ends.append(end["offset"])
            start = end
        assert ends == [30, 60, 90, 100]  # the second batch spans both segments
        assert ids == list(range(100))
        assert reader.latestOffset(start, limit) == start  # nothing new
        # ReadAllAvailable, which Spark may pass whatever the option says, reads all.
        assert reader.latestOffset({"offset": 40}, ReadAllAvailable()) == {"offset": 100}
    finally:
        reader.stop()


def test_a_pickled_reader_drops_its_client_and_reads_the_segments(
    broker: LocalMosquitto,
    journal: Path,
    publish: Callable[..., float],
    wait_until: Callable[..., float],
) -> None:
    options = CaseInsensitiveDict(
        host=broker.host, port=str(broker.port), topic="city/#", journal=str(journal)
    )
    reader = MqttDataSource(options).streamReader(SCHEMA)
    assert not reader.connected  # Spark also builds readers where no client may run
    assert journaled(reader) == 0
    assert reader.connected
    try:
        publish(broker, "city/sensor", range(50))
        wait_until(lambda: journaled(reader) == 50, 10, "50 journaled messages")

        clone = pickle.loads(pickle.dumps(reader))
        assert not clone.connected and reader.connected
        offsets = ({"offset": 0}, {"offset": 50})
        batches = [b for part in clone.partitions(*offsets) for b in clone.read(part)]
        payloads = [p for batch in batches for p in batch.column("payload").to_pylist()]
        assert sorted(map(int, payloads)) == list(range(50))
    finally:
        reader.stop()
    assert not reader.connected


def test_opening_an_existing_session_again_takes_no_message_from_it(
    broker: LocalMosquitto,
    journal: Path,
    publish: Callable[..., float],
    wait_until: Callable[..., float],
) -> None:
    open_session(broker.host, broker.port, "city/#", CLIENT_ID)
    publish(broker, "city/sensor", range(300))
    open_session(broker.host, broker.port, "city/#", CLIENT_ID)  # is sent the 300, acks none

    reader = reader_for(broker, journal)
    try:
        wait_until(lambda: journaled(reader) >= 300, 10, "the 300 queued messages")
    finally:
        reader.stop()


KEEP_JOURNALING = """
import sys, time
from pyspark.sql.streaming.datasource import ReadAllAvailable
from workloads.spark.mqtt_source import MqttStreamReader
host, port, client_id, journal = sys.argv[1:]
reader = MqttStreamReader(
    {"host": host, "port": port, "topic": "city/#", "client_id": client_id, "journal": journal}
)
start = reader.initialOffset()
while True:
    reader.latestOffset(start, ReadAllAvailable())
    time.sleep(0.05)
"""


def test_a_killed_reader_process_loses_no_message(
    broker: LocalMosquitto,
    journal: Path,
    publish: Callable[..., float],
    wait_until: Callable[..., float],
) -> None:
    n = 3000
    open_session(broker.host, broker.port, "city/#", CLIENT_ID)
    publisher = threading.Thread(
        target=publish, args=(broker, "city/sensor", range(n)), kwargs={"per_second": 1000}
    )
    args = [broker.host, str(broker.port), CLIENT_ID, str(journal)]
    doomed = subprocess.Popen([sys.executable, "-c", KEEP_JOURNALING, *args])
    try:
        # The active log appears once the reader holds the journal, just before it connects.
        wait_until(lambda: (journal / "active.log").exists(), 60, "the first reader")
        publisher.start()
        wait_until(lambda: Journal(journal).end() > n // 4, 20, "the first reader's segments")
    finally:
        doomed.kill()  # as Spark may: no stop(), no clean disconnect
        doomed.wait()
    assert publisher.is_alive(), "the reader should be killed while messages still arrive"

    reader = reader_for(broker, journal)
    try:
        publisher.join()
        wait_until(lambda: journaled(reader) >= n, 30, "every message")
    finally:
        reader.stop()
    partitions = reader.partitions({"offset": 0}, {"offset": Journal(journal).end()})
    ids = [
        int(p) for part in partitions for b in reader.read(part) for p in b["payload"].to_pylist()
    ]
    print(f"\nkilled reader: {len(ids)} journaled for {n} published, {len(ids) - n} twice")
    assert set(ids) == set(range(n))


@pytest.mark.slow
def test_5000_messages_from_2_publishers_reach_a_memory_sink_exactly_once(
    spark: SparkSession,
    broker: LocalMosquitto,
    journal: Path,
    tmp_path: Path,
    publish: Callable[..., float],
    wait_until: Callable[..., float],
    record_property: Callable[[str, object], None],
) -> None:
    n = 5000
    # Opened first: the broker keeps nothing for a client it never saw.
    open_session(broker.host, broker.port, "city/#", CLIENT_ID)
    query = (
        mqtt_stream(spark, broker, journal)
        .writeStream.format("memory")
        .queryName("mqtt_exactly_once")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        # The first batch starts Spark's Python workers: not part of the source's throughput.
        publish(broker, "city/warmup", [-1], threads=1)
        wait_until(lambda: processed(query) == 1, 120, "the warm-up message")

        started = time.monotonic()
        publishing = publish(broker, "city/sensor", range(n), threads=2)
        wait_until(lambda: processed(query) >= n + 1, 120, f"{n} messages")
        seconds = time.monotonic() - started
    finally:
        query.stop()

    rows = spark.table("mqtt_exactly_once")
    ids = ids_of(rows)
    lost, duplicated = n - len(set(ids)), len(ids) - len(set(ids))
    record_property("messages_per_second", round(n / seconds))
    print(
        f"\nsource: {n} messages in {seconds:.1f} s ({n / seconds:.0f}/s; publishing took "
        f"{publishing:.1f} s): lost {lost}, duplicated {duplicated}"
    )
    assert (lost, duplicated) == (0, 0)
    assert set(ids) == set(range(n))
    offsets = sorted(row.offset for row in rows.select("offset").collect())
    assert offsets == list(range(n + 1))


@pytest.mark.slow
def test_a_query_restarted_from_its_checkpoint_writes_each_message_once(
    spark: SparkSession,
    broker: LocalMosquitto,
    journal: Path,
    tmp_path: Path,
    publish: Callable[..., float],
    wait_until: Callable[..., float],
) -> None:
    n = 4000
    output, checkpoint = tmp_path / "parquet", tmp_path / "checkpoint"

    def start() -> StreamingQuery:
        return (
            mqtt_stream(spark, broker, journal)
            .writeStream.format("parquet")
            .option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    def written(query: StreamingQuery) -> int:
        processed(query)  # fails fast if the query failed
        return spark.read.parquet(str(output)).count()

    open_session(broker.host, broker.port, "city/#", CLIENT_ID)
    first = start()
    publish(broker, "city/warmup", [-1], threads=1)
    wait_until(lambda: processed(first) == 1, 120, "the warm-up message")
    publisher = threading.Thread(
        target=publish, args=(broker, "city/sensor", range(n)), kwargs={"per_second": 500}
    )
    publisher.start()
    try:
        wait_until(lambda: processed(first) >= n // 4, 60, "a quarter of the messages")
        first.stop()
        assert publisher.is_alive(), "the query should stop while messages are still published"
        before = spark.read.parquet(str(output)).count() - 1  # less the warm-up message

        second = start()
        try:
            publisher.join()
            restarted = time.monotonic()
            wait_until(lambda: written(second) >= n + 1, 120, "every message")
            caught_up = time.monotonic() - restarted
        finally:
            second.stop()
    finally:
        publisher.join()

    ids = ids_of(spark.read.parquet(str(output)))
    print(
        f"\nrestart: {before} messages written before the stop, {len(ids) - before} after; "
        f"{len(ids)} rows, {len(set(ids))} distinct of {n}; caught up {caught_up:.1f} s "
        "after the last publish"
    )
    assert sorted(ids) == list(range(n))


@pytest.mark.slow
def test_spark_reads_a_backlog_in_batches_of_at_most_max_records_per_trigger(
    spark: SparkSession,
    broker: LocalMosquitto,
    journal: Path,
    tmp_path: Path,
    publish: Callable[..., float],
) -> None:
    n, most = 2000, 600
    open_session(broker.host, broker.port, "city/#", CLIENT_ID)
    publish(broker, "city/sensor", range(n), threads=2)  # queued by the broker: a backlog
    stream = mqtt_stream(spark, broker, journal, maxRecordsPerTrigger=str(most))
    query = (
        stream.writeStream.format("memory")
        .queryName("mqtt_read_limit")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        deadline = time.monotonic() + 180
        while processed(query) < n and time.monotonic() < deadline:
            query.processAllAvailable()
            time.sleep(0.2)
    finally:
        query.stop()
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    print(f"\nread limit {most}: batches of {sizes}")
    assert sum(sizes) == n and max(sizes) <= most and len(sizes) >= -(-n // most)
    assert sorted(ids_of(spark.table("mqtt_read_limit"))) == list(range(n))
