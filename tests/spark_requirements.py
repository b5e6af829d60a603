"""What the tests of Spark with a real broker need beyond Python's packages, in one place: the
folders' conftests skip their tests, with the reason, when this host lacks one."""

from __future__ import annotations

import importlib.util
import os
import shutil

from workloads.spark.local_broker import find_mosquitto


def missing() -> str | None:
    """Why Spark's tests with Mosquitto cannot run here, or None."""
    if find_mosquitto() is None:
        return "mosquitto is not installed (Debian package 'mosquitto')"
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        return "java is not installed (Debian package 'openjdk-17-jre-headless')"
    for module in ("pyspark", "paho", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[spark]')"
    return None
