"""The experiment's `placement:` block: which policy decides where `on: auto` operators run,
with what objective, among which nodes, and how an exact solver is limited.

An operator written `on: auto` is placed by the policy among `among` (its own) or the block's
`candidates`; any other `on` (a node, a kind word such as `gateways`, a pattern, `site:NAME`)
is a pin the policy keeps. The decision is taken once, before the run, by the experiment layer
(experiments.placement), and every backend runs the resolved places. With `replace`, the policy
is asked again every `period` of the run with what was observed (workloads.placement.replace),
and the operators it moves go by the backend's migrations (sim and emu).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from topologies.fields import Names, PositiveDuration, Ratio
from workloads.scenario import Strategy

# `on: auto`: the operator's nodes are the placement policy's to decide.
AUTO = "auto"


class Objective(BaseModel):
    """The weights of what a policy minimises (workloads.placement.evaluate): seconds of
    latency per message, network usage (bytes x seconds per second, iFogSim's), watts."""

    model_config = ConfigDict(extra="forbid")

    latency: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    network: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    energy: float = Field(default=0.0, ge=0, allow_inf_nan=False)


class Solver(BaseModel):
    """Limits of an exact policy (optimal): wall time and the relative gap it may stop at."""

    model_config = ConfigDict(extra="forbid")

    time_limit: PositiveDuration = 5.0
    gap: float = Field(default=0.0, ge=0, lt=1)


class Replace(BaseModel):
    """`placement.replace`: re-placement at run time (workloads.placement.replace). Every
    `period` the policy's `replace` is asked with what the run observed over it; its answer
    is taken only when it lowers the objective by more than `hysteresis` (a fraction of the
    objective now) and stays within its nodes' capacity at (1 + hysteresis) times the rates
    seen; then at most `moves` instances move, each by `strategy` (default:
    scenario.migration.strategy)."""

    model_config = ConfigDict(extra="forbid")

    period: PositiveDuration = Field(description="how often the policy is asked again")
    hysteresis: Ratio = Field(default=0.1, ge=0, lt=1, description=(
        "the share of the objective a new decision must save, and the headroom over the rates "
        "seen it must leave, to be taken (10% or 0.1)"))
    moves: int = Field(default=1, ge=1, description="the most instances moved per period")
    strategy: Strategy | None = Field(default=None, description=(
        "how an instance moves (default: scenario.migration.strategy)"))


class PlacementSpec(BaseModel):
    """`placement:` of an experiment."""

    model_config = ConfigDict(extra="forbid")

    policy: str = Field(description="a shipped policy (cloud-only, edge-ward, round-robin, "
                        "latency-aware, network-aware, energy-aware, optimal) or a user's "
                        "module:Class (a workloads.placement.policy.Policy)")
    settings: dict[str, Any] = Field(default_factory=dict,
                                     description="the policy's own settings")
    objective: Objective = Field(default_factory=Objective)
    candidates: Names = Field(
        default_factory=lambda: ["gateways", "cloud"], min_length=1,
        description="where `on: auto` operators may run (names, patterns, kind words, "
                    "site:NAME) unless an operator gives its own `among`")
    solver: Solver = Field(default_factory=Solver)
    replace: Replace | None = Field(default=None, description=(
        "re-placement at run time (sim, emu): period, hysteresis, most moves, strategy"))

