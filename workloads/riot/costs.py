"""Calibrated CPU cost per message of each RIoTBench task, in seconds of one reference vCPU."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

SHIPPED = Path(__file__).with_name("costs.json")

# Process seconds `reference_loop` took on the reference host, the one core that defines the
# profiles' speed 1.0 ("one 2020s cloud vCPU"): the host that measured the shipped costs.json
# (its facts are stored there). The median of three medians of 15 runs (26.4 to 27.6 ms).
REFERENCE_LOOP_SECONDS = 0.0265


def reference_loop() -> float:
    """A fixed pure-Python workload: 200 000 rounds of a dict read and write, float
    arithmetic and a method call, like the tasks' per-message work. Returns a checksum so
    nothing can be skipped."""
    last: dict[int, float] = {}
    total = 0.0
    for i in range(200_000):
        key = i & 255
        value = last.get(key, 0.0) * 0.5 + i * 1e-3
        last[key] = value
        total += value
    return total


def reference_speed(repetitions: int = 5) -> float:
    """This host's single-core speed relative to the reference host: above 1 is faster.

    Measured in process time, like the task costs, as the median of `repetitions` runs of
    `reference_loop`, because other processes on a shared host make single runs noisy.
    """
    return REFERENCE_LOOP_SECONDS / loop_seconds(repetitions)


def loop_seconds(repetitions: int = 5) -> float:
    """The median process time of `reference_loop` on this host."""
    times = []
    for _ in range(repetitions):
        start = time.process_time()
        reference_loop()
        times.append(time.process_time() - start)
    return statistics.median(times)


def calibrate(bench_table: pd.DataFrame, speed: float | None = None) -> dict[str, float]:
    """Task -> cost in reference-vCPU seconds per message, from a `bench_tasks` table.

    The cost is the median CPU per message over the table's rows of a task (one per
    repetition), times the speed of the host that measured it (this host's, measured, when
    None): a host of speed 2.0 does a reference second's work in half a second, so its
    measured seconds double.
    """
    speed = reference_speed() if speed is None else speed
    medians = bench_table.groupby("task", sort=True)["cpu_per_message"].median()
    return {task: float(seconds) * speed for task, seconds in medians.items()}


def task_cost(task_name: str,
              table: str | Path | Mapping[str, float] | None = None) -> float | None:
    """The calibrated cost per message of `task_name` (reference-vCPU seconds), or None when
    the table does not know it. The table is the shipped costs.json by default, else a
    mapping of task -> cost or the path of a costs file written by `write_costs`."""
    if table is None:
        costs: Mapping[str, float] = _shipped_costs()
    elif isinstance(table, Mapping):
        costs = table
    else:
        costs = load_costs(table)
    return costs.get(task_name)


def load_costs(path: str | Path) -> dict[str, float]:
    """Task -> cost from a costs file written by `write_costs`."""
    return {task: float(cost) for task, cost in json.loads(Path(path).read_text())["costs"].items()}


def write_costs(costs: Mapping[str, float], path: str | Path, speed: float,
                bench: Mapping[str, Any]) -> Path:
    """A costs file: the costs with the host, date, speed and bench settings that made them."""
    document = {
        "unit": "CPU seconds per message on one reference vCPU (profile speed 1.0)",
        "measured": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": host_facts(),
        "speed": speed,
        "loop_seconds": loop_seconds(),
        "bench": dict(bench),
        "costs": dict(sorted(costs.items())),
    }
    path = Path(path)
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path


def host_facts() -> dict[str, Any]:
    """What identifies the CPU that measured a table."""
    return {"system": platform.system(), "release": platform.release(),
            "machine": platform.machine(), "cpu": _cpu_model(), "cpus": os.cpu_count(),
            "python": platform.python_version()}


def measure(path: str | Path = SHIPPED, duration: float = 0.5, repetitions: int = 3,
            speed: float | None = None, seed: int = 0) -> Path:
    """Bench every task `repetitions` times and write the calibrated costs to `path`."""
    # Imported here so that task_cost needs the standard library only (simulator, gateways).
    import pandas as pd

    from workloads.riot.bench import bench_tasks

    speed = reference_speed() if speed is None else speed
    table = pd.concat([bench_tasks(duration=duration, seed=seed) for _ in range(repetitions)])
    bench = {"dataset": "city", "duration": duration, "repetitions": repetitions, "seed": seed}
    return write_costs(calibrate(table, speed), path, speed, bench)


@cache
def _shipped_costs() -> dict[str, float]:
    return load_costs(SHIPPED)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass  # not Linux: platform.processor() is the best there is
    return platform.processor()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Measure RIoTBench task costs on this host.")
    parser.add_argument("--out", type=Path, default=SHIPPED)
    parser.add_argument("--duration", type=float, default=0.5, help="seconds per task and run")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--speed", type=float, help="this host's speed (default: measured)")
    arguments = parser.parse_args()
    print(measure(arguments.out, arguments.duration, arguments.repetitions, arguments.speed))
