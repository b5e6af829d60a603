"""`foglab calibrate`: measure the model's inputs on this host's emulation and write a profile.

The command's printing and exit codes; the measuring is emu.host.calibrate's, the profile's schema
and files workloads.calibration's.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.table import Table

from topologies.exit_codes import ExitCode
from topologies.terminal import (
    bars,
    console,
    error,
    escape,
    exit_code,
    file_to_write,
    say,
    stop_on_signals,
    warning,
)
from workloads.calibration import DEFAULT_NAME


def calibrate(
    out: Annotated[str, typer.Option(help="the profile's name (written to the user's folder of "
                                          "profiles) or a .yaml path")] = DEFAULT_NAME,
    quick: Annotated[bool, typer.Option(help="fewer, shorter repetitions: about a minute, "
                                             "noisier figures")] = False) -> None:
    """Measure on this host's emulation what the model takes as inputs: each RIoTBench task's
    CPU on an arm64 gateway under QEMU (and natively), the driver's cost per reading,
    Mosquitto's service time, the link layer's delay per leg and a Spark job's CPU per
    micro-batch; write them as a calibration
    profile that `run.calibration: NAME` makes the model use (see workloads.calibration)."""
    from emu.cli.clusters import docker_client
    from emu.host.calibrate import calibrate as measure
    from emu.host.calibrate_plan import CalibrationFailed
    from workloads.calibration import is_path, target, write

    try:
        path = target(out)
    except ValueError as failure:
        error(f"--out: {failure}")
        raise typer.Exit(ExitCode.BAD_INPUT) from None
    if is_path(out):  # a name goes to the user's folder of profiles, made when written
        file_to_write("--out", path)
    client = docker_client()
    with stop_on_signals():
        try:
            with bars() as shown:
                steps: dict[str, int] = {}

                def progress(what: str, done: float, total: float) -> None:
                    step = what.split(":")[0]
                    if step not in steps:
                        steps[step] = shown.add_task(what, total=total)
                    shown.update(steps[step], description=what, completed=done, total=total)

                calibration = measure(quick, progress, client)
        except KeyboardInterrupt as stop:
            warning("interrupted: nothing written; the calibration's containers are removed")
            raise typer.Exit(exit_code(stop)) from None
        except CalibrationFailed as failure:
            error(failure)
            raise typer.Exit(ExitCode.FAILURE) from None
    write(calibration, path)
    _calibration_tables(calibration)
    say(f"wrote {path}")
    name = out if "/" not in out and not out.endswith((".yaml", ".yml")) else str(path)
    say(f"use it with: foglab run EXPERIMENT --set run.calibration={name}")


def _calibration_tables(calibration) -> None:
    """A calibration's figures: tasks host against gateway, then the per-message costs."""
    def us(seconds: float | None) -> str:
        return f"{seconds * 1e6:,.1f}" if seconds is not None else "-"

    gateway, native = calibration.gateway, calibration.native
    tasks = Table(title=f"CPU µs per message: host (speed {native.speed:.2f}) and arm64 "
                        f"gateway under QEMU (speed {gateway.speed:.3f})",
                  title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("task", "host", "gateway", "x", "as the agent runs it: host", "gateway"):
        tasks.add_column(column, justify="left" if column == "task" else "right")
    for task in sorted(set(gateway.operators) | set(gateway.tasks)):
        alone, native_alone = gateway.tasks.get(task), native.tasks.get(task)
        tasks.add_row(task, us(native_alone), us(alone),
                      f"{alone / native_alone:.1f}" if alone and native_alone else "-",
                      us(native.operators.get(task)), us(gateway.operators.get(task)))
    console.print(tasks)
    broker, links = calibration.broker, calibration.links
    other = Table(title="per message", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("what", "µs"):
        other.add_column(column, justify="left" if column == "what" else "right")
    for what, seconds in (
            ("driver, per reading: host", native.driver),
            ("driver, per reading: gateway", gateway.driver),
            (f"Mosquitto at {broker.rate:g}/s, QoS 0", broker.service_time),
            (f"Mosquitto in a burst, QoS 0 ({broker.burst_throughput:,.0f}/s)",
             broker.burst_service_time),
            ("Mosquitto in a burst, QoS 1", broker.qos1_service_time),
            (f"link layer ({links.shaper}), per leg, one way", links.hop_overhead),
            (f"Spark {calibration.spark.app}, per micro-batch"
             + ("" if calibration.spark.measured else " (default)"), calibration.spark.batch),
            (f"Spark {calibration.spark.app}, per message", calibration.spark.message)):
        other.add_row(escape(what), us(seconds))
    console.print(other)
    host = calibration.host
    if host.load > host.cores:
        say(f"the host's load average was {host.load:g} on {host.cores} cores: other work "
            "shared the CPUs, and these figures are higher than a quiet host's", style="yellow")
