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

On a standalone cluster (`spark://host:port`, workloads.spark.standalone), executors are other
processes, perhaps on other hosts, and must connect back to the driver: `cluster_conf` gives
the driver's address and ports (`spark.driver.host`, `spark.driver.bindAddress`,
`spark.driver.port`, `spark.blockManager.port`: in a container, the address others reach and
the one it binds differ, and the ports must be ones the network lets through) and the
executors' size, which must fit a worker (an executor asking more memory than any worker has
is never launched: the application waits for good).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from workloads.spark.jvm import jvm_options

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
    DEFAULTS and the JVM options of workloads.spark.jvm, overridden by `conf`.

    Spark keeps one session per process: a second call returns the first session, with only
    its runtime (SQL) settings changed.
    """
    # Python workers otherwise start whatever "python3" is on PATH, which may lack pandas and
    # pyarrow; an explicit PYSPARK_PYTHON (a cluster's interpreter) still wins.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    # The JVMs' options (workloads.spark.jvm): the driver's must be given before it starts,
    # which is at this process's first session.
    options = jvm_options()
    jvm = {f"spark.{side}.extraJavaOptions": options
           for side in ("driver", "executor")} if options else {}
    for key, value in (DEFAULTS | jvm | dict(conf or {})).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


# local, local[4], local[*], local[4,2] (with task retries), local-cluster[...]
_LOCAL = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$|^local-cluster\[\d+,\d+,\d+\]$")
_SPARK = re.compile(r"^spark://([^,/:]+:\d+)(,[^,/:]+:\d+)*$")
# The least memory Spark 4 starts an executor with (its reserved 300 MiB x 1.5).
MIN_EXECUTOR_MEMORY_MB = 450
MASTER_CONNECT_S = 5.0


def master_hosts(master: str) -> list[tuple[str, int]]:
    """The (host, port) of each master in a `spark://h1:p1,h2:p2` URL; [] for a local master.
    Anything else (yarn, k8s, a typo) is refused with the URL in the message."""
    if _LOCAL.match(master):
        return []
    if not _SPARK.match(master):
        raise ValueError(f"Spark master {master!r}: foglab runs 'local[N]' or a standalone "
                         "cluster 'spark://host:port' (standby masters: "
                         "'spark://h1:p1,h2:p2')")
    hosts = []
    for entry in master.removeprefix("spark://").split(","):
        host, _, port = entry.rpartition(":")
        if not 0 < int(port) < 65536:
            raise ValueError(f"Spark master {master!r}: port {port} is out of range")
        hosts.append((host, int(port)))
    return hosts


def check_master(master: str, timeout: float = MASTER_CONNECT_S) -> None:
    """Refuse at once a cluster master no TCP connection reaches: Spark's own client retries
    for a minute before it gives up. A local master passes."""
    failures = []
    for host, port in master_hosts(master):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as error:
            failures.append(f"{host}:{port}: {error}")
    if failures:
        raise ConnectionError(f"Spark master {master!r} does not answer ({'; '.join(failures)})"
                              ": is the standalone cluster up (workloads.spark.standalone)?")


def driver_address(master: str) -> str:
    """The local address this host reaches the (first) master from: the one executors, which
    the master's workers run, can reach the driver at (no packet is sent)."""
    host, port = master_hosts(master)[0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((socket.gethostbyname(host), port))
        return probe.getsockname()[0]


def _megabytes(size: str) -> int:
    match = re.fullmatch(r"(\d+)([kmgt]?)b?", size.strip().lower())
    if not match:
        raise ValueError(f"executor memory {size!r}: expected a size like '512m' or '2g'")
    scale = {"k": 1 / 1024, "": 1 / 2**20, "m": 1, "g": 1024, "t": 2**20}[match[2]]
    return int(int(match[1]) * scale)


def cluster_conf(master: str, driver_host: str | None = None, bind_address: str = "0.0.0.0",
                 driver_port: int = 0, block_manager_port: int = 0, executor_cores: int = 1,
                 executor_memory: str = "512m",
                 shuffle_partitions: int | None = None) -> dict[str, str]:
    """Spark's settings for a driver on `master`: none for a local master.

    `driver_host`: where executors reach the driver (default: `driver_address`, this host's
    address towards the master); `bind_address`: what the driver listens on (in a container
    its own interface; all of them by default); `driver_port`, `block_manager_port`: fixed
    ports (0: any free one, fine when nothing filters the traffic). Executors get
    `executor_cores` and `executor_memory` each (at most a worker's SPARK_WORKER_MEMORY), and
    stateful stages `shuffle_partitions` tasks (default: DEFAULTS' one).
    """
    if not master_hosts(master):
        return {}
    if _megabytes(executor_memory) < MIN_EXECUTOR_MEMORY_MB:
        raise ValueError(f"executor memory {executor_memory!r}: Spark starts no executor "
                         f"below {MIN_EXECUTOR_MEMORY_MB}m")
    for name, port in (("driver_port", driver_port), ("block_manager_port", block_manager_port)):
        if not 0 <= port < 65536:
            raise ValueError(f"{name} {port} is not a port (0 for any free one)")
    conf = {"spark.driver.host": driver_host or driver_address(master),
            "spark.driver.bindAddress": bind_address,
            "spark.driver.port": str(driver_port),
            "spark.blockManager.port": str(block_manager_port),
            "spark.executor.cores": str(executor_cores),
            "spark.executor.memory": executor_memory}
    if shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    return conf
