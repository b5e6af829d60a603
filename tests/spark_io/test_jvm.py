"""The Java options of FOGLAB_SPARK_JVM_OPTIONS reach the driver's JVM itself (not only its
conf): the tests set the first JIT tier only (tests/conftest.py, workloads.spark.jvm)."""

from __future__ import annotations

import os

from workloads.spark.jvm import JVM_OPTIONS_VARIABLE, jvm_options


def test_the_sessions_jvm_runs_with_the_options_of_the_environment(spark) -> None:
    options = jvm_options()
    assert options == os.environ[JVM_OPTIONS_VARIABLE] != ""
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert set(options.split()) <= set(arguments), arguments
    # Spark puts its own module options before them.
    assert spark.sparkContext.getConf().get("spark.executor.extraJavaOptions").endswith(options)
