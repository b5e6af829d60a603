"""The Java options of foglab's Spark JVMs (drivers, executors, a standalone cluster's master
and workers), from one environment variable, FOGLAB_SPARK_JVM_OPTIONS; none by default.

The emulation hands the host's value down to every node's agent (emu.engines.docker.engine), so a
cloud VM's Spark job starts with the options the host was given.

What it is for: a JVM that lives a few minutes at low rates spends most of its CPU on starting
and on the JIT compiler's second tier (C2), which pays off only in a long run. On a two-core
host, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" (the first tier only, one GC thread):
- a session's start and two small queries took 20 cores-s of the host's CPU against 31
  (medians of three, idle host);
- tests/spark_apps/test_migration.py (four job processes and the test's session) ran in
  128 s and 215 cores-s against 155 s and 288 (one run each, load 0.6 and 2.9 before);
- but a warm STATS query at 1,000 msg/s batched 3.4 s against 1.2 s (latency p50 5.0 s
  against 1.9 s) and drained 1,270 msg/s against 2,434 (benchmarks/spark_stats.py with a
  60 s prime): the first tier's code is slower once the second tier's would have been ready.
So it suits short runs at low rates (the tests set it: tests/conftest.py) and not a benchmark
of Spark's throughput, which is why it is not the default.
"""

from __future__ import annotations

import os

JVM_OPTIONS_VARIABLE = "FOGLAB_SPARK_JVM_OPTIONS"
SHORT_RUN_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def jvm_options() -> str:
    """The options FOGLAB_SPARK_JVM_OPTIONS gives ("" when unset)."""
    return os.environ.get(JVM_OPTIONS_VARIABLE, "").strip()
