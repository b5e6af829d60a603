"""What `foglab calibrate` measures and for how long (its Plan, FULL and QUICK), how it tells its
progress, and the error a measure that could not be taken raises."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# (what is being measured, done, total): a bar per step.
Progress = Callable[[str, float, float], None]

SIZE = 180  # bytes: workloads/city-sensors.yaml's readings


class CalibrationFailed(RuntimeError):
    """A measure could not be taken (after cleaning up): what and why."""


@dataclass(frozen=True)
class Plan:
    """How long and how often each measure runs."""

    duration: float      # per task and repetition, seconds
    warmup: float
    repetitions: int
    driver_seconds: float
    idle_seconds: float
    paced_seconds: float
    rate: float          # paced messages per second
    burst: int           # messages of the QoS 0 burst
    qos1: int            # messages of the QoS 1 burst
    samples: int         # round trips per path
    # Spans of the Spark measure, alternately at the low and the high rate: short and many,
    # since the JVM's CPU per batch falls as it ages (its JIT), which longer spans would
    # take for a difference between the rates.
    spark_seconds: float = 12.0
    spark_spans: int = 6

    def measure_arguments(self) -> list[str]:
        return ["--duration", str(self.duration), "--warmup", str(self.warmup),
                "--repetitions", str(self.repetitions), "--driver-seconds",
                str(self.driver_seconds), "--idle-seconds", str(self.idle_seconds)]


FULL = Plan(duration=1.0, warmup=0.25, repetitions=3, driver_seconds=10.0, idle_seconds=2.0,
            paced_seconds=4.0, rate=500.0, burst=30_000, qos1=5_000, samples=200)
QUICK = Plan(duration=0.15, warmup=0.05, repetitions=2, driver_seconds=2.0, idle_seconds=0.5,
             paced_seconds=1.0, rate=500.0, burst=3_000, qos1=1_000, samples=40,
             spark_seconds=10.0, spark_spans=2)
