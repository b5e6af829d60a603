"""What happens to a running pipeline over time: operator migrations and how they are carried out.

Shared by the simulated and the emulated backends, so both read one scenario the same way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from topologies.fields import Bandwidth, Name, NonNegativeDuration, Size

Strategy = Literal["pause_drain", "pause_transfer", "parallel"]


class MigrationSettings(BaseModel):
    """How migrations are carried out (thesis chapters 5 and 6) and what they cost."""

    model_config = ConfigDict(extra="forbid")

    strategy: Strategy = "pause_transfer"
    launch: NonNegativeDuration = Field(default=2.0, description="start-up of the target")
    command: NonNegativeDuration = Field(
        default=10e-3, description="an agent's handling of one coordinator command")
    housekeeping: NonNegativeDuration = Field(
        default=0.0, description="clean-up after the switch, before the migration ends")
    chunk: Size = Field(default=1024 * 1024, gt=0, description="bytes per state-store write")
    chunk_overhead: NonNegativeDuration = Field(
        default=20e-3, description="per chunk: znode write, watch notification, read, delete")
    state_per_event: Size = Field(
        default=64, description="bytes of state per event held in the open window")
    state_base: Size = 1024
    restore_bandwidth: Bandwidth = Field(
        default=400e6, description="how fast the target loads transferred state")
    sync: int = Field(default=2, ge=0, description="parallel: synchronisation factor S")
    store: str | None = Field(
        default=None, description="node of the state store (default: the first coordinator, "
                                  "else the first broker)")
    spark: Literal["checkpoint", "export"] = Field(
        default="checkpoint", description="how a Spark query's state moves with pause_transfer "
        "(emu): its checkpoint copied into a warm standby, or its per-sensor state exported "
        "into a new query's initialState")


class ScheduledMigration(BaseModel):
    """Move an operator's instance at a given time."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    at: NonNegativeDuration
    within_window: bool = Field(
        default=False, description="add a random phase in [0, window) to `at`, as a migration "
                                   "starts at any point in a window")
    operator: Name
    source: str | None = Field(default=None, alias="from",
                               description="the instance to move (default: the only one)")
    target: str = Field(alias="to")
    strategy: Strategy | None = None



class PolicySpec(BaseModel):
    """When and where a follow operator's per-user instance moves as its user moves."""

    model_config = ConfigDict(extra="forbid")

    operator: Name = Field(description="a pipeline operator with `follow: users`")
    kind: Literal["latency_threshold", "nearest_gateway"] = "latency_threshold"
    threshold: NonNegativeDuration = Field(
        default=40e-3, description="latency_threshold: move when the user's latency to its "
                                   "instance exceeds this plus the hysteresis")
    hysteresis: NonNegativeDuration = Field(
        default=10e-3, description="latency_threshold: margin above the threshold; "
                                   "nearest_gateway: none")
    capacity: int = Field(default=64, ge=1, description="follow instances a gateway may host")
    fallback: list[str] = Field(
        default_factory=lambda: ["cloud"], min_length=1,
        description="where an instance goes when no gateway fits (names, patterns, kinds)")
    strategy: Strategy | None = None
