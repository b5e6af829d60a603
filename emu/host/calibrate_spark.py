"""`foglab calibrate`'s Spark measure: the job a cloud VM runs for an `engine: spark` operator,
read while the host publishes in spans at a low and a high rate, gives the CPU per
micro-batch and per message (emu.host.calibrate's step 4)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from emu.host.calibrate_plan import SIZE, CalibrationFailed, Plan, Progress
from emu.images import PROJECT_ROOT
from workloads.calibration import Spark

SPARK_RATES = (5.0, 50.0)  # messages per second of the low and the high spans
SPARK_TRIGGER_S = 1.0  # workloads.spark.job's default, as the emulation runs it
SPARK_START_S = 300.0  # the emulation's own wait for a job's first batch


@dataclass
class SparkSpan:
    """One span of the Spark measure: CPU seconds, batches finished, messages read."""

    cpu: float
    batches: int
    messages: int


def spark_costs(spans: list[SparkSpan]) -> tuple[float, float]:
    """(CPU per batch, CPU per message) that best explain the spans' CPU (least squares over
    cpu = batches x batch + messages x message, both at least 0): spans at two rates tell
    the fixed part from the per-message one."""
    import numpy as np

    a = np.array([[span.batches, span.messages] for span in spans], dtype=float)
    b = np.array([span.cpu for span in spans], dtype=float)
    if not (a[:, 0] > 0).any():
        raise CalibrationFailed("the Spark job finished no micro-batch while it was measured")
    (batch, message), *_ = np.linalg.lstsq(a, b, rcond=None)
    if message < 0:  # no per-message part to be seen: all of it per batch
        batch, message = float(b.sum() / a[:, 0].sum()), 0.0
    elif batch < 0:
        batch, message = 0.0, float(b.sum() / max(a[:, 1].sum(), 1.0))
    return float(batch), float(message)


def _tree_cpu(process) -> float:
    """CPU seconds of a process and its descendants (ended ones its parent waited for too)."""
    import psutil

    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = each.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def _progress_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            lines.append(json.loads(line))
    return lines


def measure_spark(broker: str, plan: Plan, tell: Progress, app: str = "stats") -> Spark:
    """The Spark job's CPU per micro-batch and per message (see the module's docstring, 4),
    reading from `broker` (host:port) natively on the host; the job and its folder are
    removed at the end, whatever happens."""
    import tempfile

    import psutil

    from emu.agent.config import DriverConfig
    from emu.agent.drivers import Driver
    from emu.agent.mqtt import new_client
    from emu.agent.protocol import Envelope
    from emu.agent.spark import unblock_stop_signals

    topic = f"calibrate/spark/{secrets.token_hex(3)}"
    driver = Driver(DriverConfig("city", [f"sensor-{i}" for i in range(50)], 1.0, size=SIZE),
                    "calibrate", "0")
    environment = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT))
    spans: list[SparkSpan] = []
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="foglab-spark-")))
        log = stack.enter_context((work / "job.log").open("wb"))
        job = subprocess.Popen(
            [sys.executable, "-m", "workloads.spark.job", "--app", app, "--mqtt", broker,
             "--reads", f"{topic}/#", "--writes", f"{topic}-out", "--work", str(work / "job"),
             "--master", "local[2]", "--trigger", str(SPARK_TRIGGER_S)],
            stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=PROJECT_ROOT,
            preexec_fn=unblock_stop_signals)
        stack.callback(_end, job)
        tell("spark: starting the job", 0, 1)
        deadline = time.monotonic() + SPARK_START_S
        while not (work / "job" / "started").exists():
            if job.poll() is not None or time.monotonic() > deadline:
                tail = (work / "job.log").read_text(errors="replace")[-500:]
                raise CalibrationFailed(f"the Spark job did not run a batch within "
                                        f"{SPARK_START_S:.0f} s: {tail}")
            time.sleep(0.5)
        host, port = broker.rsplit(":", 1)
        client = new_client(f"calibrate-spark-{secrets.token_hex(3)}")
        client.connect(host, int(port), keepalive=30)
        client.loop_start()
        stack.callback(client.loop_stop)
        stack.callback(client.disconnect)
        process = psutil.Process(job.pid)
        progress = work / "job" / "progress.jsonl"
        sent = 0
        for index in range(plan.spark_spans):
            rate = SPARK_RATES[index % 2]
            tell(f"spark: {rate:g}/s", index, plan.spark_spans)
            batches, cpu = len(_progress_lines(progress)), _tree_cpu(process)
            read = _read(progress)
            start = time.monotonic()
            for k in range(int(rate * plan.spark_seconds)):
                pause = start + k / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                device = driver.devices[sent % len(driver.devices)]
                body = driver.body(device, time.time())
                client.publish(f"{topic}/calibrate",
                               Envelope(sent, "city", device.name, time.time(), 0, body).encode())
                sent += 1
            # The span's last messages into its batches: one trigger and its batch's time.
            time.sleep(2 * SPARK_TRIGGER_S)
            lines = _progress_lines(progress)
            span = SparkSpan(_tree_cpu(process) - cpu, len(lines) - batches,
                             _read(progress) - read)
            spans.append(span)
            tell(f"spark: {rate:g}/s: {span.batches} batches, {span.messages} messages, "
                 f"{span.cpu:.2f} s CPU", index + 1, plan.spark_spans)
        tell("spark", plan.spark_spans, plan.spark_spans)
    batch, message = spark_costs(spans)
    return Spark(batch=max(batch, 1e-6), message=message, trigger=SPARK_TRIGGER_S, app=app)


def _read(progress: Path) -> int:
    """Messages the job's source has handed to Spark so far (its progress' `read`)."""
    reads = [line.get("read") for line in _progress_lines(progress) if line.get("read")]
    return int(reads[-1]) if reads else 0


def _end(job: subprocess.Popen) -> None:
    """Stop the job (SIGTERM stops its query cleanly), killed if it lingers."""
    if job.poll() is None:
        job.terminate()
        try:
            job.wait(30)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
