"""Calibration profiles: what the emulation measured its parts cost, for the model to use.

`foglab calibrate` (emu.host.calibrate) measures on this host's emulation what the model otherwise
takes from reference figures: each RIoTBench task's CPU per message on an arm64 gateway under
QEMU (alone, and as the agent runs it), the gateway driver's CPU per reading, Mosquitto's
service time per message in its container, the link layer's own delay per leg (relay or
netem), and a Spark job's fixed CPU per micro-batch (`spark`; a profile measured before it
takes DEFAULT_SPARK). It writes them as a YAML profile with the host's facts and the date; an
experiment names one with `run.calibration: NAME`, and the model (sim.costs) then costs arm64
gateways, brokers, links and Spark's batches by it.

Where profiles live. A profile describes one host's emulation, so `foglab calibrate` writes it
to the user's folder, `$FOGLAB_CALIBRATIONS` or else `$XDG_CACHE_HOME/foglab/calibrations`
(`~/.cache/foglab/calibrations`): measured figures can always be measured again, and they
belong to the machine, not to a checkout. The package ships profiles measured on the project's
reference host (the one whose vCPU defines speed 1.0; workloads/riot/costs.json) under
workloads/calibrations/, so the model can be calibrated without Docker, and tests have a
known profile. A name is looked up in the user's folder first, then among the shipped ones;
a path (with a `/`, or ending in .yaml) is read as it is. Here rather than in topologies: a
profile is mostly the cost of what runs (tasks, drivers, messages), and its task names are
checked against the workloads' task registry, which topologies must not import.

A profile with a missing or malformed field is refused with the file, line, field and value
(topologies.errors.SpecError), as every description file is.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from topologies.brokers import RABBITMQ, BrokerKind
from topologies.documents import dump, parse, text_of
from topologies.errors import SpecError, Withheld, first_error
from topologies.fields import WRITTEN, Name, NonNegativeDuration, PositiveDuration, Rate, Size
from workloads.pipeline import known_tasks

SHIPPED = Path(__file__).with_name("calibrations")
FOLDER_VARIABLE = "FOGLAB_CALIBRATIONS"
# What `foglab calibrate` names its profile when not told.
DEFAULT_NAME = "local"
# The hardware profile arm64 gateways take in a calibrated model.
GATEWAY_PROFILE = "rpi4-qemu"


def _known_task(name: str) -> str:
    known = known_tasks("python")
    if name not in known:
        raise ValueError(f"a task of the python engine ({', '.join(known)}), not {name!r}")
    return name


Task = Annotated[str, AfterValidator(_known_task)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostFacts(_Strict):
    """The machine that measured a profile."""

    cpu: str
    cores: int = Field(ge=1)
    machine: str
    kernel: str
    python: str
    docker: str
    qemu: str
    load: float = Field(ge=0, description=(
        "the 1-minute load average, the higher of the measures' start and end: above `cores`, "
        "other work shared the CPUs and the figures are higher than on a quiet host"))


class Node(_Strict):
    """What one CPU costs: the reference loop's time, and per message or reading, seconds of
    one of its cores (not reference seconds)."""

    speed: float = Field(gt=0, le=100, description="one core's speed against the reference "
                                                  "vCPU: reference loop time / this loop time")
    loop: PositiveDuration = Field(description="process time of workloads.riot.costs."
                                               "reference_loop here")
    python: str
    tasks: dict[Task, PositiveDuration] = Field(
        description="a task's process() per message, as `foglab bench riot` measures it")
    operators: dict[Task, PositiveDuration] = Field(
        description="a task as the agent runs it: body decoded, task, outputs encoded")
    driver: PositiveDuration = Field(description="the agent's CPU per reading its drivers emit "
                                                 "and publish")
    driver_rate: Rate = Field(gt=0, description="readings per second while it was measured")


class Gateway(Node):
    """An arm64 gateway under QEMU, the hardware profile `profile` in the model."""

    profile: Name = GATEWAY_PROFILE
    image: str
    cores: int = Field(default=1, ge=1, le=1024, description=(
        "cores the model gives it: the agent runs its drivers and operators in one Python "
        "interpreter, so one, whatever the container's CPU limit"))


class Broker(_Strict):
    """A broker in its image (Mosquitto in the services image; RabbitMQ in the rabbitmq
    image): CPU per message routed to one subscriber."""

    image: str
    size: Size = Field(gt=0, description="payload bytes of the messages measured")
    service_time: PositiveDuration = Field(description="QoS 0, paced at `rate`: the model's")
    rate: Rate = Field(gt=0)
    burst_service_time: PositiveDuration = Field(description="QoS 0, as fast as sent")
    burst_throughput: Rate = Field(gt=0, description="messages per second through the burst")
    qos1_service_time: PositiveDuration = Field(description="QoS 1, as fast as acknowledged")


class Links(_Strict):
    """The link layer's own delay: a shaped path against an unshaped one, per direction."""

    shaper: Literal["relay", "netem"]
    latency: NonNegativeDuration = Field(description="one-way latency the shaped path had")
    direct: PositiveDuration = Field(description="median MQTT round trip, unshaped")
    shaped: PositiveDuration = Field(description="median MQTT round trip, shaped")
    samples: int = Field(ge=1)
    hop_overhead: NonNegativeDuration = Field(description=(
        "one way, beyond the configured latency: what the model adds to each leg between "
        "two nodes that run containers"))


class Spark(_Strict):
    """The PySpark job a cloud VM runs for an `engine: spark` operator (workloads.spark.job),
    run natively on the host as the cloud VM's container runs it: its CPU (the JVM and its
    Python workers) split into a fixed part per micro-batch, whatever the batch holds
    (planning, scheduling, the state store, the JIT compiling the planner's code in a young
    JVM, the JVM between triggers), and a part per message read. The model charges the fixed
    part on the operator's node once per trigger interval that had input (sim.operators)."""

    batch: PositiveDuration = Field(description="host CPU seconds per micro-batch")
    message: NonNegativeDuration = Field(description="host CPU seconds per message read")
    trigger: PositiveDuration = Field(description="the trigger interval measured at")
    app: str = Field(default="stats", description="the app measured (workloads.spark.apps)")
    measured: bool = Field(default=True, description=(
        "false: the default for a profile measured before Spark was (DEFAULT_SPARK)"))


# What a profile without a `spark` section (measured before calibrate measured Spark) takes,
# from the emulation's smart city on the reference host (benchmarks/emu_plan.py and
# emu_capacity.py, 2026-11-28, a quiet host): cloud-1's STATS job took 1.76 CPU seconds a
# batch at about 80 messages a batch (G = 4, K = 2) and 2.30 at about 300 (G = 12, K = 2.5):
# 1.56 s a batch and 2.5 ms a message; at G = 100 (1,000 messages a batch, K = 5) that predicts
# 0.81 cores where the job took 0.74, and the batch alone (1.7 s, the figure before) 0.40.
# emu.host.calibrate_spark.measure_spark's own short spans split it 2.5 s + 2.2 ms and 1.5 s + 5.7
# ms in two runs (the JVM's age moves the split): a profile that measured Spark says its own.
DEFAULT_SPARK = Spark(batch=1.56, message=0.0025, trigger=1.0, measured=False)


class Calibration(_Strict):
    """A calibration profile as `foglab calibrate` writes it."""

    measured: datetime
    quick: bool = Field(description="measured with --quick: fewer, shorter repetitions")
    host: HostFacts
    gateway: Gateway
    native: Node = Field(description="the same measures on the host, natively")
    broker: Broker
    rabbitmq: Broker | None = Field(default=None, description=(
        "RabbitMQ in the rabbitmq image, measured as `broker` (benchmarks/brokers.py): what "
        "a broker of kind rabbitmq costs; without it, `broker`'s figure"))
    links: Links
    spark: Spark = Field(default=DEFAULT_SPARK, description=(
        "Spark's CPU per micro-batch; a profile without it takes DEFAULT_SPARK"))

    def broker_of(self, kind: BrokerKind) -> Broker:
        """What a broker of `kind` (topologies.brokers) costs: its kind's own measure where
        the profile has one (RabbitMQ's `rabbitmq`), else `broker`'s (Mosquitto's)."""
        own = {RABBITMQ: self.rabbitmq}.get(kind)
        return own if own is not None else self.broker


class Loaded(BaseModel):
    """A profile read from its file: what the manifest of a run records."""

    model_config = ConfigDict(frozen=True)

    name: str
    file: str
    sha256: str
    calibration: Calibration

    def facts(self) -> dict:
        """The manifest's `calibration`: where it came from and everything in it."""
        return {"name": self.name, "file": self.file, "sha256": self.sha256,
                **self.calibration.model_dump(mode="json")}


def folder() -> Path:
    """The user's folder of profiles (see the module's docstring)."""
    if os.environ.get(FOLDER_VARIABLE):
        return Path(os.environ[FOLDER_VARIABLE])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "foglab" / "calibrations"


def is_path(name: str) -> bool:
    return "/" in name or name.endswith((".yaml", ".yml"))


def names() -> dict[str, Path]:
    """Every profile a name finds: the user's, over the shipped ones of the same name."""
    found: dict[str, Path] = {}
    for where in (SHIPPED, folder()):
        if where.is_dir():
            found.update({path.stem: path for path in sorted(where.glob("*.yaml"))})
    return dict(sorted(found.items()))


def find(name: str) -> Path | None:
    """The file a name or path stands for, or None."""
    candidates = ([Path(name)] if is_path(name)
                  else [folder() / f"{name}.yaml", SHIPPED / f"{name}.yaml"])
    return next((path for path in candidates if path.is_file()), None)


def target(name: str) -> Path:
    """Where `foglab calibrate --out NAME` writes: the user's folder, or the path given."""
    if is_path(name):
        return Path(name)
    if re.fullmatch(r"[a-z][a-z0-9_.-]{0,63}", name) is None:
        raise ValueError(f"{name!r} is neither a profile name (lower-case letters, digits, "
                         "., _ and -, starting with a letter) nor a path ending in .yaml")
    return folder() / f"{name}.yaml"


_loaded: dict[tuple[str, str, str], Loaded] = {}


def load(name: str) -> Loaded:
    """The profile a name or path finds; a SpecError names the file, line, field and value
    of what is missing or malformed (a profile named by its path, as an experiment may name
    one: not the value, its column instead), or lists the profiles there are."""
    path = find(name)
    if path is None:
        known = ", ".join(names()) or "none"
        raise SpecError((), name, f"a calibration profile: a name (written by `foglab "
                        f"calibrate --out NAME` to {folder()}, or shipped: {known}) or a "
                        "file", name)
    data = path.read_bytes()
    # By content: a sweep's points each validate the name, and a profile measured again in
    # the same clock tick as the last read is still read afresh.
    key = (name, str(path), hashlib.sha256(data).hexdigest())
    if key not in _loaded:
        document = parse(text_of(data, str(path)), str(path), confidential=is_path(name))
        if not isinstance(document.data, dict):
            raise SpecError((), Withheld(document.data), "a calibration profile: a mapping with "
                            + ", ".join(Calibration.model_fields), str(path), 1)
        try:
            calibration = Calibration.model_validate(document.data, context=WRITTEN)
        except ValidationError as exc:
            raise document.error(first_error(exc, document.data)) from None
        _loaded[key] = Loaded(name=name, file=str(path), sha256=key[2],
                              calibration=calibration)
    return _loaded[key]


def problem(name: str) -> str | None:
    """What keeps `run.calibration: name` from loading, as the experiment's error says it
    (the profile's own error names its file, line, field and value); None when it loads."""
    if find(name) is None:
        return (f"a calibration profile: a name ({', '.join(names()) or 'none yet'}; "
                f"`foglab calibrate --out NAME` writes one to {folder()}) or a file")
    try:
        load(name)
    except SpecError as error:
        return f"a valid calibration profile, but {error}"
    return None



def write(calibration: Calibration, path: Path) -> Path:
    """The profile as YAML, durations and rates with units and every figure to four digits,
    into a file made whole at once."""
    data = calibration.model_dump(mode="json")
    text = ("# foglab calibration profile, written by `foglab calibrate`: durations are CPU "
            "time per message\n# (or reading) on one core of the machine named, except links "
            "(one-way delays).\n" + dump(_with_units(data, ()), sort_keys=False, width=100))
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        scratch.write_text(text, encoding="utf-8")
        scratch.replace(path)
    finally:
        scratch.unlink(missing_ok=True)
    return path


# The fields written with a unit: durations and rates (everything else as it is).
_DURATIONS = {"loop", "driver", "service_time", "burst_service_time", "qos1_service_time",
              "latency", "direct", "shaped", "hop_overhead", "batch", "message", "trigger"}
_RATES = {"driver_rate", "rate", "burst_throughput"}


def _with_units(value: object, path: tuple) -> object:
    if isinstance(value, dict):
        return {key: _with_units(item, (*path, key)) for key, item in value.items()}
    field = path[-1] if path else None
    in_costs = len(path) >= 2 and path[-2] in ("tasks", "operators")
    if isinstance(value, float) and (field in _DURATIONS or in_costs):
        return duration_text(value)
    if isinstance(value, float) and field in _RATES:
        return f"{value:.6g}/s"
    if field == "size":
        return f"{value}B"
    if isinstance(value, float):
        return float(f"{value:.4g}")  # what is measured has no more digits
    return value


def duration_text(seconds: float) -> str:
    """`12.35us`, `3.2ms`, `1.5s`: four significant digits in the unit that suits."""
    if seconds == 0 or not math.isfinite(seconds):
        return f"{seconds}s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.4g}{unit}"
    return f"{seconds * 1e9:.4g}ns"
