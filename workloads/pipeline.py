"""The schema of a pipeline: operators, the streams they read and write, and where they run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from topologies.fields import Name, Names, NonNegativeDuration, PositiveDuration, Proportion, Size
from workloads.operator_engines import DEFAULT_ENGINE, ENGINE_NAMES, operator_engine
from workloads.riot.tasks import TASKS
from workloads.topics import shared

if TYPE_CHECKING:
    from topologies.model import Topology

# `on: gateways` places one instance on every node of that kind.
KIND_WORDS = {"devices": "device", "gateways": "gateway", "brokers": "broker",
              "cloud": "cloud_vm", "cloud_vms": "cloud_vm", "coordinators": "coordinator"}

# The operator without a task: it forwards each message as it came (and, with a `window`,
# counts them). It is the default, so the migration studies' window counts need not name it.
PASSTHROUGH = "passthrough"
# The apps an `engine: spark` operator runs (workloads.spark.job.APPS, named here so that
# validating a file does not import PySpark; a test keeps the two equal).
SPARK_APPS = ("etl", "stats", "pred")


def known_tasks(engine: str) -> list[str]:
    """The task names an operator on `engine` may give, as an error message lists them: the
    agent's RIoTBench tasks and passthrough, or the apps of a job beside it (Spark's)."""
    if operator_engine(engine).in_agent:
        return [*sorted(TASKS), PASSTHROUGH]
    return list(SPARK_APPS)


class WindowSpec(BaseModel):
    """A tumbling processing-time window count, as the migration thesis's operator: each
    instance closes window k at k * size plus a timer jitter of its own."""

    model_config = ConfigDict(extra="forbid")

    size: PositiveDuration
    jitter: NonNegativeDuration = Field(
        default=5e-3, description="spread of when an instance's window timer fires")


class OperatorSpec(BaseModel):
    """An operator with one instance per node it is placed on; no `writes` makes it a sink."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    # Before `task`, which is checked against the engine's tasks. The names are the registry's
    # (workloads.operator_engines).
    engine: Literal[ENGINE_NAMES] = DEFAULT_ENGINE
    task: str = Field(
        default=PASSTHROUGH, max_length=64,
        description="a RIoTBench task (engine python), an app etl, stats or pred (engine "
                    "spark), or passthrough: no task, each message forwarded as it came")
    on: Names = Field(min_length=1, description="node names, patterns or kinds (gateways), "
                          "or auto: where the experiment's placement policy puts it")
    among: Names | None = Field(
        default=None, min_length=1, description="with on: auto, the nodes the placement "
        "policy may choose from (names, patterns, kinds); default: placement.candidates")
    reads: Names = Field(min_length=1, description="stream names or MQTT topic filters")
    writes: Name | None = None
    cost: NonNegativeDuration | None = Field(
        default=None, description="service time per message on one reference vCPU; unset: "
                                  "the calibrated cost of `task` (foglab bench riot), else 0")
    selectivity: Proportion = Field(default=1.0, ge=0, le=1000, description=(
        "outputs per input (0.95 or 95%)"))
    out_size: Size | None = Field(default=None, description="bytes per output (default: as in)")
    window: WindowSpec | None = Field(
        default=None, description="count events per tumbling window; outputs one per window")
    follow: Literal["users"] | None = Field(
        default=None, description="one instance per mobile user, reading that user's stream; "
                                  "placed at the user's gateway and moved by the policy")
    params: dict[str, object] = Field(default_factory=dict)
    checkpoint: PositiveDuration | None = Field(
        default=None, description="write the instance's state to ZooKeeper this often, so "
        "that scenario.recovery can restore it elsewhere when its node crashes "
        "(workloads.recovery); a windowed operator only")
    slo: PositiveDuration | None = Field(
        default=None, description="latency bound of an input at the operator (queueing and "
        "processing, 95th percentile): over it, scenario.replication starts a replica "
        "(workloads.replication); a stateless operator only")

    @field_validator("task")
    @classmethod
    def _known_task(cls, task: str, info: ValidationInfo) -> str:
        # A name no backend knows would run on sim as a free operator (no calibrated cost).
        engine = info.data.get("engine", DEFAULT_ENGINE)
        known = known_tasks(engine)
        if task not in known:
            raise ValueError(f"unknown task {task!r} for engine {engine}; known tasks: "
                             f"{', '.join(known)}")
        return task

    @property
    def is_sink(self) -> bool:
        return self.writes is None

    @property
    def stateful(self) -> bool:
        return self.window is not None


def topic_filter(read: str) -> str:
    """`city` reads every topic of stream city (`city/#`); a filter with `/` is taken as is,
    less a `$share/<group>/` prefix: an operator's instances share its subscription anyway."""
    read = shared(read)[1]
    return read if "/" in read or "+" in read or "#" in read else f"{read}/#"


def reads_from(topic_filter: str, stream: str) -> bool:
    """Whether a filter can match some topic of a stream: `<stream>/<node>` or
    `<stream>/<node>/<device>` (emu.agent.protocol's rule), any node and device
    (`frames/gw-1/#` reads one gateway's queue of stream frames)."""
    levels = topic_filter.split("/")
    for length in (2, 3):
        for i, level in enumerate(levels):
            if level == "#":
                return True  # what is before it fits (checked below), the rest it matches
            if i >= length or (i == 0 and level not in (stream, "+")):
                break
        else:
            if len(levels) == length:
                return True
    return False


def placement(topology: Topology, on: list[str]) -> list[str]:
    """The nodes an operator's `on` picks (names, patterns or kind words such as `gateways`),
    each once, in the order given: where its instances run, on every backend."""
    names: dict[str, None] = {}
    for where in on:
        names.update(dict.fromkeys(_named(topology, where)))
    return list(names)


# `on: site:north` places one instance on every node of site north that runs a stream
# processor: its gateways and cloud VMs (a site's brokers carry its streams, as SpecK's sites
# pair an engine with a broker; workloads.jobs composes jobs across sites with it).
SITE = "site:"
SITE_KINDS = ("gateway", "cloud_vm")


def _named(topology: Topology, where: str) -> list[str]:
    """The nodes one `on` entry names: a kind word, `site:NAME`, or node names and patterns."""
    if where.startswith(SITE):
        site = where[len(SITE):]
        return [n.name for n in topology.nodes.values()
                if n.site == site and n.kind in SITE_KINDS]
    kind = KIND_WORDS.get(where)
    return [n.name for n in topology.of_kind(kind)] if kind else topology.match(where)


# Node kinds that run an operator's code (an `on` may name only these).
HOST_KINDS = ("gateway", "broker", "cloud_vm", "coordinator")


def check_placement(topology: Topology, path: tuple, where: str) -> list[str]:
    """The nodes one `on`-like entry names; a SpecError at `path` when it names none, or a
    node that runs no code."""
    from topologies.errors import SpecError

    nodes = _named(topology, where)
    if not nodes and where.startswith(SITE):
        sites = sorted({n.site for n in topology.nodes.values()
                        if n.site is not None and n.kind in SITE_KINDS})
        raise SpecError(path, where, "site:NAME of a site with gateways or cloud VMs ("
                        + (", ".join(sites) or "none") + ")")
    if not nodes:
        raise SpecError(path, where, "a node name, pattern or kind word ("
                        + ", ".join(KIND_WORDS) + ") that matches nodes")
    for name in nodes:
        if topology.nodes[name].kind not in HOST_KINDS:
            raise SpecError(path, where, f"nodes that run code ({', '.join(HOST_KINDS)}), but "
                            f"{name} is a {topology.nodes[name].kind}")
    return nodes


def check_hosts(path: tuple, where: list[str], topology: Topology) -> None:
    """`where` (recovery's or replication's `to`) names gateways or cloud VMs only, at least
    one; a kind word may name none."""
    from topologies.errors import SpecError

    for index, item in enumerate(where):
        nodes = placement(topology, [item])
        wrong = [n for n in nodes if topology.nodes[n].kind not in ("gateway", "cloud_vm")]
        if wrong or (not nodes and item not in KIND_WORDS):  # a kind the topology lacks: none
            raise SpecError((*path, index), item, "gateways or cloud VMs of the topology" + (
                f" (not {wrong[0]}, a {topology.nodes[wrong[0]].kind})"
                if wrong else ": it names none"))
    if not placement(topology, where):
        raise SpecError(path, where, "at least one gateway or cloud VM of the topology")
