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
emulation waits for it before devices speak). SIGTERM stops the query cleanly; a query that
fails otherwise, once it has committed a batch, starts again on its checkpoint (RESTARTS).

`--master spark://host:port` runs the query on a standalone cluster (workloads.spark.standalone)
instead of local mode: the driver (this process) is refused at once when the master does not
answer; executors reach it at `--driver-host` (default: this host's address towards the
master), on `--driver-port` and `--block-manager-port` (default: any free ones; fixed where a
firewall or a container's published ports need them); each executor takes
`--executor-cores` and `--executor-memory` (at most a worker's memory). `--partitions N` (a
cluster's default: 2) cuts each batch's input into up to N partitions and runs stateful
stages in N tasks, so N executor cores share a batch; local mode keeps 1. The journal,
checkpoint and output under `--work` must be at the same path for every executor: on one host
they are; across hosts, `--work` must be a shared file system (see mqtt_source).

`--dilation K` (a run's time dilation, emu.agent.timebase): the trigger interval lasts K times
`--trigger` on the host, so batches come every `--trigger` emulated seconds, and Spark's own
timers are scaled likewise (workloads.spark.session.dilated_conf, which says what cannot be).

Moving the query to another job (`workloads.spark.migration`): writing `--work`/stop (its text
"export" or "checkpoint") stops the query at its next batch boundary, the source paused (see
`mqtt_source`); the job then writes `--work`/stopped.json (the source's offsets and client id)
and, for "export", the per-sensor state as Parquet (`--work`/state.parquet), and exits 0. With
`--standby`, the job starts Spark, runs its app once on synthetic input (its own journal,
topic, broker session and checkpoint), touches `--work`/standby and waits for `--work`/handover
(a directory: stopped.json, journal/, and checkpoint/ or state.parquet; moved by checkpoint with
a Parquet sink, the sink's log too), then starts its query from it with the source's broker
session. A job started without `--standby` in a directory that holds a handover (a moved query,
started again: a migration rolled back to it) continues on the handover's journal, session and
checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import paho.mqtt.client as mqtt
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from workloads.riot.datasets import CITY, city_readings
from workloads.riot.senml import encode_senml
from workloads.spark.apps import RECEIVED, TOPIC, etl, pred, stats
from workloads.spark.login import login
from workloads.spark.mqtt_source import MqttDataSource, default_client_id, open_session
from workloads.spark.session import (
    check_master,
    cluster_conf,
    dilated_conf,
    master_hosts,
    spark_session,
)
from workloads.spark.state import read_state

APPS: dict[str, Callable[..., DataFrame]] = {"etl": etl, "stats": stats, "pred": pred}
STARTED = "started"
PROGRESS_FIELDS = ("batchId", "timestamp", "numInputRows", "inputRowsPerSecond",
                   "processedRowsPerSecond")
# The move's files in `--work` (see the module docstring).
STOP_REQUEST = "stop"
PAUSED = "paused.json"  # written by the source's reader when it pauses
STOPPED = "stopped.json"
STATE = "state.parquet"
STANDBY = "standby"
HANDOVER = "handover"
RESUMED = "resumed.json"  # when a standby saw the handover and had started its query
# A Parquet sink keeps its log in its output directory, not in the checkpoint: moved by
# checkpoint, the query goes on numbering its batches and its sink needs that log.
SINK_LOG = "sink_log"
WAYS = ("export", "checkpoint")
HANDOVER_POLL_S = 0.01
WARMUP_WAIT_S = 600.0
# A query that fails (not stopped for a move) starts again on its checkpoint this many times: a
# loaded host fails batches (a Python worker not connecting back within Spark's 10 s).
RESTARTS = 2
CLUSTER_PARTITIONS = 2


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
    parser.add_argument("--master", default="local[2]",
                        help="local[N] or a standalone cluster's spark://host:port")
    parser.add_argument("--driver-host", help="where executors reach the driver (cluster)")
    parser.add_argument("--bind-address", default="0.0.0.0",
                        help="the address the driver listens on (cluster)")
    parser.add_argument("--driver-port", type=int, default=0, help="0: any free port")
    parser.add_argument("--block-manager-port", type=int, default=0, help="0: any free port")
    parser.add_argument("--executor-cores", type=int, default=1)
    parser.add_argument("--executor-memory", default="512m")
    parser.add_argument("--partitions", type=int, help="input partitions and stateful tasks "
                        f"per batch (default: 1 local, {CLUSTER_PARTITIONS} on a cluster)")
    parser.add_argument("--trigger", type=float, default=1.0,
                        help="seconds between batches (emulated: x --dilation on the host)")
    parser.add_argument("--dilation", type=float, default=1.0,
                        help="the run's time dilation K: Spark's timers and the trigger x K")
    parser.add_argument("--max-records-per-trigger", type=int,
                        help="the most messages one batch reads (default: all there are)")
    parser.add_argument("--params", type=json.loads, default={},
                        help="the app's keyword arguments, as JSON")
    parser.add_argument("--client-id", help="the source's broker session (default: derived "
                        "from the journal's path; a standby given it builds the query for a "
                        "checkpoint handover before it comes)")
    parser.add_argument("--output", type=Path,
                        help="the Parquet sink's directory without --writes (default: "
                        "--work/output)")
    parser.add_argument("--standby", action="store_true",
                        help="warm up, then wait for --work/handover and continue a moved query")
    parser.add_argument("--warmup-messages", type=int, default=3000,
                        help="synthetic messages a standby's warm-up runs through its app")
    parser.add_argument("--warmup-batches", type=int, default=3,
                        help="micro-batches the warm-up messages are split into")
    args = parser.parse_args(argv)
    if args.warmup_messages < 1 or args.warmup_batches < 1:
        parser.error("--warmup-messages and --warmup-batches must be at least 1")
    if not args.dilation >= 1:
        parser.error(f"--dilation must be at least 1, not {args.dilation}")
    if not args.trigger > 0:
        parser.error(f"--trigger must be a number of seconds > 0, not {args.trigger}")
    try:
        on_cluster = bool(master_hosts(args.master))
    except ValueError as error:
        parser.error(f"--master: {error}")
    if args.partitions is None:
        args.partitions = CLUSTER_PARTITIONS if on_cluster else 1
    if args.partitions < 1 or args.executor_cores < 1:
        parser.error("--partitions and --executor-cores must be at least 1")
    return args


def session_conf(args: argparse.Namespace) -> dict[str, str]:
    """Spark's settings for the job: its timers at the dilation, and on a cluster the driver's
    address and ports, the executors' size and the stateful stages' tasks."""
    partitions = getattr(args, "partitions", 1)
    conf = dilated_conf(args.dilation) | cluster_conf(
        args.master, args.driver_host, args.bind_address, args.driver_port,
        args.block_manager_port, args.executor_cores, args.executor_memory, partitions)
    if partitions != 1:
        conf["spark.sql.shuffle.partitions"] = str(partitions)
    return conf


def trigger_seconds(args: argparse.Namespace) -> float:
    """The trigger interval on the host's clock: --trigger emulated seconds x --dilation."""
    return args.trigger * getattr(args, "dilation", 1.0)


def _paths(args: argparse.Namespace) -> dict[str, Path]:
    # Namespaces built by hand (or by an older parse_args) lack the move's attributes.
    work = args.work
    return {"journal": getattr(args, "journal", None) or work / "journal",
            "checkpoint": getattr(args, "checkpoint", None) or work / "checkpoint",
            "output": getattr(args, "output", None) or work / "output"}


def client_id(args: argparse.Namespace) -> str:
    """The broker session the job's source uses."""
    return getattr(args, "client_id", None) or default_client_id(_paths(args)["journal"])


def unwrapped(stream: DataFrame) -> DataFrame:
    """The source's rows as the apps take them: the SenML `payload` out of foglab's envelope
    (a SenML pack is a JSON array, so a bare pack has no `body` and is kept as it is), with
    the `topic` and the receive time (`received`, the name both the source and the apps use)."""
    text = F.col("payload").cast("string")
    return stream.select(TOPIC, F.coalesce(F.get_json_object(text, "$.body"), text)
                         .alias("payload"), RECEIVED)


def start(spark: SparkSession, args: argparse.Namespace, initial_state: DataFrame | None = None,
          start_offset: int = 0, stoppable: bool = True):
    """The running query of the job `args` describes; `initial_state` seeds its app's
    per-sensor state, `start_offset` is where a new checkpoint starts in the journal, and
    `stoppable` lets `--work`/stop end it at a batch boundary."""
    return prepare(spark, args, initial_state, start_offset, stoppable).start()


def prepare(spark: SparkSession, args: argparse.Namespace,
            initial_state: DataFrame | None = None, start_offset: int = 0,
            stoppable: bool = True):
    """The query `start` starts, built and analysed but not started (a DataStreamWriter):
    its journal and checkpoint need not exist yet."""
    host, port = args.mqtt
    paths = _paths(args)
    spark.dataSource.register(MqttDataSource)
    stream = (spark.readStream.format("mqtt").option("host", host).option("port", port)
              .option("topic", args.reads).option("journal", str(paths["journal"]))
              .option("client_id", client_id(args)).option("start_offset", str(start_offset)))
    if stoppable:
        stream = (stream.option("stop_request", str(args.work / STOP_REQUEST))
                  .option("stop_record", str(args.work / PAUSED)))
    if args.max_records_per_trigger:
        stream = stream.option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
    if getattr(args, "partitions", 1) > 1:
        stream = stream.option("partitions", str(args.partitions))
    stream = stream.load()
    params = dict(args.params)
    if initial_state is not None:
        params["initial_state"] = initial_state
    output = APPS[args.app](unwrapped(stream), **params)
    rows = output.select(F.to_json(F.struct(*output.columns)).alias("payload"))
    writer = (rows.writeStream.option("checkpointLocation", str(paths["checkpoint"]))
              .trigger(processingTime=f"{trigger_seconds(args):g} seconds")
              .outputMode("append"))
    if args.writes:
        writer = (writer.format("mqtt").option("host", host).option("port", port)
                  .option("topic", args.writes))
    else:
        writer = writer.format("parquet").option("path", str(paths["output"]))
    return writer


def read_offset(progress, end: str = "endOffset") -> int | None:
    """How many messages the MQTT source had handed to Spark by the end of this batch (by its
    start with `end="startOffset"`)."""
    for source in progress["sources"]:
        offset = source[end]
        offset = json.loads(offset) if isinstance(offset, str) else offset
        if isinstance(offset, dict) and "offset" in offset:
            return int(offset["offset"])
    return None


def batch_end(record: dict) -> float:
    """When a progress record's batch finished (its trigger's start plus its execution), in
    seconds since the epoch."""
    begun = datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()
    return begun + (record.get("triggerMs") or 0) / 1000


def record_progress(query, path: Path, stopped: threading.Event, every: float = 1.0,
                    poll: float = 0.05) -> None:
    """Append each finished batch's progress to `path` until the query ends or `stopped`,
    and touch STARTED beside it after the first."""
    seen = -1
    started = path.parent / STARTED
    due = 0.0
    with path.open("a") as out:
        # Polled often so that a query stopped for a move is noticed at once; its progress is
        # written every `every` s and once more at the end.
        while True:
            active = query.isActive and not stopped.is_set()
            if not active or time.monotonic() >= due:
                due = time.monotonic() + every
                for progress in query.recentProgress:
                    if progress["batchId"] > seen:
                        seen = progress["batchId"]
                        out.write(json.dumps({
                            **{k: progress.get(k) for k in PROGRESS_FIELDS},
                            "triggerMs": (progress.get("durationMs") or {}).get(
                                "triggerExecution"),
                            "durationMs": progress.get("durationMs"),
                            "read": read_offset(progress),
                            "from": read_offset(progress, "startOffset")}) + "\n")
                out.flush()
                if seen >= 0 and not started.exists():
                    # After a first batch: the source's client is connected and subscribed, so
                    # even QoS 0 messages published from now on reach it.
                    started.touch()
            if not active:
                return
            stopped.wait(poll)


def _synthetic_messages(count: int) -> list[tuple[str, str]]:
    readings = city_readings(rows=count, seed=11, outlier_rate=0.0, missing_rate=0.0)
    return [(r.sensor, encode_senml(r, CITY.units)) for r in readings]


def warm_up(spark: SparkSession, args: argparse.Namespace, messages: int, batches: int) -> float:
    """Run the job's app, sink included, over `messages` synthetic messages in `batches`
    micro-batches, on a journal, checkpoint, topic and broker session of its own, so that the
    plan is compiled, the Python workers started and the JVM's code paths hot; return the
    seconds it took. Everything it made is removed, its broker session too."""
    begun = time.monotonic()
    host, port = args.mqtt
    token = uuid.uuid4().hex[:12]
    root = args.work / "warmup"
    shutil.rmtree(root, ignore_errors=True)
    warm = argparse.Namespace(**vars(args))
    warm.reads = f"foglab/warmup/{token}/#"
    warm.client_id = f"foglab-warmup-{token}"
    warm.journal, warm.checkpoint, warm.output = root / "journal", root / "checkpoint", root / "out"
    warm.writes = f"foglab/warmup/{token}/out" if args.writes else None
    warm.max_records_per_trigger = -(-messages // batches)
    open_session(host, port, warm.reads, warm.client_id)
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    login(publisher)
    publisher.max_inflight_messages_set(1000)
    publisher.connect(host, port)
    publisher.loop_start()
    try:
        sent = [publisher.publish(f"foglab/warmup/{token}/{sensor}", payload, qos=1)
                for sensor, payload in _synthetic_messages(messages)]
        for info in sent:
            info.wait_for_publish(60)
    finally:
        publisher.disconnect()
        publisher.loop_stop()
    query = start(spark, warm, stoppable=False)
    try:
        deadline = time.monotonic() + WARMUP_WAIT_S
        while max((read_offset(p) or 0 for p in query.recentProgress), default=0) < messages:
            if not query.isActive:
                raise RuntimeError(f"the warm-up query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the warm-up query read fewer than {messages} messages in "
                                   f"{WARMUP_WAIT_S:.0f} s")
            time.sleep(0.1)
    finally:
        query.stop()
        _drop_session(host, port, warm.client_id)
        shutil.rmtree(root, ignore_errors=True)
    return time.monotonic() - begun


def _warmed_up(spark: SparkSession, args: argparse.Namespace) -> float:
    """warm_up, tried again when its query fails: on a loaded host, Spark gives a Python
    worker 10 s to connect back, and a failed warm-up leaves nothing behind."""
    for attempt in range(1, RESTARTS + 2):
        try:
            return warm_up(spark, args, args.warmup_messages, args.warmup_batches)
        except RuntimeError as error:
            if attempt > RESTARTS:
                raise
            print(f"{error}; warming up again ({attempt}/{RESTARTS})", flush=True)
    raise AssertionError("unreachable")


def _committed(checkpoint: Path) -> bool:
    """Whether a query has committed a batch in this checkpoint."""
    commits = Path(checkpoint) / "commits"
    return commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir())


def _drop_session(host: str, port: int, session: str) -> None:
    # A clean-session connection under the same client id makes the broker discard the old
    # session: a warm-up's would otherwise stay subscribed on the broker for good.
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=session,
                         clean_session=True, protocol=mqtt.MQTTv311)
    login(client)
    client.connect(host, port)
    client.disconnect()


def await_handover(work: Path, stopped: threading.Event) -> Path | None:
    """The handover directory once it appears, None if the job was told to stop first."""
    handover = work / HANDOVER
    while not handover.is_dir():
        if stopped.wait(HANDOVER_POLL_S):
            return None
    return handover


def prepare_for_checkpoint(spark: SparkSession, args: argparse.Namespace):
    """The query a standby starts when it is handed a checkpoint by the source whose broker
    session is `args.client_id`, built ahead of the handover on the paths it will have."""
    moved = argparse.Namespace(**vars(args))
    moved.journal = args.work / HANDOVER / "journal"
    moved.checkpoint = args.work / HANDOVER / "checkpoint"
    return prepare(spark, moved)


def adopt(spark: SparkSession, args: argparse.Namespace, handover: Path) -> dict:
    """Point `args` at a handover's journal, broker session and (moved by checkpoint) its
    checkpoint; the keyword arguments `start` then needs (initial state, start offset)."""
    record = json.loads((handover / STOPPED).read_text())
    args.journal = handover / "journal"
    args.client_id = record["client_id"]
    if record["way"] == "checkpoint":
        args.checkpoint = handover / "checkpoint"
        relocate(args.checkpoint, record["checkpoint"])
        log = _paths(args)["output"] / "_spark_metadata"
        if (handover / SINK_LOG).is_dir() and not args.writes and not log.exists():
            shutil.copytree(handover / SINK_LOG, log)
        return {}
    args.checkpoint = args.work / "checkpoint"
    if args.checkpoint.exists():
        raise FileExistsError(f"{args.checkpoint}: a query moved by export starts a new "
                              "checkpoint, and this one is left from an earlier query")
    return {"initial_state": spark.read.parquet(str(handover / STATE)),
            "start_offset": record["committed"]}


def relocate(checkpoint: Path, was: str) -> None:
    """Make a copied checkpoint its own: transformWithState's state metadata
    (`state/<operator>/_metadata/v2/<batch>`) names its state schema files by the absolute path
    of the checkpoint it was written in, which the copy's machine may not have. They are
    pointed at the copy, and their checksum files, now stale, go (Hadoop's local file system
    reads a file without one unchecked)."""
    old = f"file:{os.path.abspath(was)}/".encode()
    new = f"file:{os.path.abspath(checkpoint)}/".encode()
    for path in Path(checkpoint).glob("state/*/_metadata/**/*"):
        if path.is_file() and not path.name.endswith(".crc"):
            data = path.read_bytes()
            if old in data:
                path.write_bytes(data.replace(old, new))
                path.with_name(f".{path.name}.crc").unlink(missing_ok=True)


def resume(args: argparse.Namespace) -> None:
    """Point `args` at the handover a moved query was started from, if its directory holds
    one: the job continues that query (its journal, broker session and checkpoint)."""
    handover = args.work / HANDOVER
    if not (handover / STOPPED).exists():
        return
    record = json.loads((handover / STOPPED).read_text())
    args.journal = handover / "journal"
    args.client_id = record["client_id"]
    # Moved by export, the query's checkpoint is the one it started in the work directory.
    args.checkpoint = handover / "checkpoint" if record["way"] == "checkpoint" else None


def finish_move(spark: SparkSession, args: argparse.Namespace) -> dict:
    """After the query stopped for a move: export its state if asked, write STOPPED."""
    record = json.loads((args.work / PAUSED).read_text())
    way = (args.work / STOP_REQUEST).read_text().strip() or "checkpoint"
    if way not in WAYS:
        raise ValueError(f"{args.work / STOP_REQUEST} says {way!r}, not one of {WAYS}")
    record |= {"way": way, "stopped_at": time.time(),
               "checkpoint": str(_paths(args)["checkpoint"]),
               "output": None if args.writes else str(_paths(args)["output"])}
    if way == "export":
        # Materialised here: the statestore reader reads the checkpoint lazily, and the
        # target has only what is handed over.
        read_state(spark, _paths(args)["checkpoint"]).write.parquet(str(args.work / STATE))
        record["exported_at"] = time.time()
    partial = args.work / (STOPPED + ".part")
    partial.write_text(json.dumps(record))
    partial.rename(args.work / STOPPED)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    # Left by an earlier job in this directory. Not a stop request: one written while this job
    # starts (a move right after a rollback) stops it at its first batch boundary.
    for name in (PAUSED, STOPPED, STANDBY, RESUMED):
        (args.work / name).unlink(missing_ok=True)
    shutil.rmtree(args.work / STATE, ignore_errors=True)
    if not args.standby:
        resume(args)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        check_master(args.master)
    except ConnectionError as error:
        print(f"--master: {error}", flush=True)
        return 2
    if not args.standby:
        # Before Spark's slow start: from here on the broker queues the operator's input for it.
        open_session(*args.mqtt, args.reads, client_id(args))
    spark = spark_session(args.master, f"foglab-{args.app}", session_conf(args))
    spark.sparkContext.setLogLevel("ERROR")
    try:
        moved: dict = {}
        prepared = None
        if args.standby:
            took = _warmed_up(spark, args)
            if args.client_id:
                # The source's session is known: only start() is left for the handover.
                prepared = prepare_for_checkpoint(spark, args)
            (args.work / STANDBY).write_text(json.dumps({"warmup_s": took,
                                                         "prepared": prepared is not None}))
            handover = await_handover(args.work, stopped)
            if handover is None:
                return 0
            seen = time.time()
            expected = args.client_id
            moved = adopt(spark, args, handover)  # for the checkpoint way, cheap: paths only
            if moved or args.client_id != expected:
                prepared = None
        query = prepared.start() if prepared is not None else start(spark, args, **moved)
        if args.standby:
            (args.work / RESUMED).write_text(json.dumps({"handover_seen": seen,
                                                         "query_started": time.time()}))
        for restart in range(RESTARTS + 1):
            try:
                record_progress(query, args.work / "progress.jsonl", stopped)
            except KeyboardInterrupt:
                pass
            finally:
                query.stop()
            if (args.work / PAUSED).exists():
                finish_move(spark, args)
                return 0
            if (query.exception() is None or stopped.is_set() or restart == RESTARTS
                    or not _committed(_paths(args)["checkpoint"])):
                break
            # Spark's own recovery: the checkpoint and the replayable source give each batch
            # once. A query that never committed (a new one, seeded by export) is not retried.
            print(f"the {args.app} query failed ({str(query.exception())[:300]}); restarting "
                  f"it on its checkpoint ({restart + 1}/{RESTARTS})", flush=True)
            query = start(spark, args)
    finally:
        spark.stop()
    if query.exception() is not None:
        print(f"the {args.app} query failed: {query.exception()}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
