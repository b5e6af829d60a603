"""`python3 -m emu.agent.measure`: what `foglab calibrate` measures where the agent runs.

Run inside the arm64 gateway image (under QEMU), and on the host for comparison, it prints
JSON lines: `{"step": ..., "done": i, "total": n}` as it goes, and last `{"result": {...}}` (or
`{"failure": "..."}`):

- `loop`: process seconds of `workloads.riot.costs.reference_loop`, whose ratio to the
  reference host's gives this CPU's speed as the profiles define it;
- `tasks`: each RIoTBench task's CPU seconds per message, as `foglab bench riot` measures
  cpu_per_message (`workloads.riot.bench.cpu_costs`: the task's process() on its inputs);
- `operators`: each task's CPU seconds per message as the agent runs it: an operator instance
  (`emu.agent.operators.Operator.take`) on envelopes whose bodies the agent's drivers write, so
  with the decoding of the body, the encoding of its outputs and the selectivity credit;
  `passthrough` is the agent's own cost of an operator that runs no task;
- `driver` (with `--broker`): CPU seconds per reading of a real agent whose drivers emit a
  stream of 180-byte SenML readings and publish them at QoS 0 to the broker: the emission,
  the envelope, the records and the MQTT client, less what the same agent takes idle.

CPU is the process's (time.process_time: every thread, so the MQTT client's network thread
too), never wall time: on a shared host, other processes slow the wall clock, not the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STREAM = "city"
SIZE = 180  # bytes of a reading: workloads/city-sensors.yaml's
DEVICES = 50
# The quickstart's load on one of its gateways: 50 sensors reading once a second.
RATE = 1.0
AGENT_READY_S = 30.0
# Tasks that take a CSV line: their operators get the drivers' CSV bodies.
CSV_TASKS = frozenset({"csv_to_senml"})


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def operator_costs(names: list[str], duration: float, warmup: float, repetitions: int,
                   models: dict[str, Path], seed: int = 0) -> dict[str, float]:
    """Task -> CPU seconds per input of an agent's operator instance running it (see the
    module's docstring); a task that fails on the drivers' bodies is left out. `models`:
    workloads.riot.bench.train_for's."""
    from emu.agent.config import DriverConfig, OperatorConfig
    from emu.agent.drivers import Driver
    from emu.agent.operators import Operator
    from emu.agent.protocol import Envelope
    from workloads.riot.bench import task_inputs
    from workloads.riot.datasets import GENERATORS

    bodies = {}
    for fmt in ("senml", "csv"):
        driver = Driver(DriverConfig(STREAM, [f"sensor-{i}" for i in range(DEVICES)], RATE,
                                     size=SIZE, format=fmt), "gw", str(seed))
        bodies[fmt] = [Envelope(i, STREAM, device.name, 0.0, 0, driver.body(device, i * 0.5))
                       for i, device in enumerate(driver.devices * 5)]
    readings = GENERATORS["city"](rows=200, seed=seed)
    costs: dict[str, float] = {}
    for done, name in enumerate(names, start=1):
        params = {} if name == "passthrough" else task_inputs(name, "city", readings, models)[0]
        operator = Operator(OperatorConfig(name="measured", task=name, params=params,
                                           reads=[f"{STREAM}/#"], writes="out"), "gw", 0.0)
        inputs = bodies["csv" if name in CSV_TASKS else "senml"]
        _take_for(operator, inputs, warmup)
        runs = []
        for _ in range(repetitions):
            messages, cpu = _take_for(operator, inputs, duration)
            runs.append(cpu / messages)
        if not operator.errors:
            costs[name] = statistics.median(runs)
        say(step="operators", task=name, done=done, total=len(names),
            errors=operator.errors, last_error=operator.last_error)
    return costs


def _take_for(operator: Any, inputs: list, seconds: float) -> tuple[int, float]:
    """Feed inputs for `seconds` (at least one pass): messages taken, CPU seconds."""
    take = operator.take
    messages = 0
    wall, cpu = time.perf_counter(), time.process_time()
    deadline = wall + seconds
    while True:
        for envelope in inputs:
            take(envelope, 0.0)
        messages += len(inputs)
        if time.perf_counter() >= deadline:
            return messages, time.process_time() - cpu


def driver_cost(broker: str, seconds: float, idle: float) -> dict[str, float]:
    """CPU seconds per reading of a real agent's drivers publishing to `broker` (host:port),
    less the agent's idle CPU; with the readings counted and the idle rate."""
    from emu.agent.agent import Agent
    from emu.agent.config import AgentConfig, DriverConfig

    with tempfile.TemporaryDirectory(prefix="foglab-measure-") as records:
        config = AgentConfig(node="calibrate", mqtt=broker, hold=True, records=records,
                             drivers=[DriverConfig(STREAM, [f"sensor-{i}" for i in
                                                            range(DEVICES)], RATE, size=SIZE)])
        agent = Agent(config)
        agent.start()
        try:
            if not agent.ready.wait(AGENT_READY_S):
                raise RuntimeError(f"the agent did not connect to the broker at {broker} "
                                   f"within {AGENT_READY_S:.0f} s")
            wall, cpu = time.perf_counter(), time.process_time()
            time.sleep(idle)
            idle_rate = (time.process_time() - cpu) / (time.perf_counter() - wall)
            agent.scheduler.call(agent.begin, time.time())
            time.sleep(min(1.0, seconds / 2))  # the devices' first emissions are spread out
            sent, wall, cpu = agent.records.sent_count, time.perf_counter(), time.process_time()
            time.sleep(seconds)
            busy = time.process_time() - cpu
            elapsed = time.perf_counter() - wall
            readings = agent.records.sent_count - sent
        finally:
            agent.stop()
    if readings <= 0:
        raise RuntimeError("the agent's drivers emitted nothing")
    return {"driver": max(busy - idle_rate * elapsed, 0.0) / readings, "readings": readings,
            "idle_cpu": idle_rate}


def measure(arguments: argparse.Namespace) -> dict[str, Any]:
    from workloads.riot.bench import MODEL_TASKS, cpu_costs, train_for
    from workloads.riot.costs import loop_seconds
    from workloads.riot.tasks import TASKS

    names = arguments.tasks.split(",") if arguments.tasks else sorted(TASKS)
    result: dict[str, Any] = {"machine": os.uname().machine,
                              "python": platform.python_version()}
    say(step="loop", done=0, total=1)
    result["loop"] = loop_seconds(max(3, arguments.repetitions))
    with tempfile.TemporaryDirectory(prefix="foglab-measure-") as tmp:
        say(step="models", done=0, total=1)
        models = (train_for("city", 0, Path(tmp))
                  if any(name in MODEL_TASKS for name in names) else {})
        result["tasks"] = cpu_costs(
            names, arguments.duration, arguments.warmup, arguments.repetitions, models=models,
            progress=lambda name, done, total: say(step="tasks", task=name, done=done,
                                                   total=total))
        result["operators"] = operator_costs(["passthrough", *names], arguments.duration,
                                             arguments.warmup, arguments.repetitions, models)
    if arguments.broker:
        say(step="driver", done=0, total=1)
        result |= driver_cost(arguments.broker, arguments.driver_seconds,
                              arguments.idle_seconds)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m emu.agent.measure",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="", help="comma-separated (default: all)")
    parser.add_argument("--duration", type=float, default=1.0, help="seconds per task and run")
    parser.add_argument("--warmup", type=float, default=0.25)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--broker", default="", help="host:port: also measure the driver")
    parser.add_argument("--driver-seconds", type=float, default=5.0)
    parser.add_argument("--idle-seconds", type=float, default=1.0)
    arguments = parser.parse_args(argv)
    try:
        say(result=measure(arguments))
    except (ValueError, RuntimeError, OSError) as error:
        say(failure=f"{type(error).__name__}: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
