"""Micro-benchmark of the RIoTBench tasks on one core: throughput, latency, CPU and memory."""

from __future__ import annotations

import csv
import gc
import io
import itertools
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workloads.riot.datasets import (
    CITY,
    DATASETS,
    GENERATORS,
    city_sensor_metadata,
    write_sample_csv,
)
from workloads.riot.models import train_models
from workloads.riot.senml import Reading, encode_senml, to_row
from workloads.riot.tasks import TASKS, Message, Task, make_task

if TYPE_CHECKING:
    # Only the tables and the plot need these: the gateway image, which runs `cpu_costs`
    # for `foglab calibrate`, has numpy but neither pandas nor matplotlib.
    import pandas as pd
    from matplotlib.figure import Figure

# Called after each task with (task name, tasks done, tasks in all), e.g. to advance a bar.
Progress = Callable[[str, int, int], None]

MODEL_TASKS = {"decision_tree_classify": "decision_tree",
               "linear_regression_predict": "linear_regression"}
# The value the sliding regression forecasts in each dataset.
FORECAST_FIELD = {"city": "temperature", "taxi": "fare_amount"}
# Per-message timers cost about 0.1 us, a tenth of the fastest task, so throughput is timed
# over batches and the per-message latencies in a separate pass.
BATCH = 128


def bench_tasks(names: Sequence[str] | None = None, duration: float = 1.0,
                warmup: float = 0.25, rows: int = 2000, dataset: str = "city", seed: int = 0,
                progress: Progress | None = None) -> pd.DataFrame:
    """Measure each task (all registered ones by default) on `rows` generated inputs.

    Per task: `warmup` s of processing, then `duration` s of batches for throughput (msg/s)
    and CPU per message (s, process time), then one timed pass over the inputs for the
    latency percentiles (s) and measured selectivity, then one pass under tracemalloc on a
    fresh instance for the peak Python memory it allocates and its snapshot size (bytes).
    Inputs cycle, so stateful tasks see the stream start over; their cost does not depend
    on time order. One row per task.
    """
    import pandas as pd

    names = _checked(names, dataset)
    readings = GENERATORS[dataset](rows=rows, seed=seed)
    result = []
    with tempfile.TemporaryDirectory(prefix="foglab-bench-") as tmp:
        models = (train_for(dataset, seed, Path(tmp))
                  if any(name in MODEL_TASKS for name in names) else {})
        for done, name in enumerate(names, start=1):
            params, inputs = task_inputs(name, dataset, readings, models)
            result.append({"task": name, "dataset": dataset}
                          | bench_task(name, params, inputs, duration, warmup))
            if progress is not None:
                progress(name, done, len(names))
    return pd.DataFrame(result)


def cpu_costs(names: Sequence[str] | None = None, duration: float = 1.0, warmup: float = 0.25,
              repetitions: int = 3, rows: int = 500, dataset: str = "city", seed: int = 0,
              progress: Progress | None = None,
              models: dict[str, Path] | None = None) -> dict[str, float]:
    """Task -> CPU seconds per message (process time, the median of `repetitions` runs of
    `duration` s after `warmup` s), as `bench_tasks` measures its cpu_per_message, without
    the latency and memory passes and with numpy only: what `foglab calibrate` runs inside
    the arm64 gateway image, where each pass costs several times what it does on the host.
    `models`: those `train_for` made, else they are trained here when a task needs them."""
    names = _checked(names, dataset)
    readings = GENERATORS[dataset](rows=rows, seed=seed)
    costs = {}
    with tempfile.TemporaryDirectory(prefix="foglab-bench-") as tmp:
        if models is None:
            models = (train_for(dataset, seed, Path(tmp))
                      if any(name in MODEL_TASKS for name in names) else {})
        for done, name in enumerate(names, start=1):
            params, inputs = task_inputs(name, dataset, readings, models)
            task = _warm(name, params, inputs, warmup)
            runs = []
            for _ in range(repetitions):
                messages, _, cpu = _run_for(task, inputs, duration)
                runs.append(cpu / messages)
            costs[name] = float(np.median(runs))
            if progress is not None:
                progress(name, done, len(names))
    return costs


def _checked(names: Sequence[str] | None, dataset: str) -> list[str]:
    """The task names asked for (all registered ones by default), each known; the dataset too."""
    names = list(TASKS) if names is None else list(names)
    unknown = [name for name in names if name not in TASKS]
    if unknown:
        raise ValueError(f"unknown task {unknown[0]!r}; known tasks: {', '.join(sorted(TASKS))}")
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    return names


def bench_task(name: str, params: dict[str, Any], inputs: Sequence[Message], duration: float,
               warmup: float) -> dict[str, Any]:
    """The measures of task `name` built with `params` and fed `inputs` (see bench_tasks)."""
    task = _warm(name, params, inputs, warmup)
    messages, wall, cpu = _run_for(task, inputs, duration)
    latencies, outputs = _time_each(task, inputs)
    p50, p95, p99 = np.percentile(latencies, [50, 95, 99])
    memory_peak, state_size = _memory(name, params, inputs)
    return {"input": type(inputs[0]).__name__, "messages": messages,
            "throughput": messages / wall, "cpu_per_message": cpu / messages,
            "cpu_utilisation": cpu / wall, "latency_p50": p50, "latency_p95": p95,
            "latency_p99": p99, "memory_peak": memory_peak, "state_size": state_size,
            "selectivity_declared": task.selectivity,
            "selectivity_measured": outputs / len(inputs)}


def task_inputs(name: str, dataset: str, readings: list[Reading],
                models: dict[str, Path]) -> tuple[dict[str, Any], list[Message]]:
    """The parameters a task is built with and its inputs, in the wire form it takes."""
    spec = DATASETS[dataset]
    sensors = sorted({reading.sensor for reading in readings})
    match name:
        case "senml_parse":
            return {}, [encode_senml(reading, spec.units) for reading in readings]
        case "csv_to_senml":
            return ({"columns": spec.columns, "time_column": spec.time_column,
                     "sensor_column": spec.sensor_column, "units": spec.units},
                    _csv_lines(readings, spec.value_columns))
        case "annotate":
            lookup = (city_sensor_metadata(len(sensors)) if spec is CITY
                      else {sensor: {"fleet": f"fleet-{i % 10}"}
                            for i, sensor in enumerate(sensors)})
            return {"lookup": lookup}, readings
        case "range_filter":
            return {"ranges": spec.ranges}, readings
        case "bloom_filter":
            return {"members": sensors}, readings
        case "interpolation":
            return {"fields": spec.value_columns}, readings
        case "join":
            # Its declared gain, 1 / len(fields), holds for inputs of one observation each.
            return {"fields": spec.value_columns}, _one_value_each(readings)
        case "sliding_linear_regression":
            return {"field": FORECAST_FIELD[dataset]}, readings
        case "mqtt_publish":
            # A publish that drops the payload: this measures the encoding, not a broker.
            return {"publish": lambda topic, payload: None}, readings
        case _ if name in MODEL_TASKS:
            return {"model_path": models[MODEL_TASKS[name]]}, readings
        case _:
            return {}, readings


def write_report(table: pd.DataFrame, out_dir: str | Path) -> dict[str, Path]:
    """Write the table as `bench.parquet` and `bench.csv` and its plot as `bench.png`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"parquet": out / "bench.parquet", "csv": out / "bench.csv", "png": out / "bench.png"}
    table.to_parquet(paths["parquet"], index=False)
    table.to_csv(paths["csv"], index=False)
    plot(table).savefig(paths["png"], dpi=110)
    return paths


def plot(table: pd.DataFrame) -> Figure:
    """Two panels, fastest task first: peak throughput, and the latency percentiles (log)."""
    import seaborn as sns
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    ordered = table.sort_values("throughput", ascending=False)
    latencies = ordered.melt(id_vars="task", value_vars=["latency_p50", "latency_p95",
                                                         "latency_p99"],
                             var_name="percentile", value_name="latency")
    latencies["percentile"] = latencies["percentile"].str.removeprefix("latency_")
    latencies["latency_us"] = latencies["latency"] * 1e6
    # A bare Figure, not pyplot: no global backend or figure registry to disturb.
    figure = Figure(figsize=(12, 0.35 * len(table) + 1.5), layout="constrained")
    left, right = figure.subplots(1, 2, sharey=True)
    sns.barplot(data=ordered, x="throughput", y="task", color="tab:blue", ax=left)
    sns.barplot(data=latencies, x="latency_us", y="task", hue="percentile", ax=right)
    left.set(xlabel="peak throughput, one core (messages/s)", ylabel="", title="throughput")
    right.set(xlabel="time in process() per message (us)", ylabel="", title="latency")
    for axes, values in ((left, ordered["throughput"]), (right, latencies["latency_us"])):
        # Bars on a log axis start where the axis does: start at a whole decade below them all.
        axes.set_xscale("log")
        axes.set_xlim(left=10.0 ** np.floor(np.log10(values.min())))
        axes.xaxis.set_minor_formatter(NullFormatter())
    return figure


def _warm(name: str, params: dict[str, Any], inputs: Sequence[Message], warmup: float) -> Task:
    """A fresh instance of the task, run for `warmup` seconds."""
    gc.collect()  # the previous task's garbage is not this one's cost
    task = make_task(name, **params)
    _run_for(task, inputs, warmup)
    return task


def _run_for(task: Task, inputs: Sequence[Message], seconds: float) -> tuple[int, float, float]:
    """Process whole batches until `seconds` have passed: messages, wall and CPU seconds."""
    process = task.process
    batches = itertools.cycle([inputs[i:i + BATCH] for i in range(0, len(inputs), BATCH)])
    messages = 0
    wall, cpu = time.perf_counter(), time.process_time()
    deadline = wall + seconds
    while time.perf_counter() < deadline:
        batch = next(batches)
        for message in batch:
            process(message)
        messages += len(batch)
    return messages, time.perf_counter() - wall, time.process_time() - cpu


def _time_each(task: Task, inputs: Sequence[Message]) -> tuple[np.ndarray, int]:
    """Seconds each input spends in process(), and the number of outputs in all."""
    process, clock = task.process, time.perf_counter_ns
    latencies = np.empty(len(inputs), dtype=np.int64)
    outputs = 0
    for i, message in enumerate(inputs):
        start = clock()
        produced = process(message)
        latencies[i] = clock() - start
        outputs += len(produced)
    return latencies / 1e9, outputs


def _memory(name: str, params: dict[str, Any], inputs: Sequence[Message]) -> tuple[int, int]:
    """Peak bytes a fresh instance allocates while built and fed `inputs`; its snapshot size.

    tracemalloc slows Python several times over, so it runs apart from the timed passes.
    """
    tracemalloc.start()
    try:
        task = make_task(name, **params)
        for message in inputs:
            task.process(message)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, len(task.snapshot())


def train_for(dataset: str, seed: int, folder: Path) -> dict[str, Path]:
    """The models the model tasks load (MODEL_TASKS' values -> file), trained into folder."""
    return train_models(write_sample_csv(folder / f"{dataset}.csv", dataset, seed=seed), folder)


def _csv_lines(readings: Sequence[Reading], value_columns: Sequence[str]) -> list[str]:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(to_row(reading, value_columns) for reading in readings)
    return buffer.getvalue().splitlines()


def _one_value_each(readings: Sequence[Reading]) -> list[Reading]:
    return [Reading(reading.timestamp, reading.sensor, {field: value})
            for reading in readings for field, value in reading.values.items()
            if value is not None]
