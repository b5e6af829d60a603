"""The MQTT streaming source for Spark (format "mqtt"): a replayable reader over a durable journal.

Offsets
-------
Spark replays a micro-batch after a failure by asking the source for the same offset range
again; MQTT cannot replay, so the source keeps its own durable buffer, the *journal* (a
directory given by the `journal` option). An offset counts messages: `{"offset": n}` means
"the first n messages this journal ever received".

- Journal before acknowledgement. Each message is appended to `active.log` inside paho's
  `on_message` callback, and paho sends the QoS 1 PUBACK only after that callback returns. So a
  message the broker considers delivered is already on disk, and a message not on disk is still
  the broker's (it resends it to the persistent session). A buffer in memory saved at `stop()`
  lost up to 800 of 30,000 messages: Spark may kill the reader's process before `stop()` ends.
- Sealed segments. `latestOffset` renames the active log aside and turns it into an immutable
  Arrow IPC file named by its offset range (`000000000000-000000005000.arrow`); that range is
  what Spark writes to its offset log. `read()` runs in another process (an executor's Python
  worker), which memory-maps the segment: no messages cross processes, and a replayed batch
  reads exactly the bytes the first attempt read. `commit(end)` deletes segments wholly before
  `end`, but keeps the newest, whose name carries the offset count across restarts.
- Persistent session. The reader connects with a fixed client id and clean session off, so
  the broker queues messages for it while the query is down. One process at a time owns the
  journal and the session (an flock on `journal/lock`): a restarted query waits for the old
  reader process to exit instead of fighting it for the client id.

- Read limit. With the option `maxRecordsPerTrigger` (N), `latestOffset` still seals all it
  has, but returns at most `start + N`: a batch reads part of a segment, or of several, and the
  rest stays journaled for the next batches (Spark's `ReadMaxRows`, the source's default read
  limit). So a backlog (a restart, a burst, Spark falling behind) is worked off in bounded
  batches, whose state, memory and latency stay those of N messages, instead of one batch of
  all of it. Offsets stay message counts and segments stay immutable, so a replayed batch
  reads the same range; `commit` trims only segments wholly before the committed end.

- Stop for a move. With the options `stop_request` and `stop_record` (two paths), the reader
  checks at each `latestOffset` (the start of a trigger, after the previous batch committed and
  before the next is planned) whether `stop_request` exists. If so it pauses: stops its
  client's network loop, then disconnects (so the acknowledgement of every journaled message
  leaves before the DISCONNECT, and the broker holds all later input in the session), seals
  and closes the journal, writes `stop_record` (JSON: `paused_at`, the `committed` offset the
  query's checkpoint has processed, the journal's `journal_end`, `client_id`, `topic`) and
  fails the query with `StoppedForMove`. Failing in `latestOffset` is what makes the stop land
  on a batch boundary: Spark's own `stop()` interrupts a running batch, whose output a sink
  without transactions may have published in part. A query on another host continues from the
  copied journal with the same `client_id` (the session is taken over), either on the copied
  checkpoint or on a new one whose `start_offset` is `committed`
  (`workloads.spark.migration`).

- Partitions. A batch reads one input partition per segment it spans (usually one): on one
  core that is all there is. With the option `partitions` (N), a batch's range is cut into up
  to N slices of about equal size (each at least `_MIN_SLICE` messages), so N executors parse
  it side by side on a cluster. A slice is offsets in a segment, as before: a replay reads the
  same rows whatever N is.

- Executors are other processes. `read()` opens a segment by its path (the journal's absolute
  path on the driver's host): every executor must see the journal at that path. On one host
  (or one container) it does; on several, the journal must be on a file system all of them
  mount at the same path (NFS, as Spark's checkpoint must be anyway), or the executors must
  run beside the driver. The broker client, the journal's writer and its lock stay in the
  driver-side reader (`__getstate__` drops them from what travels).

What survives a restart from the checkpoint: journaled but unsealed messages (sealed when the
new reader opens the journal), sealed but uncommitted segments (replayed), messages queued by the
broker while no reader was connected, and messages received but not yet journaled (never
acknowledged, so resent). What does not: messages published before the session first existed
(call `open_session` before publishers start), QoS 0 messages published while the reader is down,
and anything if the journal directory or the broker's session is lost. A message journaled by
a process killed before its PUBACK left is resent and appears twice (MQTT QoS 1 is at least
once) with the DUP flag set: the writer drops a resent message that equals one of the last
`_RESENT_WINDOW` records of the journal (the broker resends only messages still in flight, at
most its in-flight limit), so such a message is journaled once. The journal
survives a killed process, not a host crash (it does not fsync). A journal belongs to one
checkpoint: a new checkpoint starts at offset 0, so it re-reads what a reused journal still keeps.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as mqtt
import pyarrow as pa
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from workloads.spark.login import login
from workloads.spark.mqtt_sink import MqttStreamWriter

SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("payload", BinaryType()),
        StructField("qos", IntegerType()),
        StructField("received", TimestampType()),
        StructField("offset", LongType()),
    ]
)
# What Spark expects back from read() for SCHEMA (it compares schemas before taking a batch).
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("payload", pa.binary()),
        ("qos", pa.int32()),
        ("received", pa.timestamp("us", tz="UTC")),
        ("offset", pa.int64()),
    ]
)

# A journal record: topic length, payload length, QoS, received (microseconds since the epoch).
_HEADER = struct.Struct("<IIBq")
_SEGMENT = re.compile(r"^(\d{12})-(\d{12})\.arrow$")
_SEALING = re.compile(r"^sealing-(\d{12})\.log$")
_LOCK_WAIT = 60.0  # seconds a restarted query waits for the previous reader process to exit
# How far back a resent (DUP) message is looked for: at least the broker's in-flight limit.
_RESENT_WINDOW = 1000
_CONNECT_WAIT = 10.0
_BATCH_ROWS = 10_000
_MIN_SLICE = 100  # messages: a smaller slice costs a task more than it saves


@dataclass
class Segment(InputPartition):
    """Offsets [start, end) of the sealed segment at `path`, whose first row is `first`."""

    path: str
    first: int
    start: int
    end: int


class Journal:
    """A journal directory read as sealed segments; stateless, so any process may use it."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def segments(self) -> list[tuple[int, int, Path]]:
        """(start, end, path) of each sealed segment, oldest first."""
        found = []
        for path in self.directory.glob("*.arrow"):
            match = _SEGMENT.match(path.name)
            if match:
                found.append((int(match[1]), int(match[2]), path))
        return sorted(found)

    def end(self) -> int:
        """The offset after the last sealed message."""
        segments = self.segments()
        return segments[-1][1] if segments else 0

    def partitions(self, start: int, end: int, slices: int = 1) -> list[Segment]:
        """The segments' rows in [start, end), cut into up to `slices` partitions of about
        equal size (none under _MIN_SLICE messages), never across a segment's end."""
        whole = [
            Segment(str(path), first, max(first, start), min(last, end))
            for first, last, path in self.segments()
            if first < end and last > start
        ]
        size = max(-(-(end - start) // max(slices, 1)), _MIN_SLICE)
        if slices <= 1 or end - start <= size:
            return whole
        return [Segment(part.path, part.first, low, min(low + size, part.end))
                for part in whole for low in range(part.start, part.end, size)]

    @staticmethod
    def read(segment: Segment) -> Iterator[pa.RecordBatch]:
        table = pa.ipc.open_file(pa.memory_map(segment.path)).read_all()
        rows = table.slice(segment.start - segment.first, segment.end - segment.start)
        yield from rows.to_batches(max_chunksize=_BATCH_ROWS)

    def trim(self, before: int) -> None:
        """Delete segments wholly before `before`, except the newest (it carries the count)."""
        for _, end, path in self.segments()[:-1]:
            if end <= before:
                path.unlink(missing_ok=True)


class JournalWriter:
    """The one appender of a journal: holds its lock, appends records, seals segments."""

    def __init__(self, journal: Journal, lock_wait: float = _LOCK_WAIT) -> None:
        self.journal = journal
        directory = journal.directory
        directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._acquire(lock_wait)
            self._recover()
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._recent = self._tail_digests()
        self._active = directory / "active.log"
        self._fd = os.open(self._active, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        # Appends come from paho's network thread, seals from Spark's calls.
        self._mutex = threading.Lock()
        self.failure: OSError | None = None

    def _acquire(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"journal {self.journal.directory} is held by another reader process (one "
                        f"query per journal; a stopped query's reader had {wait:.0f} s to exit)"
                    ) from None
                time.sleep(0.1)

    def _recover(self) -> None:
        """Seal what a killed process left: logs half sealed, then its active log."""
        directory = self.journal.directory
        for path in sorted(directory.glob("sealing-*.log")):
            match = _SEALING.match(path.name)
            if match:
                self._seal_file(path, int(match[1]))
        leftover = directory / "active.log"
        if leftover.exists():
            first = self.journal.end()
            sealing = directory / f"sealing-{first:012d}.log"
            leftover.rename(sealing)
            self._seal_file(sealing, first)

    def _tail_digests(self) -> set[bytes]:
        """Digests of the journal's last records: what a previous process may have journaled
        without its acknowledgement reaching the broker."""
        digests: set[bytes] = set()
        for _, _, path in reversed(self.journal.segments()):
            table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
            table = table.slice(max(0, table.num_rows - (_RESENT_WINDOW - len(digests))))
            for topic, payload in zip(table["topic"].to_pylist(), table["payload"].to_pylist(),
                                      strict=True):
                digests.add(_digest(topic, payload))
            if len(digests) >= _RESENT_WINDOW:
                break
        return digests

    def append(self, topic: str, payload: bytes, qos: int, resent: bool = False) -> None:
        if resent and self._recent and _digest(topic, payload) in self._recent:
            return  # journaled by the previous process, whose acknowledgement was lost
        encoded = topic.encode()
        record = _HEADER.pack(len(encoded), len(payload), qos, time.time_ns() // 1000)
        with self._mutex:
            try:
                # One write: a killed process leaves whole records, or one cut short at the end.
                os.write(self._fd, record + encoded + payload)
            except OSError as exc:
                # paho's thread dies of it without a word: the next seal() reports it to Spark.
                self.failure = exc
                raise

    def seal(self) -> int:
        """Seal the messages appended so far into a segment; return the journal's end."""
        if self.failure is not None:
            raise RuntimeError(f"journal {self.journal.directory} stopped") from self.failure
        first = self.journal.end()
        with self._mutex:
            if os.fstat(self._fd).st_size == 0:
                return first
            sealing = self.journal.directory / f"sealing-{first:012d}.log"
            self._active.rename(sealing)
            os.close(self._fd)
            self._fd = os.open(self._active, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._seal_file(sealing, first)

    def _seal_file(self, sealing: Path, first: int) -> int:
        # A segment starting at `first` means this log was sealed before a crash left it behind.
        done = [end for start, end, _ in self.journal.segments() if start == first]
        if done:
            sealing.unlink()
            return done[0]
        batch = _parse(sealing.read_bytes(), first)
        end = first + batch.num_rows
        if batch.num_rows:
            final = self.journal.directory / f"{first:012d}-{end:012d}.arrow"
            partial = final.with_suffix(".part")
            with pa.OSFile(str(partial), "wb") as sink, pa.ipc.new_file(sink, ARROW_SCHEMA) as out:
                out.write_batch(batch)
            partial.rename(final)  # atomic: readers see a whole segment or none
        sealing.unlink()
        return end

    def close(self) -> None:
        os.close(self._fd)
        os.close(self._lock_fd)  # releases the flock


def _digest(topic: str, payload: bytes) -> bytes:
    return hashlib.blake2b(topic.encode() + b"\0" + payload, digest_size=16).digest()


def _parse(data: bytes, first: int) -> pa.RecordBatch:
    topics: list[str] = []
    payloads: list[bytes] = []
    qos: list[int] = []
    received: list[int] = []
    pos, size, header = 0, len(data), _HEADER.size
    while pos + header <= size:
        topic_len, payload_len, q, t = _HEADER.unpack_from(data, pos)
        body = pos + header
        end = body + topic_len + payload_len
        if end > size:
            break  # cut short by a killed process: never acknowledged, so the broker resends it
        topics.append(data[body : body + topic_len].decode())
        payloads.append(data[body + topic_len : end])
        qos.append(q)
        received.append(t)
        pos = end
    columns = [
        pa.array(topics, pa.string()),
        pa.array(payloads, pa.binary()),
        pa.array(qos, pa.int32()),
        pa.array(received, pa.timestamp("us", tz="UTC")),
        pa.array(range(first, first + len(topics)), pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


class StoppedForMove(RuntimeError):
    """The reader paused at a batch boundary because its `stop_request` file appeared."""


def default_client_id(journal: str | Path) -> str:
    """One journal, one broker session: the default client id is derived from the path."""
    digest = hashlib.sha1(str(Path(journal).resolve()).encode()).hexdigest()[:12]
    return f"foglab-source-{digest}"


def _connect(
    host: str, port: int, client_id: str, topic: str, qos: int, journal: JournalWriter | None
) -> mqtt.Client:
    """A persistent-session client subscribed to `topic`, journaling what it receives."""
    client = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=False,
        protocol=mqtt.MQTTv311,
    )
    login(client)
    subscribed = threading.Event()
    refused: list[str] = []

    def on_connect(
        client: mqtt.Client,
        userdata: object,
        flags: mqtt.ConnectFlags,
        reason_code: ReasonCode,
        properties: Properties | None,
    ) -> None:
        if reason_code.is_failure:
            refused.append(str(reason_code))
            subscribed.set()
        else:
            # The broker keeps the subscription in the session; renewing it costs one packet.
            client.subscribe(topic, qos)

    def on_subscribe(
        client: mqtt.Client,
        userdata: object,
        mid: int,
        reason_codes: list[ReasonCode],
        properties: Properties | None,
    ) -> None:
        refused.extend(str(code) for code in reason_codes if code.is_failure)
        subscribed.set()

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    if journal is None:
        # Acknowledge nothing: what an existing session delivers now stays queued for the reader.
        client.manual_ack_set(True)
    else:
        client.on_message = lambda client, userdata, message: journal.append(
            message.topic, message.payload, message.qos, bool(message.dup)
        )
    client.connect(host, port, keepalive=30)
    client.loop_start()
    if not subscribed.wait(_CONNECT_WAIT) or refused:
        client.loop_stop()
        client.disconnect()
        raise ConnectionError(
            f"could not subscribe to {topic!r} at {host}:{port}: {refused or 'timed out'}"
        )
    return client


def open_session(host: str, port: int, topic: str, client_id: str, qos: int = 1) -> None:
    """Create the broker session a source will use, so it queues messages published from now on.

    Call it before publishers start when the query starts later than they do, and never while
    the query runs (it would take the session over). It acknowledges nothing it is sent, so
    calling it on an existing session loses no QoS 1 message.
    """
    client = _connect(host, port, client_id, topic, qos, journal=None)
    client.disconnect()
    client.loop_stop()


class MqttStreamReader(DataSourceStreamReader):
    """Subscribes on the driver side, journals messages, serves sealed segments to executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        missing = [key for key in ("topic", "journal") if not options.get(key)]
        if missing:
            raise ValueError(f"the mqtt source needs option(s) {', '.join(missing)}")
        self.host = options.get("host", "127.0.0.1")
        self.port = int(options.get("port", 1883))
        self.topic = options["topic"]
        self.qos = int(options.get("qos", 1))
        if self.qos not in (0, 1):
            # paho acknowledges a QoS 2 PUBLISH (PUBREC) before the callback runs and keeps the
            # message in memory until PUBREL: a killed reader would lose it.
            raise ValueError(f"the mqtt source supports qos 0 and 1, not {self.qos}")
        self.journal = Journal(Path(options["journal"]).resolve())
        limit = options.get("maxRecordsPerTrigger")
        self.max_records = int(limit) if limit else None
        if self.max_records is not None and self.max_records < 1:
            raise ValueError(f"maxRecordsPerTrigger must be at least 1, not {limit}")
        self.client_id = options.get("client_id") or default_client_id(self.journal.directory)
        self.slices = int(options.get("partitions", 1))
        if self.slices < 1:
            raise ValueError(f"partitions must be at least 1, not {self.slices}")
        self.start_offset = int(options.get("start_offset", 0))
        if self.start_offset < 0:
            raise ValueError(f"start_offset must be at least 0, not {self.start_offset}")
        stop = [options.get(key) for key in ("stop_request", "stop_record")]
        if any(stop) and not all(stop):
            raise ValueError("the mqtt source needs both stop_request and stop_record, or neither")
        self.stop_request = Path(stop[0]) if stop[0] else None
        self.stop_record = Path(stop[1]) if stop[1] else None
        self._writer: JournalWriter | None = None
        self._client: mqtt.Client | None = None

    def __getstate__(self) -> dict:
        # Executors only read segments; a client, a lock or a file descriptor cannot travel.
        state = self.__dict__.copy()
        state["_writer"] = None
        state["_client"] = None
        return state

    @property
    def connected(self) -> bool:
        return self._client is not None

    def _open(self) -> JournalWriter:
        # Lazily, and only from the driver-side offset calls: Spark also builds readers in
        # planning and executor processes, and a second client with this id would take over
        # the session.
        if self._writer is None:
            writer = JournalWriter(self.journal)
            try:
                self._client = _connect(
                    self.host, self.port, self.client_id, self.topic, self.qos, writer
                )
            except BaseException:
                writer.close()
                raise
            self._writer = writer
        return self._writer

    def initialOffset(self) -> dict:
        # Spark asks again when it replays batch 0 after a restart, so the answer is a constant.
        return {"offset": self.start_offset}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_records is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.max_records)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if self.stop_request is not None and self.stop_request.exists():
            self._stop_for_move(start["offset"])
        end = self._open().seal()
        if end < start["offset"]:
            raise RuntimeError(
                f"journal {self.journal.directory} ends at offset {end}, before the checkpoint's "
                f"{start['offset']}: it is not the journal this checkpoint was written with"
            )
        # Spark may pass ReadAllAvailable when its trigger must read everything there is; that
        # wins over the option, as the API requires.
        if isinstance(limit, ReadMaxRows):
            end = min(end, start["offset"] + limit.max_rows)
        return {"offset": end}

    def reportLatestOffset(self) -> dict | None:
        # What is journaled and sealed (a backlog shows as latestOffset beyond endOffset in the
        # query's progress); None before the reader has opened the journal.
        return {"offset": self.journal.end()} if self._writer is not None else None

    def partitions(self, start: dict, end: dict) -> list[Segment]:
        return self.journal.partitions(start["offset"], end["offset"], self.slices)

    def read(self, partition: Segment) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return Journal.read(partition)

    def commit(self, end: dict) -> None:
        self.journal.trim(end["offset"])

    def _stop_for_move(self, committed: int) -> None:
        writer = self._open()  # a query asked to stop before its first trigger still pauses
        paused_at = time.time()
        client = self._client
        assert client is not None
        # Loop first: a message being journaled now gets its PUBACK written by disconnect()
        # ahead of the DISCONNECT; what paho had not yet read stays the broker's.
        client.loop_stop()
        client.disconnect()
        self._client = None
        end = writer.seal()
        writer.close()
        self._writer = None
        record = {"paused_at": paused_at, "committed": committed, "journal_end": end,
                  "client_id": self.client_id, "topic": self.topic,
                  "journal": str(self.journal.directory)}
        assert self.stop_record is not None
        partial = self.stop_record.with_name(self.stop_record.name + ".part")
        partial.write_text(json.dumps(record))
        partial.rename(self.stop_record)  # atomic: a watcher reads a whole record or none
        raise StoppedForMove(f"the mqtt source stopped at offset {committed} for a move "
                             f"({self.stop_request} exists); record in {self.stop_record}")

    def stop(self) -> None:
        if self._client is not None:
            self._client.disconnect()
            self._client.loop_stop()
            self._client = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class MqttDataSource(DataSource):
    """Format "mqtt": a streaming source (see the module docstring) and a streaming sink.

    Source options: host, port, topic (a filter), qos (0 or 1, default 1), client_id (default
    derived from the journal path), journal (a directory, required), maxRecordsPerTrigger (the
    most messages one micro-batch reads; default: all that are journaled), start_offset (where
    a new checkpoint starts in the journal; default 0), partitions (the most input partitions
    a batch is cut into; default 1), stop_request and stop_record (files:
    stop at a batch boundary for a move, see the module docstring).
    Sink options: host, port, topic (or a `topic` column), qos; see `mqtt_sink`.

        spark.dataSource.register(MqttDataSource)
        stream = spark.readStream.format("mqtt").option("topic", "city/#")
        stream.option("journal", "/var/lib/foglab/journal").load()
    """

    @classmethod
    def name(cls) -> str:
        return "mqtt"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MqttStreamReader(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return MqttStreamWriter(self.options, schema)
