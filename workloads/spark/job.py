"""The PySpark job a cloud VM runs for an `engine: spark` operator: an app from MQTT to MQTT.

    python -m workloads.spark.job --app stats --mqtt 10.0.0.2:1883 --reads 'clean/#' \\
        --writes stats/cloud-1 --work /records/stats

Reads the operator's topic filter through the replayable MQTT source (journal and checkpoint
under `--work`), runs ETL, STATS or PRED (`workloads.spark.apps`), and publishes each output
row as JSON to `--writes`, or appends it to Parquet under `--work`/output without one. Messages
may come wrapped in foglab's envelope (the emulation's drivers send `{"id", ..., "body"}`): the
SenML body is unwrapped. Each micro-batch's progress (rows, rate, duration) is appended to
`--work`/progress.jsonl (with `read`, the messages the source has handed to Spark so far),
which the emulation reads back; `--work`/started appears once the query has run a batch (the
emulation waits for it before devices speak). SIGTERM stops the query cleanly.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from workloads.spark.apps import RECEIVED, TOPIC, etl, pred, stats
from workloads.spark.mqtt_source import MqttDataSource, default_client_id, open_session
from workloads.spark.session import spark_session

APPS: dict[str, Callable[..., DataFrame]] = {"etl": etl, "stats": stats, "pred": pred}
STARTED = "started"
PROGRESS_FIELDS = ("batchId", "timestamp", "numInputRows", "inputRowsPerSecond",
                   "processedRowsPerSecond")


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected host:port, got {text!r}")
    return host, int(port)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workloads.spark.job", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", choices=sorted(APPS), required=True)
    parser.add_argument("--mqtt", type=_address, required=True, help="the broker, host:port")
    parser.add_argument("--reads", required=True, help="an MQTT topic filter")
    parser.add_argument("--writes", help="the topic outputs go to (default: Parquet)")
    parser.add_argument("--work", type=Path, required=True,
                        help="a directory for the journal, checkpoint and progress")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--trigger", type=float, default=1.0, help="seconds between batches")
    parser.add_argument("--max-records-per-trigger", type=int,
                        help="the most messages one batch reads (default: all there are)")
    parser.add_argument("--params", type=json.loads, default={},
                        help="the app's keyword arguments, as JSON")
    return parser.parse_args(argv)


def unwrapped(stream: DataFrame) -> DataFrame:
    """The source's rows as the apps take them: the SenML `payload` out of foglab's envelope
    (a SenML pack is a JSON array, so a bare pack has no `body` and is kept as it is), with
    the `topic` and the receive time (`received`, the name both the source and the apps use)."""
    text = F.col("payload").cast("string")
    return stream.select(TOPIC, F.coalesce(F.get_json_object(text, "$.body"), text)
                         .alias("payload"), RECEIVED)


def start(spark: SparkSession, args: argparse.Namespace):
    """The running query of the job `args` describes."""
    host, port = args.mqtt
    spark.dataSource.register(MqttDataSource)
    stream = (spark.readStream.format("mqtt").option("host", host).option("port", port)
              .option("topic", args.reads).option("journal", str(args.work / "journal")))
    if args.max_records_per_trigger:
        stream = stream.option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
    stream = stream.load()
    output = APPS[args.app](unwrapped(stream), **args.params)
    rows = output.select(F.to_json(F.struct(*output.columns)).alias("payload"))
    writer = (rows.writeStream.option("checkpointLocation", str(args.work / "checkpoint"))
              .trigger(processingTime=f"{args.trigger} seconds").outputMode("append"))
    if args.writes:
        writer = (writer.format("mqtt").option("host", host).option("port", port)
                  .option("topic", args.writes))
    else:
        writer = writer.format("parquet").option("path", str(args.work / "output"))
    return writer.start()


def read_offset(progress) -> int | None:
    """How many messages the MQTT source had handed to Spark by the end of this batch."""
    for source in progress["sources"]:
        end = source["endOffset"]
        end = json.loads(end) if isinstance(end, str) else end
        if isinstance(end, dict) and "offset" in end:
            return int(end["offset"])
    return None


def record_progress(query, path: Path, stopped: threading.Event, every: float = 1.0) -> None:
    """Append each finished batch's progress to `path` until the query ends or `stopped`,
    and touch STARTED beside it after the first."""
    seen = -1
    started = path.parent / STARTED
    with path.open("a") as out:
        while query.isActive and not stopped.wait(every):
            for progress in query.recentProgress:
                if progress["batchId"] > seen:
                    seen = progress["batchId"]
                    out.write(json.dumps({**{k: progress.get(k) for k in PROGRESS_FIELDS},
                                          "read": read_offset(progress)}) + "\n")
            out.flush()
            if seen >= 0 and not started.exists():
                # After a first batch: the source's client is connected and subscribed, so
                # even QoS 0 messages published from now on reach it.
                started.touch()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    # Before Spark's slow start: from here on the broker queues the operator's input for it.
    journal = args.work / "journal"
    open_session(*args.mqtt, args.reads, default_client_id(journal))
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    spark = spark_session(args.master, f"foglab-{args.app}")
    spark.sparkContext.setLogLevel("ERROR")
    query = start(spark, args)
    try:
        record_progress(query, args.work / "progress.jsonl", stopped)
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
        spark.stop()
    if query.exception() is not None:
        print(f"the {args.app} query failed: {query.exception()}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
