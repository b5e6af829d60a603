"""STATS on Spark from a real Mosquitto: end-to-end latency, sustained rate, exactly-once counts.

Set-up. A throwaway Mosquitto on loopback (`LocalMosquitto`); `--publishers` gateway processes,
each with its own paho client and its share of `--sensors` CITY sensors, publishing SenML
packs (`encode_senml`, the five CITY fields, values from `city_readings` kept inside
`CITY.ranges` so the range filter keeps every message) at `--qos` on an open-loop schedule at
a fixed total rate: a gateway that falls behind catches up in a burst, and the rate reached is
what `input_per_s` reports. The STATS app (`workloads.spark.apps.stats`, used as it is) runs in
local[2] on the project's MQTT source (format "mqtt"; its receive time `received` is what
STATS keeps as `ingest_time`) and writes its whole output to Spark's Parquet file sink.

One query runs through three steps, so that its per-sensor state and windows carry on as in a
long-running deployment: once its first (empty) trigger has connected the source's client, a
prime (`--prime` s at `--prime-rate`, only its counts printed: it compiles the query, starts
the Python workers and warms the JVM up. Spark plans every micro-batch again, so the planner's
code grows hot only slowly: with batches of 1,000 messages, the JIT compiler took 1.0 s of CPU
per batch in a JVM a minute old, 0.26 s at two and a half minutes, 0.1 to 0.18 s from three
minutes on. The default prime, 240 s at 500 msg/s, is long enough for that and slow enough for
a cold JVM to keep up with; at 1,000 msg/s a cold JVM falls `--max-backlog` behind and the
prime stops early), then (1) the latency phase at `--latency-rate` (1,000 msg/s) and (2) the
throughput phase at `--throughput-rate` (10,000 msg/s). The latency phase publishes for
`--warmup` plus `--duration` s, its first `--warmup` s left out of its latency and Spark rate;
the throughput phase, on the warm query, for `--duration` s, all measured. A phase ends when
Spark has read every acknowledged message (or `--drain` s after publishing stopped). When Spark
falls more than `--max-backlog` messages behind, publishing stops early, which is printed:
Spark does not sustain the rate, and a longer backlog would only lengthen the run. A batch
reads at most `--max-records-per-trigger` messages (the source's read limit), so a backlog is
worked off in batches of bounded size and latency rather than in one.

Latency of a message = the time its STATS rows became visible at the sink minus its send
timestamp. Per message, STATS emits one "kalman" row per field carrying the message's SenML
time (and, once the regression window is full, `horizon` "predicted" rows per field); a gateway
sets that time to its `time.time()` just before `publish`, so a row names its message and its
send time exactly. A row is visible when the file sink commits its batch: Spark writes
`_spark_metadata/<batch>` (atomically, by rename) after the batch's Parquet files, and a reader
of the table sees exactly the files listed there. That log file's mtime (the realtime clock the
gateways read, one host) is the visibility time of every row of the batch. Sliding-window rows
(average, distinct count) appear when the watermark closes their window, long after its first
messages, so they do not define a message's latency; `window_lag` (visible minus the earliest
time the window could close: end plus the watermark delay) is printed for them. The latency is
split into broker+source (`ingest_time` minus send) and Spark (visible minus `ingest_time`).

Counts at the sink: every acknowledged message must give exactly one kalman row per field (5):
`lost` counts messages with fewer rows at the sink, `duplicated` messages with more; messages
are matched by (sensor, SenML time), which a gateway keeps unique per sensor.
`late_for_windows` counts messages whose time was at or before the watermark of the batch that
read them: the windows leave those out, as a watermark means to.

Rates, per phase: `input_per_s` is what the gateways sent while publishing; `sink_per_s` is
the sustained rate at the sink, the least-squares slope of the phase's cumulative message count
at the sink against the commit times of its batches (the input rate when Spark keeps up,
Spark's drain rate when it does not; the target counts as met from 90 % of the rate, on a
phase that was not stopped early and was drained); `spark_per_s` is messages read over the
trigger execution time of the batches started after the warm-up (Spark's capacity while busy,
from the query progress; source offsets, since `numInputRows` counts each of STATS' two scans
of the source). `spark_ms_per_message` is the CPU time of the JVM and its Python workers per
message read: on a shared host it says what the wall-clock rates cannot; `jit_ms_per_message`
is the part of it spent by the JVM's JIT compiler threads (how warm the JVM still is).

pandas: the same STATS computation (SenML parse, range filter, sliding-window average and
distinct count, Kalman filter, sliding regression with its predictions) in pandas and numpy on
every message Spark processed (its state saw them all), timed from the payloads to the
results after the query stopped, and checked against Spark's output. `pandas_per_s` is
messages per second; last line `ratio=spark_per_s/pandas_per_s`, with the throughput phase's
`spark_per_s`.

Sensors: 40 by default (10 per gateway). STATS keeps per-sensor Python state
(`transformWithStateInPandas`) in 8 keys of sensors: each key of a batch costs round trips to
the JVM's state server and a DataFrame in and out, whatever its number of sensors. The
per-message work is numpy over each sensor's batch; the Kalman filter and the regression still
emit 55 rows per 5-field message at the app's horizon of 10.

Windows: 10 s every 1 s with a 1 s watermark (`--window`, `--slide`, `--watermark`): each
observation falls in 10 windows, as with the app's default 10 min every 1 min, but windows
close within a phase so their rows reach the sink too.

The broker, the gateway processes, the query, the Spark session and the temporary directory
(journal, checkpoint, Parquet) are removed at the end, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing as mp
import os
import queue
import resource
import shutil
import signal
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import paho.mqtt.client as mqtt
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.lib.stride_tricks import sliding_window_view
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from workloads.riot.datasets import CITY, city_readings, city_sensor_ids
from workloads.riot.senml import Reading, encode_senml
from workloads.riot.tasks.statistics import KalmanFilter
from workloads.spark.apps import INGEST_TIME, SENSOR, TIME, stats
from workloads.spark.local_broker import LocalMosquitto
from workloads.spark.mqtt_source import MqttDataSource, default_client_id, open_session
from workloads.spark.session import spark_session

FIELDS = CITY.value_columns
REGRESSION_WINDOW, HORIZON = 10, 10  # stats()'s defaults, passed explicitly: pandas uses them too
TOPIC_ROOT = "foglab-bench"
READY_WAIT = 120.0  # seconds gateways may take to start (imports on a loaded host)
ACK_WAIT = 60.0


# Gateways: publisher processes -----------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One phase's work for one gateway."""

    topic: str
    rate: float
    seconds: float
    qos: int
    seed: int
    out: str


def _clipped(values: dict[str, Any]) -> dict[str, Any]:
    # Keep every message inside CITY.ranges: a filtered message would read as lost.
    return {name: min(max(v, CITY.ranges[name][0]), CITY.ranges[name][1])
            if name in CITY.ranges else v for name, v in values.items()}


def _run_job(client: mqtt.Client, sensors: list[str], job: Job, link: GatewayLink) -> dict:
    count = max(1, round(job.rate * job.seconds))
    values = [_clipped(r.values) for r in city_readings(
        rows=count, seed=job.seed, sensors=len(sensors), outlier_rate=0.0, missing_rate=0.0)]
    names, times, payloads, sent = [], [], [], []
    link.ready.put(link.index)
    start = link.commands.get()  # the common start time
    interval, last, k = 1.0 / job.rate, 0.0, 0
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    while time.time() < start:
        time.sleep(min(0.01, max(0.0, start - time.time())))
    while k < count and not link.stop.is_set():
        due = min(count, int((time.time() - start) / interval) + 1)
        if due <= k:
            time.sleep(max(0.0, start + k * interval - time.time()))
            continue
        # A gateway that fell behind catches up in a burst, checking for a stop now and then.
        for _ in range(min(due - k, 256)):
            sensor = sensors[k % len(sensors)]
            # Unique per sensor (the sink matches rows to messages by it), in microseconds as
            # timestamp_seconds keeps them.
            now = round(max(time.time(), last + 1e-6), 6)
            last = now
            payload = encode_senml(Reading(now, sensor, values[k]), CITY.units)
            sent.append(client.publish(f"{job.topic}/{sensor}", payload, job.qos))
            names.append(sensor)
            times.append(now)
            payloads.append(payload)
            k += 1
        link.sent.value = k
    deadline = time.monotonic() + ACK_WAIT
    for info in sent:
        info.wait_for_publish(max(0.0, deadline - time.monotonic()))
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    acked = np.fromiter((info.is_published() for info in sent), bool, len(sent))
    table = pa.table({SENSOR: names, TIME: times, "payload": payloads, "acked": acked})
    with pa.OSFile(job.out, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return {"sent": len(sent), "acked": int(acked.sum()),
            "cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)}


@dataclass
class GatewayLink:
    """What a gateway process shares with the benchmark: its command queue, the common ready
    and result queues, the stop event and its count of messages sent in the current job."""

    index: int
    commands: Any
    ready: Any
    results: Any
    stop: Any
    sent: Any


def gateway(host: str, port: int, sensors: list[str], link: GatewayLink) -> None:
    """A gateway process: one paho client, then one Job per phase until it is sent None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent cleans up on Ctrl-C
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                         client_id=f"bench-gateway-{link.index}", protocol=mqtt.MQTTv311)
    client.connect(host, port, keepalive=60)
    client.loop_start()
    try:
        link.ready.put(link.index)
        while (job := link.commands.get()) is not None:
            link.results.put((link.index, _run_job(client, sensors, job, link)))
    finally:
        client.disconnect()
        client.loop_stop()


class Gateways:
    """The publisher processes, started once and given one Job per phase."""

    def __init__(self, broker: LocalMosquitto, sensors: list[str], count: int) -> None:
        context = mp.get_context("spawn")  # no fork of a process that runs a JVM bridge
        ready, results, self.stop = context.Queue(), context.Queue(), context.Event()
        self.links = [GatewayLink(i, context.Queue(), ready, results, self.stop,
                                  context.RawValue("q", 0)) for i in range(count)]
        self.processes = [context.Process(
            target=gateway, name=f"bench-gateway-{link.index}", daemon=True,
            args=(broker.host, broker.port, sensors[link.index::count], link))
            for link in self.links]
        for process in self.processes:
            process.start()
        self._facts: dict[int, dict[str, Any]] = {}

    def await_ready(self) -> None:
        for _ in self.processes:
            self.links[0].ready.get(timeout=READY_WAIT)

    def start(self, jobs: list[Job], lead: float = 0.5) -> float:
        """Hand out the jobs, wait until every gateway prepared its payload values, start
        them together; return the start time."""
        self.stop.clear()
        self._facts = {}
        for link, job in zip(self.links, jobs, strict=True):
            link.sent.value = 0
            link.commands.put(job)
        self.await_ready()
        start = time.time() + lead
        for link in self.links:
            link.commands.put(start)
        return start

    def sent(self) -> int:
        return sum(link.sent.value for link in self.links)

    def finished(self) -> list[dict[str, Any]] | None:
        """Each gateway's facts once all of them finished their job, else None."""
        results = self.links[0].results
        with contextlib.suppress(queue.Empty):
            while len(self._facts) < len(self.processes):
                index, facts = results.get_nowait()
                self._facts[index] = facts
        if len(self._facts) < len(self.processes):
            if not all(process.is_alive() for process in self.processes):
                raise RuntimeError("a gateway process died")
            return None
        return [self._facts[i] for i in sorted(self._facts)]

    def close(self) -> None:
        self.stop.set()
        for link, process in zip(self.links, self.processes, strict=True):
            if process.is_alive():
                with contextlib.suppress(Exception):
                    link.commands.put(None)
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()


# The sink: Parquet files, committed per batch by the file sink log ------------------------


def sink_batches(output: Path) -> pd.DataFrame:
    """Each Parquet file of the file sink with the batch that committed it and the time it
    became visible (the mtime of the batch's `_spark_metadata` log file)."""
    log = output / "_spark_metadata"
    entries: dict[int, Path] = {}
    for path in log.iterdir():
        name = path.name.removesuffix(".compact")
        if name.isdigit():
            entries[int(name)] = path
    seen: set[str] = set()
    rows = []
    for batch in sorted(entries):
        path = entries[batch]
        visible = path.stat().st_mtime_ns / 1e9
        lines = path.read_text().splitlines()[1:]  # after the version line
        # A compacted log file lists every earlier batch's files too.
        for line in lines:
            entry = json.loads(line)
            file = urlparse(entry["path"]).path
            if entry.get("action", "add") == "add" and file not in seen:
                seen.add(file)
                rows.append((batch, visible, file))
    return pd.DataFrame(rows, columns=["batch", "visible", "file"])


@dataclass
class SinkRows:
    kalman: pd.DataFrame  # sensor, field, time, value, ingest_time, batch, visible
    windows: pd.DataFrame  # sensor, field, statistic, time (window end), value, visible
    predicted: pd.DataFrame  # index (sensor, field): size, sum of the predicted rows
    rows: int
    batches: int


KALMAN_COLUMNS = [SENSOR, "field", TIME, "value", INGEST_TIME, "batch", "visible"]
WINDOW_COLUMNS = [SENSOR, "field", "statistic", TIME, "value", "visible"]


def _together(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    for column in (SENSOR, "field", "statistic"):
        if column in out.columns:
            out[column] = out[column].astype(str)
    return out


def read_sink(output: Path) -> SinkRows:
    """The sink's kalman and window rows with their batch's visibility time, and the
    predicted rows summed per sensor and field (they are 10 times the rest)."""
    files = sink_batches(output)
    kalman, windows, predicted, total = [], [], [], 0
    for batch, visible, file in files.itertuples(index=False):
        table = pq.ParquetFile(file, read_dictionary=[SENSOR, "field", "statistic"]).read()
        total += table.num_rows
        frame = table.to_pandas()
        frame["batch"], frame["visible"] = batch, visible
        kind = frame["statistic"].astype(str)
        kalman.append(frame.loc[kind == "kalman", KALMAN_COLUMNS])
        windows.append(frame.loc[kind.isin(["average", "distinct_count"]), WINDOW_COLUMNS])
        predicted.append(frame.loc[kind == "predicted"].groupby(
            [SENSOR, "field"], observed=True)["value"].agg(["size", "sum"]).reset_index())
    kalman_rows = _together(kalman, KALMAN_COLUMNS)
    kalman_rows[INGEST_TIME] = _epoch(kalman_rows[INGEST_TIME])
    per_field = _together(predicted, [SENSOR, "field", "size", "sum"])
    per_field = per_field.groupby([SENSOR, "field"])[["size", "sum"]].sum()
    return SinkRows(kalman_rows, _together(windows, WINDOW_COLUMNS), per_field, total,
                    files["batch"].nunique())


def _epoch(times: pd.Series) -> pd.Series:
    stamps = pd.to_datetime(times, utc=True)
    return (stamps - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)


# The query and its phases -------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    rate: float  # messages per second, all gateways together
    seconds: float  # measured, after the warm-up
    warmup: float


@dataclass
class Watch:
    """A phase as it ran."""

    phase: Phase
    jobs: list[Job]
    start: float
    read_before: int  # the source's offset when the phase began
    read: int = 0
    end: float = 0.0
    published: int | None = None
    stopped_early: str = ""
    facts: list[dict[str, Any]] = field(default_factory=list)
    cpu_s: float = 0.0  # Spark's CPU time: the JVM and its Python workers
    jit_s: float = 0.0  # the part of it in the JVM's JIT compiler threads

    @property
    def drained(self) -> bool:
        return self.read >= self.read_before + (self.published or 0)


def _offset(value: Any) -> int:
    value = json.loads(value) if isinstance(value, str) else value
    return int(value["offset"]) if value else 0


def _stat_fields(path: Path) -> list[str]:
    """The fields of a /proc stat file after the command name, from the state on."""
    return path.read_text().rsplit(")", 1)[1].split()


def tree_cpu(pid: int) -> float:
    """CPU seconds of process `pid` and its descendants, their waited-for children included."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats_of: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                fields = _stat_fields(Path(f"/proc/{entry}/stat"))
                stats_of[int(entry)] = fields
                children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        if current in stats_of:
            total += sum(int(v) for v in stats_of[current][11:15]) / tick  # u, s, cu, cs time
        todo.extend(children.get(current, []))
    return total


def compiler_cpu(pid: int) -> float:
    """CPU seconds of the JIT compiler threads ("C1 CompilerThre", "C2 CompilerThre") of the
    JVM `pid`."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            if "CompilerThre" in (task / "comm").read_text():
                fields = _stat_fields(task / "stat")
                total += (int(fields[11]) + int(fields[12])) / tick  # user, system time
    return total


class StatsQuery:
    """STATS on the MQTT source, writing Parquet: one query for all phases."""

    def __init__(self, spark: Any, broker: LocalMosquitto, root: Path,
                 args: argparse.Namespace) -> None:
        self.topic = f"{TOPIC_ROOT}/stats"
        self.output = root / "output"
        journal = root / "journal"
        client_id = default_client_id(journal)
        # The session first: at QoS 1 the broker queues for it whatever is published before
        # the reader connects (at the query's first trigger).
        open_session(broker.host, broker.port, f"{self.topic}/#", client_id, args.qos)
        raw = (spark.readStream.format("mqtt").option("host", broker.host)
               .option("port", str(broker.port)).option("topic", f"{self.topic}/#")
               .option("qos", str(args.qos)).option("journal", str(journal))
               .option("client_id", client_id)
               .option("maxRecordsPerTrigger", str(args.max_records_per_trigger)).load())
        # parse_senml takes the source's `received` (journal) time as the ingest time.
        app = stats(raw, window=args.window,
                    slide=args.slide, watermark=args.watermark,
                    regression_window=REGRESSION_WINDOW, horizon=HORIZON)
        self.jvm = spark.sparkContext._gateway.proc.pid
        self.query = (app.writeStream.format("parquet").queryName("stats_bench")
                      .option("path", str(self.output))
                      .option("checkpointLocation", str(root / "checkpoint"))
                      .trigger(processingTime=args.trigger).start())

    def read(self) -> tuple[int, Any]:
        """Messages the query has read (its source's end offset), and its last batch id."""
        if self.query.exception() is not None:
            raise RuntimeError(f"the STATS query failed: {self.query.exception()}")
        last = self.query.lastProgress
        if last is None:
            return 0, "-"
        return _offset(last["sources"][0]["endOffset"]), last["batchId"]

    def await_reader(self, timeout: float = 600.0) -> None:
        """Wait for the first (empty) trigger: it connects the source's MQTT client, and at
        QoS 0 the broker keeps nothing for a client that is not connected."""
        deadline = time.monotonic() + timeout
        while self.query.lastProgress is None:
            if self.query.exception() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the STATS query did not start: {self.query.exception()}")
            time.sleep(0.1)

    def stop(self, idle_wait: float = 10.0) -> list[Any]:
        """Stop, after a running batch (e.g. one that closes windows) ended; return the
        progress of every batch."""
        deadline = time.monotonic() + idle_wait
        while self.query.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.1)
        history = list(self.query.recentProgress)
        self.query.stop()
        return history


def run_phase(query: StatsQuery, gateways: Gateways, root: Path, phase: Phase,
              args: argparse.Namespace, progress: Progress) -> Watch:
    """Publish the phase's messages, stop early if Spark falls too far behind, wait until
    Spark read them all (or `--drain` passed)."""
    seconds = phase.warmup + phase.seconds
    share = phase.rate / args.publishers
    jobs = [Job(query.topic, share, seconds, args.qos,
                seed=zlib.crc32(f"{phase.name}{i}".encode()),
                out=str(root / f"{phase.name}-gateway-{i}.arrow"))
            for i in range(args.publishers)]
    planned = sum(max(1, round(share * seconds)) for _ in jobs)
    # The prime's first batch compiles the query: on a loaded host that alone takes minutes.
    drain = max(args.drain, 300.0) if phase.name == "prime" else args.drain
    task = progress.add_task(phase.name, total=planned)
    read_before, _ = query.read()
    cpu_before, jit_before = tree_cpu(query.jvm), compiler_cpu(query.jvm)
    watch = Watch(phase, jobs, gateways.start(jobs), read_before)
    drain_deadline = math.inf
    try:
        while True:
            watch.read, batch = query.read()
            now = time.time()
            if watch.published is None:
                backlog = read_before + gateways.sent() - watch.read
                if backlog > args.max_backlog and not gateways.stop.is_set():
                    gateways.stop.set()
                    watch.stopped_early = (f"publishing stopped after {now - watch.start:.1f} s:"
                                           f" Spark was {backlog} messages behind")
                facts = gateways.finished()
                if facts is not None:
                    watch.facts = facts
                    watch.published = sum(f["acked"] for f in facts)
                    drain_deadline = now + drain
            what = "publishing" if watch.published is None else "draining"
            progress.update(task, completed=min(watch.read - read_before, planned),
                            description=f"{phase.name} {phase.rate:,.0f} msg/s: {what}, "
                                        f"batch {batch}")
            if watch.published is not None and (watch.drained or now > drain_deadline):
                break
            time.sleep(0.2)
    finally:
        progress.remove_task(task)
    watch.end = time.time()
    watch.cpu_s = tree_cpu(query.jvm) - cpu_before
    watch.jit_s = compiler_cpu(query.jvm) - jit_before
    return watch


@dataclass
class PhaseResult:
    watch: Watch
    lines: list[str]
    figures: dict[str, float]
    payloads: list[str]


def _q(series: pd.Series, level: float) -> float:
    return float(series.quantile(level)) if len(series) else math.nan


def analyse(watch: Watch, sink: SinkRows, history: list[Any],
            args: argparse.Namespace) -> PhaseResult:
    phase = watch.phase
    tables = [pa.ipc.open_file(pa.memory_map(job.out)).read_all() for job in watch.jobs]
    sent = pd.concat([t.select([SENSOR, TIME, "acked"]).to_pandas() for t in tables],
                     ignore_index=True)
    sent = sent[sent["acked"]]

    # Exactly once: one kalman row per field and message.
    mine = sink.kalman.merge(sent[[SENSOR, TIME]], on=[SENSOR, TIME])
    rows = mine.groupby([SENSOR, TIME]).size().rename("rows")
    counted = sent.join(rows, on=[SENSOR, TIME])["rows"].fillna(0)
    lost = int((counted < len(FIELDS)).sum())
    duplicated = int((counted > len(FIELDS)).sum())

    # Messages older than the watermark of the batch that read them: the windows leave them
    # out by design (the watermark delay is the lateness they allow), the kalman rows do not.
    watermarks = pd.Series({p["batchId"]: pd.Timestamp(p["eventTime"]["watermark"]).timestamp()
                            for p in history if "watermark" in p.get("eventTime", {})},
                           dtype=float)
    once = mine.drop_duplicates([SENSOR, TIME])
    late = int((once[TIME] <= once["batch"].map(watermarks).fillna(-math.inf)).sum())

    # What the gateways sent, over the whole publishing time; latency after the warm-up.
    until = sent[TIME].max()
    input_per_s = (len(sent) - 1) / (until - sent[TIME].min()) if len(sent) > 1 else math.nan
    measured_from = watch.start + phase.warmup
    measured = sent[sent[TIME] >= measured_from]
    timed = measured.merge(once, on=[SENSOR, TIME])  # a message's rows share a batch
    latency = timed["visible"] - timed[TIME]
    ingest = timed[INGEST_TIME] - timed[TIME]
    in_spark = timed["visible"] - timed[INGEST_TIME]

    # The sink's pace: the slope of the phase's messages at the sink against commit time.
    commits = once.groupby("visible").size().cumsum()
    sink_per_s = (float(np.polyfit(commits.index.to_numpy(), commits.to_numpy(), 1)[0])
                  if len(commits) >= 2 else math.nan)

    # Spark while busy: messages read over trigger execution time, the phase's batches after
    # its warm-up (offsets: numInputRows counts each of STATS' two scans of the source).
    busy = [(_offset(p["sources"][0]["endOffset"]) - _offset(p["sources"][0]["startOffset"]),
             p["durationMs"].get("triggerExecution", 0) / 1000.0) for p in history
            if measured_from <= pd.Timestamp(p["timestamp"]).timestamp() <= watch.end]
    busy = [b for b in busy if b[0] > 0]
    spark_rows, spark_s = sum(b[0] for b in busy), sum(b[1] for b in busy)
    spark_per_s = spark_rows / spark_s if spark_s else math.nan
    batch_s = float(np.median([b[1] for b in busy])) if busy else math.nan
    batch_rows = float(np.median([b[0] for b in busy])) if busy else math.nan

    # Windows that could close (end plus the watermark delay) after the warm-up, while the
    # phase still published.
    closable = sink.windows[TIME] + pd.Timedelta(args.watermark).total_seconds()
    closes = (closable >= measured_from) & (closable <= until)
    windows = sink.windows[closes]
    window_lag = windows["visible"] - closable[closes]
    gateway_cores = sum(f["cpu_s"] for f in watch.facts) / max(1e-9, until - watch.start)
    read = watch.read - watch.read_before
    unread = len(sent) - read

    name = f"[{phase.name}]"
    lines = [
        f"{name} target_per_s={phase.rate:.0f} duration_s={phase.seconds:g} "
        f"warmup_s={phase.warmup:g} publishers={args.publishers} sensors={args.sensors} "
        f"qos={args.qos} trigger={args.trigger!r} "
        f"max_records_per_trigger={args.max_records_per_trigger}",
        *([f"{name} {watch.stopped_early}"] if watch.stopped_early else []),
        f"{name} published={len(sent)} read_by_spark={read}"
        f"{'' if watch.drained else ' (drain timed out)'} kalman_rows={len(mine)} "
        f"window_rows={len(windows)} phase_s={watch.end - watch.start:.1f}",
        f"{name} input_per_s={input_per_s:.0f} sink_per_s={sink_per_s:.0f} "
        f"spark_per_s={spark_per_s:.0f} (batches={len(busy)} batch_s_p50={batch_s:.2f} "
        f"batch_messages_p50={batch_rows:.0f})",
        f"{name} cpu: spark_ms_per_message={1000 * watch.cpu_s / max(1, read):.2f} "
        f"jit_ms_per_message={1000 * watch.jit_s / max(1, read):.2f} "
        f"gateway_cores={gateway_cores:.2f}",
        f"{name} lost={lost} duplicated={duplicated} late_for_windows={late}"
        + ("" if watch.drained else f" (of the lost, {unread} were not yet read by Spark when "
                                    f"the drain timed out: unread, not dropped)"),
        f"{name} latency_s p50={_q(latency, 0.5):.3f} p95={_q(latency, 0.95):.3f} "
        f"max={_q(latency, 1.0):.3f} (broker+source p50={_q(ingest, 0.5):.3f}, "
        f"spark p50={_q(in_spark, 0.5):.3f}; {len(latency)} messages after warm-up)",
        f"{name} window_lag_s p50={_q(window_lag, 0.5):.3f} p95={_q(window_lag, 0.95):.3f}",
    ]
    figures = {"published": len(sent), "input_per_s": input_per_s, "sink_per_s": sink_per_s,
               "spark_per_s": spark_per_s, "lost": lost, "duplicated": duplicated,
               "p50": _q(latency, 0.5), "p95": _q(latency, 0.95),
               "complete": float(watch.drained and not watch.stopped_early), "late": late}
    # pandas gets the messages Spark processed: all of them, unless some were lost.
    keys = pd.concat([t.select([SENSOR, TIME]).to_pandas() for t in tables], ignore_index=True)
    seen = keys.join(rows, on=[SENSOR, TIME])["rows"].notna().to_numpy()
    payloads = [p for t in tables for p in t["payload"].to_pylist()]
    payloads = [p for p, kept in zip(payloads, seen, strict=True) if kept]
    return PhaseResult(watch, lines, figures, payloads)


# The same aggregation in pandas ---------------------------------------------------------------


@dataclass
class PandasStats:
    kalman: pd.DataFrame  # sensor, field, time, value
    predicted: pd.DataFrame  # series, time, value; series indexes `series`
    series: pd.DataFrame  # sensor, field per series code
    windows: pd.DataFrame  # index sensor, field, start; average, distinct_count


def pandas_stats(payloads: list[str], window: float, slide: float) -> PandasStats:
    """STATS by pandas and numpy: parse, range filter, sliding windows, Kalman, regression."""
    packs = [json.loads(p) for p in payloads]
    records = pd.DataFrame.from_records([r for pack in packs for r in pack],
                                        columns=["bn", "bt", "n", "v"])
    reading = np.repeat(np.arange(len(packs)), [len(p) for p in packs])
    # encode_senml puts the base name and time in each pack's first record.
    base = records[["bn", "bt"]].ffill()
    long = pd.DataFrame({SENSOR: base["bn"].str[:-1], "field": records["n"],
                         TIME: base["bt"].astype(float), "value": records["v"].astype(float)})
    low = long["field"].map({k: v[0] for k, v in CITY.ranges.items()})
    high = long["field"].map({k: v[1] for k, v in CITY.ranges.items()})
    bad = low.notna() & ~long["value"].between(low, high)
    rejected = pd.Series(bad.to_numpy()).groupby(reading).any().to_numpy()
    clean = long[~rejected[reading] & long["field"].isin(FIELDS) & long["value"].notna()]
    clean = clean.astype({SENSOR: "category", "field": "category"})

    # Sliding windows: each observation in window / slide windows.
    first = np.floor(clean[TIME] / slide) * slide
    spans = pd.concat([clean.assign(start=first - k * slide)
                       for k in range(round(window / slide))])
    grouped = spans.groupby([SENSOR, "field", "start"], observed=True)["value"]
    windows = pd.DataFrame({"average": grouped.mean(), "distinct_count": grouped.nunique()})

    # Kalman filter per series (sensor, field) in time order, vectorised across series.
    clean = clean.sort_values([SENSOR, "field", TIME], kind="stable")
    keys = clean.groupby([SENSOR, "field"], observed=True, sort=False)
    code, step = keys.ngroup().to_numpy(), keys.cumcount().to_numpy()
    series = clean[[SENSOR, "field"]].drop_duplicates().reset_index(drop=True)
    shape = (step.max() + 1, len(series))
    z, t = np.full(shape, np.nan), np.full(shape, np.nan)
    z[step, code], t[step, code] = clean["value"].to_numpy(), clean[TIME].to_numpy()
    reference = KalmanFilter()
    gain, p = np.zeros(shape[0]), reference.p0
    for i in range(1, shape[0]):
        p += reference.q
        gain[i] = p / (p + reference.r)
        p = (1.0 - gain[i]) * p
    x = np.empty(shape)
    x[0] = z[0]
    for i in range(1, shape[0]):
        x[i] = x[i - 1] + gain[i] * (z[i] - x[i - 1])
    kalman = clean[[SENSOR, "field", TIME]].assign(value=x[step, code])

    # Sliding linear regression over the smoothed values, HORIZON predictions per full window.
    tw = sliding_window_view(t, REGRESSION_WINDOW, axis=0)
    yw = sliding_window_view(x, REGRESSION_WINDOW, axis=0)
    rel = tw - tw[..., :1]  # time from the window's first point, as fit_line is given it
    mean_x, mean_y = rel.mean(axis=-1), yw.mean(axis=-1)
    dx = rel - mean_x[..., None]
    sxx = (dx * dx).sum(axis=-1)
    sxy = (dx * (yw - mean_y[..., None])).sum(axis=-1)
    slope = np.divide(sxy, sxx, out=np.zeros_like(sxx), where=sxx > 0)
    intercept = mean_y - slope * mean_x
    span = rel[..., -1]
    ahead = np.arange(1, HORIZON + 1) * (span / (REGRESSION_WINDOW - 1))[..., None]
    when = tw[..., -1][..., None] + ahead
    value = intercept[..., None] + slope[..., None] * (span[..., None] + ahead)
    full = ~np.isnan(value)
    codes = np.broadcast_to(np.arange(len(series))[None, :, None], value.shape)
    predicted = pd.DataFrame({"series": codes[full], TIME: when[full], "value": value[full]})
    return PandasStats(kalman, predicted, series, windows)


def compare(spark: SinkRows, ours: PandasStats, window: float) -> str:
    """How far Spark's STATS output is from pandas' on the messages Spark processed: kalman
    rows one by one, the predictions as a count and sum per sensor and field, windows by
    their start."""
    sk = spark.kalman[[SENSOR, "field", TIME, "value"]]
    pk = ours.kalman.astype({SENSOR: str, "field": str})
    joined = sk.merge(pk, on=[SENSOR, "field", TIME], suffixes=("", "_pandas"))
    kalman_diff = (joined["value"] - joined["value_pandas"]).abs().max()
    named = ours.predicted.groupby("series")["value"].agg(["size", "sum"])
    named.index = pd.MultiIndex.from_frame(ours.series.astype(str).iloc[named.index])
    both = spark.predicted.join(named, rsuffix="_pandas", how="outer").fillna(0)
    predicted_rel = ((both["sum"] - both["sum_pandas"]).abs()
                     / both["sum_pandas"].abs().clip(lower=1e-12)).max()
    text = (f"[pandas check] kalman rows compared={len(joined)} of {len(sk)} "
            f"max_abs_diff={kalman_diff:.3g}; ")
    text += (f"predicted rows spark={int(both['size'].sum())} "
             f"pandas={int(both['size_pandas'].sum())} max_rel_diff_of_sums={predicted_rel:.3g}")
    if not len(spark.windows):
        return text + "; no window rows at the sink"
    windows = spark.windows.assign(start=spark.windows[TIME] - window).pivot_table(
        index=[SENSOR, "field", "start"], columns="statistic", values="value")
    pw = ours.windows.reset_index().astype({SENSOR: str, "field": str})
    w = windows.join(pw.set_index([SENSOR, "field", "start"]), rsuffix="_pandas", how="inner")
    average_diff = (w["average"] - w["average_pandas"]).abs().max()
    # Absolute and relative: an average near 0 (a temperature) differs in its rounding only.
    differing = int((~np.isclose(w["average"], w["average_pandas"], rtol=1e-9, atol=1e-9)).sum())
    distinct_err = ((w["distinct_count"] - w["distinct_count_pandas"]).abs()
                    / w["distinct_count_pandas"]).mean()
    return (text + f"; windows compared={len(w)} of {len(windows)} "
            f"average_max_abs_diff={average_diff:.3g} averages_differing={differing} "
            f"distinct_count_mean_rel_err={distinct_err:.3g}")


# Main -------------------------------------------------------------------------------------------


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-rate", type=float, default=1000.0, help="msg/s, phase 1")
    parser.add_argument("--throughput-rate", type=float, default=10000.0,
                        help="msg/s in total, phase 2")
    parser.add_argument("--duration", type=float, default=30.0,
                        help="measured seconds per phase (after the latency phase's warm-up)")
    parser.add_argument("--warmup", type=float, default=2.0,
                        help="seconds the latency phase publishes first, not measured")
    parser.add_argument("--prime", type=float, default=240.0,
                        help="seconds at --prime-rate before the phases, to warm the query up")
    parser.add_argument("--prime-rate", type=float, default=500.0, help="msg/s, the prime")
    parser.add_argument("--drain", type=float, default=120.0,
                        help="seconds Spark may take after publishing stops")
    parser.add_argument("--max-backlog", type=int, default=12000,
                        help="messages Spark may fall behind before publishing stops")
    parser.add_argument("--max-records-per-trigger", type=int, default=10000,
                        help="the most messages one micro-batch reads")
    parser.add_argument("--publishers", type=int, default=4, help="gateway processes")
    parser.add_argument("--sensors", type=int, default=40)
    parser.add_argument("--qos", type=int, choices=(0, 1), default=1)
    parser.add_argument("--trigger", default="250 milliseconds",
                        help="processing-time trigger interval")
    parser.add_argument("--window", default="10 seconds")
    parser.add_argument("--slide", default="1 second")
    parser.add_argument("--watermark", default="1 second")
    args = parser.parse_args()
    if args.sensors < args.publishers:
        parser.error("--sensors must be at least --publishers")
    phases = [Phase("prime", args.prime_rate, args.prime, 0.0),
              Phase("latency", args.latency_rate, args.duration, args.warmup),
              Phase("throughput", args.throughput_rate, args.duration, 0.0)]

    signal.signal(signal.SIGTERM, _interrupt)
    console = Console(stderr=True)
    load_before = os.getloadavg()[0]
    with contextlib.ExitStack() as cleanup:
        root = Path(tempfile.mkdtemp(prefix="foglab-spark-stats-"))
        cleanup.callback(shutil.rmtree, root, ignore_errors=True)
        console.print(f"[bold]starting[/] Mosquitto, {args.publishers} gateways, Spark local[2]")
        broker = cleanup.enter_context(LocalMosquitto())
        gateways = Gateways(broker, city_sensor_ids(args.sensors), args.publishers)
        cleanup.callback(gateways.close)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = spark_session("local[2]", "foglab-bench-spark-stats", conf={
            "spark.sql.streaming.numRecentProgressUpdates": "100000",
            # The sink log's per-batch files date the batches: keep them past compaction.
            "spark.sql.streaming.fileSink.log.deletion": "false"})
        cleanup.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(MqttDataSource)
        query = StatsQuery(spark, broker, root, args)
        cleanup.callback(lambda: query.query.isActive and query.query.stop())
        gateways.await_ready()
        query.await_reader()
        watches = []
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=True) as progress:
            for phase in phases:
                watches.append(run_phase(query, gateways, root, phase, args, progress))
                console.print(f"{phase.name}: done in {watches[-1].end - watches[-1].start:.0f} s")
        history = query.stop()
        console.print("[bold]reading[/] the sink")
        sink = read_sink(query.output)
        results = [analyse(watch, sink, history, args) for watch in watches]
        prime = results[0]
        # On a shared host, the other processes' load explains much of the wall-clock figures.
        print(f"[host] cpus={os.cpu_count()} load_1min start={load_before:.1f} "
              f"end={os.getloadavg()[0]:.1f}")
        print(f"[prime] published={prime.figures['published']:.0f} lost={prime.figures['lost']} "
              f"duplicated={prime.figures['duplicated']} "
              f"late_for_windows={prime.figures['late']} "
              f"(compiles the query before the measured phases)")
        for result in results[1:]:
            print("\n".join(result.lines), flush=True)
        print(f"[sink] parquet_rows={sink.rows} batches={sink.batches} (all steps)")
        latency, throughput = results[1].figures, results[2].figures
        exact = all(r.figures["lost"] + r.figures["duplicated"] == 0 for r in results)
        sustained = (throughput["complete"]
                     and throughput["sink_per_s"] >= 0.9 * args.throughput_rate)
        print(f"[targets] sustain {args.throughput_rate:.0f} msg/s: "
              f"{'met' if sustained else 'NOT met'} (sink_per_s="
              f"{throughput['sink_per_s']:.0f}); lost=0 and duplicated=0 at the sink: "
              f"{'met' if exact else 'NOT met'}; "
              f"p50 <= 1 s at {args.latency_rate:.0f} msg/s: "
              f"{'met' if latency['p50'] <= 1.0 else 'NOT met'} (p50={latency['p50']:.3f} s)")

        # pandas on every message Spark processed (its state saw them all), with the query
        # stopped: Spark idles.
        payloads = [p for result in results for p in result.payloads]
        console.print(f"[bold]pandas[/] on the run's {len(payloads):,} messages")
        window = pd.Timedelta(args.window).total_seconds()
        begin = time.perf_counter()
        ours = pandas_stats(payloads, window, pd.Timedelta(args.slide).total_seconds())
        pandas_s = time.perf_counter() - begin
        pandas_per_s = len(payloads) / pandas_s
        print(compare(sink, ours, window))
        spark_per_s = results[-1].figures["spark_per_s"]
        print(f"messages={len(payloads)} pandas_s={pandas_s:.2f} "
              f"pandas_per_s={pandas_per_s:.0f} spark_per_s={spark_per_s:.0f} "
              f"(Spark: messages per second of batch execution, throughput phase)")
        print(f"ratio={spark_per_s / pandas_per_s:.4f}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: broker, gateways, Spark and temporary files cleaned up",
              file=sys.stderr)
        sys.exit(130)
