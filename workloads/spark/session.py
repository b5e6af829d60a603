"""A SparkSession with foglab's defaults: quiet, RocksDB state, Arrow; local or on a cluster;
and Spark's timers at a time dilation (`dilated_conf`).

Time dilation K (emu.agent.timebase): emulated time runs K times slower than the host's clock,
and Spark runs on the host's. Its timers that stand for the emulated system's behaviour are
scaled by K so they keep their emulated values: the trigger interval (workloads.spark.job), the
network timeout (which askTimeout and the block managers' timeouts default to), the executors'
heartbeat, the state store's maintenance, and the no-data progress interval. Event-time windows
and watermarks are not: the agents stamp messages in emulated time already.

What cannot be scaled: the JVM's pauses (garbage collection, JIT compilation) and Spark's own
work per micro-batch (planning, scheduling, Python workers), which are host work and so take
1/K of their time in emulated time; the Python worker's hard-coded 10 s to connect back and
other fixed waits inside Spark; the kernel's TCP timers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHECKPOINT_FILE_MANAGER = ("org.apache.spark.sql.execution.streaming.checkpointing."
                           "FileSystemBasedCheckpointFileManager")

DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Every stateful stage runs one task (and one state store) per shuffle partition and batch:
    # Spark's 200 would cost more than the work on a few cores. One, not two: the branches of
    # a query (STATS' windows and its Python state) still run side by side, and on two cores a
    # warm STATS query took 812 ms of wall and 1.23 s of CPU per batch of 1,000 messages with
    # one partition, against 945 ms and 1.46 s with two. A cluster sets its own (`conf`).
    "spark.sql.shuffle.partitions": "1",
    # transformWithStateInPandas runs only on RocksDB; the default HDFS-backed provider fails it.
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    # Commit only the keys a batch changed, not a snapshot of every key.
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # Checkpoint files through Hadoop's FileSystem API, not FileContext: on a local disk,
    # FileContext's rename starts a `readlink` process per file (Hadoop without its native
    # library), dozens per micro-batch of STATS. Both write a temporary file and rename it,
    # which is atomic on local disks and HDFS alike.
    "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Event times are epoch seconds: UTC keeps windows and pandas timestamps free of local shifts.
    "spark.sql.session.timeZone": "UTC",
}


# Spark's timers that dilation scales, and their defaults (ms).
DILATED_TIMERS_MS = {
    "spark.network.timeout": 120_000,
    "spark.executor.heartbeatInterval": 10_000,
    "spark.sql.streaming.stateStore.maintenanceInterval": 60_000,
    "spark.sql.streaming.noDataProgressEventInterval": 10_000,
}


def dilated_conf(dilation: float) -> dict[str, str]:
    """Spark's settings at a dilation K: each of DILATED_TIMERS_MS times K; none at K = 1.
    The heartbeat stays below the network timeout, as Spark requires, since both scale."""
    if not dilation >= 1:
        raise ValueError(f"a dilation is a number >= 1, not {dilation!r}")
    if dilation == 1:
        return {}
    return {key: f"{round(ms * dilation)}ms" for key, ms in DILATED_TIMERS_MS.items()}


def spark_session(master: str = "local[*]", app_name: str = "foglab",
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """The process's SparkSession on `master` ("local[2]", "spark://host:7077", ...), built with
    DEFAULTS overridden by `conf`.

    Spark keeps one session per process: a second call returns the first session, with only
    its runtime (SQL) settings changed.
    """
    # Python workers otherwise start whatever "python3" is on PATH, which may lack pandas and
    # pyarrow; an explicit PYSPARK_PYTHON (a cluster's interpreter) still wins.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in (DEFAULTS | dict(conf or {})).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
