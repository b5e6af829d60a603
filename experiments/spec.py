"""The schema of an experiment file: what runs (topology, workload, pipeline), when, and how."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from topologies.fields import Name, NonNegativeDuration, PositiveDuration
from topologies.spec import TopologySpec
from workloads.features import FEATURES
from workloads.pipeline import OperatorSpec
from workloads.placement.spec import PlacementSpec
from workloads.spec import WorkloadSpec

MAX_DURATION = 30 * 86400.0
MAX_DILATION = 1000.0


class RunSpec(BaseModel):
    """How to run: backend, simulated or wall-clock duration, seed and repetitions."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["sim", "emu", "hybrid"] = "sim"
    engine: str = Field(
        default="docker", description="where emu and hybrid runs put their containers: an "
        "engine of emu.engines.ENGINES (docker: plain Docker on this host; `foglab emu up "
        "--help` lists them all)")
    duration: PositiveDuration = Field(le=MAX_DURATION)
    seed: int = Field(default=1, ge=0, lt=2**63)
    repetitions: int = Field(default=1, ge=1, le=1000)
    sample: PositiveDuration = Field(default=1.0,
                                     description="interval of the nodes and links tables")
    drain: NonNegativeDuration = Field(
        default=30.0, le=MAX_DURATION,
        description="after the duration, how long messages in flight may still arrive")
    driver_cost: NonNegativeDuration = Field(
        default=20e-6, description="a gateway driver's CPU cost per reading on one reference vCPU")
    calibration: str | None = Field(
        default=None, description="a calibration profile (`foglab calibrate`) by name or file: "
        "the model takes arm64 gateways' task and driver costs, the brokers' service time and the "
        "link layer's delay per leg from what it measured on the emulation (sim.costs)")

    dilation: float | Literal["auto", "real-speed"] = Field(
        default=1.0, description="time dilation of a run on the containers (emu, hybrid): "
        "emulated time runs K times slower than the host's clock, so each node gets K times "
        "the host's CPU per emulated second; `auto` picks K from the model's predicted CPU "
        "demand so the host stays at most half busy, `real-speed` so every emulated node runs "
        "at its hardware profile's speed (experiments.dilation). On sim with a calibration "
        "the model stands for the emulation at that K; without one it changes nothing")

    access: Literal["open", "closed"] = Field(
        default="closed", description="who may use a run's brokers and ZooKeeper on the "
        "containers (emu, hybrid): `closed` (the default), only the run's own: each node logs "
        "in with a password of its own, publishes only its own topics and reads those and "
        "what its operators read, and makes znodes only it and the host may change "
        "(emu.cluster.access); `open`, by choice for a quick look: any client on the host or "
        "the run's networks may publish, read, command agents and change znodes. Nothing on "
        "sim")
    tls: bool = Field(
        default=False, description="with access closed: the brokers and ZooKeeper speak TLS "
        "only, on their usual ports, with certificates of an authority made for the run, which "
        "the agents and the host trust alone (emu.cluster.tls); costs each gateway's agent "
        "loading OpenSSL at its start (docs/access.md). Refused with access open")

    @model_validator(mode="after")
    def _tls_needs_closed(self) -> RunSpec:
        if self.tls and self.access != "closed":
            raise ValueError(f"run.tls is true but run.access is {self.access}: TLS protects "
                             "a closed run's logins, set access: closed (or tls: false)")
        return self

    swarm_encrypted: bool = Field(
        default=False, description="run.engine swarm: the overlay network between the swarm's "
        "nodes encrypted (IPsec ESP with AES-GCM, Docker's `--opt encrypted`). Refused, before "
        "anything starts, where the nodes' kernel (this host's) cannot encrypt: its traffic "
        "between nodes would be dropped (emu.engines.swarm.ipsec, docs/swarm.md)")

    @field_validator("dilation", mode="before")
    @classmethod
    def _dilation(cls, value: object) -> object:
        if isinstance(value, bool) or (isinstance(value, str) and value not in (
                "auto", "real-speed")):
            raise ValueError(f"a number K from 1 to {MAX_DILATION:g}, auto or real-speed, "
                             f"got {value!r}")
        if isinstance(value, int | float) and not 1 <= value <= MAX_DILATION:
            raise ValueError(f"a number K from 1 to {MAX_DILATION:g} (1: real time), "
                             f"got {value!r}")
        return value

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, name: str) -> str:
        # The one list of engines; a module of names alone, which imports nothing of the
        # emulation (tests/foundation/test_layering.py checks it).
        from emu.engines import ENGINES

        if name not in ENGINES:
            raise ValueError(f"an engine is one of {', '.join(ENGINES)}, got {name!r}")
        return name

    @field_validator("calibration")
    @classmethod
    def _calibration_loads(cls, name: str | None) -> str | None:
        from workloads.calibration import problem

        if name is not None and (text := problem(name)):
            raise ValueError(text)
        return name


class RecordSpec(BaseModel):
    """What each run writes of its per-message table: every row, none, or a sample of the
    readings (a fraction, 0.1 or "10%"); the summary is always of every message."""

    model_config = ConfigDict(extra="forbid")

    messages: Literal["all", "none"] | float = Field(
        default="all", description="all, none, or a fraction of the readings in (0, 1) "
        "(0.01 or \"1%\"), chosen by a stable hash of the message id: every copy of a "
        "reading is kept or dropped together, and the same seed keeps the same rows")

    @field_validator("messages", mode="before")
    @classmethod
    def _fraction(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                value = float(value.strip()[:-1]) / 100
            except ValueError:
                raise ValueError(f"all, none or a fraction such as 10%, got {value!r}") from None
        if isinstance(value, bool):
            raise ValueError(f"all, none or a fraction such as 0.1, got {value!r}")
        if isinstance(value, int | float):
            if not 0 < value <= 1:
                raise ValueError(f"a fraction above 0 and at most 1 (100%), got {value!r}; "
                                 "none writes no table")
            return "all" if value == 1 else float(value)
        if isinstance(value, str) and value not in ("all", "none"):
            raise ValueError(f"all, none or a fraction such as 0.1 or 10%, got {value!r}")
        return value


# One field per scenario feature (workloads.features), in the registry's order.
ScenarioSpec = create_model(
    "ScenarioSpec", __config__=ConfigDict(extra="forbid"),
    # The docstring as before the registry, so the JSON schema stays the same.
    __doc__="What happens over time: operator migrations, scheduled or (with mobility) "
    "decided,\n    and faults injected on a schedule (workloads.faults).",
    **{feature.key: (feature.spec, feature.field()) for feature in FEATURES})


class ExperimentSpec(BaseModel):
    """An experiment file, with its topology and workload references resolved."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    description: str = ""
    topology: TopologySpec
    workload: WorkloadSpec
    pipeline: list[OperatorSpec] = Field(min_length=1)
    scenario: ScenarioSpec = Field(default_factory=ScenarioSpec)  # type: ignore[valid-type]
    placement: PlacementSpec | None = Field(
        default=None, description="a policy that places the `on: auto` operators, once, "
        "before the run, the same on every backend (workloads.placement)")
    run: RunSpec
    sweep: dict[str, list] = Field(
        default_factory=dict,
        description="dotted keys with a list of values: one run per value (the product of all)")
    zip: dict[str, list] = Field(
        default_factory=dict,
        description="dotted keys swept together: the i-th run takes the i-th value of each "
                    "(paired, all as long), for every point of `sweep`")
    plots: list[Literal["latency", "sweep"]] = Field(
        default_factory=list,
        description="latency: each run's latency over time; sweep: a figure per swept key and "
                    "measure across the points, with 95 % intervals")
    record: RecordSpec = Field(
        default_factory=RecordSpec,
        description="what is written of the per-message table (messages.parquet)")


def _pipeline_or_jobs(schema: dict) -> None:
    """A file gives a pipeline or jobs (expanded into the pipeline before validation)."""
    schema["required"] = [key for key in schema.get("required", []) if key != "pipeline"]
    schema["oneOf"] = [{"required": ["pipeline"]}, {"required": ["jobs"]}]


class ExperimentFile(ExperimentSpec):
    """The file as written: topology and workload may name a catalog entry or a file, and
    the pipeline may be written as jobs (workloads.jobs), for editors: the loader expands the
    jobs into the pipeline before ExperimentSpec validates it."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_pipeline_or_jobs)

    topology: str | TopologySpec  # type: ignore[assignment]
    workload: str | WorkloadSpec  # type: ignore[assignment]
    pipeline: list[OperatorSpec] = Field(default=None, min_length=1)  # type: ignore[assignment]
    jobs: list[dict[str, Any]] | None = Field(
        default=None, min_length=1, description="instead of pipeline: named jobs (an "
        "operator's fields, or operators), placed by node, kind or site (site:NAME), and "
        "includes of files of jobs (include: FILE, with: {...}); docs/jobs.md")
    params: dict[str, Any] | None = Field(
        default=None, description="values for ${name} in the jobs")
