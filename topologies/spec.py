"""The schema of a topology file: node groups, sites, profiles and link rules, as written."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from topologies.brokers import BROKER_KINDS, DEFAULT_BROKER_KIND, BrokerKindName, models_refusal
from topologies.fields import Bandwidth, Name, Names, NonNegativeDuration, PositiveDuration, Ratio
from topologies.profiles import NodeKind, Profile

# The model (sim) takes large topologies; the emulation refuses, before it starts anything,
# what its host cannot take (emu.cluster.capacity.check_host_cap, docs/capacity.md).
MAX_REPLICAS = 1_000_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BrokerSpec(_Strict):
    """How a broker node serves messages: the server it runs on emu, a service time and a
    latency profile on sim."""

    kind: BrokerKindName = Field(default=DEFAULT_BROKER_KIND.name, description=(
        "the broker's server. emu: mosquitto runs Mosquitto (the services image), rabbitmq "
        "Debian's RabbitMQ 3.10 with its MQTT plugin (the rabbitmq image), both MQTT on 1883; "
        "rabbitmq runs at run.dilation 1, with run.access open, on run.engine docker only. "
        "sim: a rabbitmq broker is the rabbitmq-like model (model: kafka-like is refused), a "
        "mosquitto one the model `model` names"))
    # rabbitmq-like: steady service; kafka-like: periodic disk flushes stall the broker for
    # flush_base plus the bytes written since the last flush at disk_bandwidth (seed 001, 5.1).
    model: Literal["rabbitmq-like", "kafka-like"] = "rabbitmq-like"
    service_time: NonNegativeDuration = 50e-6
    flush_interval: PositiveDuration = 1.0
    flush_base: NonNegativeDuration = 5e-3
    disk_bandwidth: Bandwidth = 400e6

    @field_validator("model")
    @classmethod
    def _model_of_kind(cls, model: str, info: ValidationInfo) -> str:
        # A kind may stand for some models only (RabbitMQ: Kafka is not packaged here).
        kind = BROKER_KINDS.get(info.data.get("kind"))
        refusal = models_refusal(kind, model) if kind is not None else None
        if refusal is not None:
            raise ValueError(refusal)
        return model


class SiteSpec(_Strict):
    name: Name
    position: tuple[float, float] = (0.0, 0.0)


class NodeSpec(_Strict):
    """One node, or `replicas` alike nodes named `<name>-1` .. `<name>-<replicas>`."""

    name: Name
    kind: NodeKind
    replicas: int | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    profile: Name | None = None
    site: Name | None = None
    position: tuple[float, float] | None = None
    spacing: float = Field(default=50.0, gt=0, description="metres between replicas on their grid")
    broker: BrokerSpec | None = None


Patterns = Names


class LinkSpec(_Strict):
    """A link rule: every node matching `from` to the nodes matching `to` (later rules win)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    source: Patterns = Field(alias="from", min_length=1)
    target: Patterns = Field(alias="to", min_length=1)
    latency: NonNegativeDuration = 0.0
    jitter: NonNegativeDuration = 0.0
    bandwidth: Bandwidth | None = None
    loss: Ratio = 0.0
    # all: each source to each target; spread: sources split into contiguous blocks, one
    # block per target (200 sensors over 4 gateways: 50 each).
    mode: Literal["all", "spread"] = "all"


class SparkClusterSpec(_Strict):
    """A Spark standalone cluster among the topology's cloud VMs: the pipeline's `engine: spark`
    operators then run their jobs on it (on emu; the model runs each on its own node)."""

    master: Name
    workers: list[Name] = Field(min_length=1)
    cores: int = Field(default=1, ge=1, le=256, description="each worker's cores for executors")
    memory: str = Field(default="512m", pattern=r"^[0-9]+[mg]$",
                        description="each worker's memory for executors, e.g. 512m or 2g")


class TopologySpec(_Strict):
    """A topology file as written."""

    name: Name
    description: str = ""
    profiles: dict[Name, Profile] = Field(default_factory=dict)
    sites: list[SiteSpec] = Field(default_factory=list)
    nodes: list[NodeSpec] = Field(min_length=1)
    links: list[LinkSpec] = Field(default_factory=list)
    spark: SparkClusterSpec | None = None
