"""Dynamic task replication (seed 000, the QoS white paper: replicate a streaming task "only
when achieving QoS demands that we do so, like when monitoring shows that the initial task is
delayed"): an operator's latency bound (`slo`), the scenario's `replication` settings, and the
controller's decision, shared by the model (sim.features.replication) and the emulation
(emu.features.replication) so that both decide alike from what they measure.

What is measured, on both backends: an operator's latency in an interval is the 95th
percentile, over the inputs its instances processed in that interval, of the time from an
input's emission (its t_sent) to the end of its processing: what the operator's consumers
see. It holds the network, which replication cannot shorten, and every queue on the way:
the node's, and the broker's, where a QoS 1 input waits once the instance has its maximum
of unacknowledged messages in flight (so the node's queue alone would hide an overload).
The worst instance's figure stands for the operator.

The controller reads every operator with an `slo` each `interval`. After `up` intervals in a
row over the bound, a replica starts on the candidate nearest the operator's input
(workloads.recovery.place over `to`, less the nodes that run it already), up to `max`
instances; the operator's instances share its input (one shared subscription: each message
reaches one of them). After `down` intervals in a row under `retire_below` times the bound
(or with no input), the newest replica retires; the operator's first instances never do.
Every decision starts the counts again, so a replica's effect is seen before the next.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from topologies.fields import PositiveDuration
from workloads.faults import Patterns
from workloads.operator_engines import operator_engine
from workloads.reports import NAME, FeatureTable

PERCENTILE = 95


class ReplicationSpec(BaseModel):
    """When the controller starts and retires replicas of operators that have an `slo`."""

    model_config = ConfigDict(extra="forbid")

    interval: PositiveDuration = Field(
        default=1.0, description="how often the controller reads each operator's latency")
    up: int = Field(default=2, ge=1, description="intervals in a row over the bound before a "
                                                 "replica starts")
    down: int = Field(default=5, ge=1, description="intervals in a row under retire_below x "
                                                   "the bound before the newest replica retires")
    retire_below: float = Field(default=0.5, gt=0, lt=1)
    max: int = Field(default=4, ge=2, description="instances of an operator at most, its "
                                                  "first ones included")
    to: Patterns = Field(
        default_factory=lambda: ["gateways", "cloud_vms"],
        description="where replicas may start (names, patterns or kinds); each on the one "
                    "nearest the operator's input")


def percentile(values: list[float], q: float = PERCENTILE) -> float:
    """The q-th percentile by the nearest rank (no interpolation: the same on every host)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


@dataclass
class Scaler:
    """One operator's replication decisions: `observe` once per interval with its latency
    (None: no input in the interval) and how many instances it has; answers "start",
    "retire" or None. `first` is how many instances the deployment gave it (never retired)."""

    spec: ReplicationSpec
    slo: float
    first: int = 1
    over: int = 0
    under: int = 0

    def observe(self, latency: float | None, instances: int) -> str | None:
        if latency is not None and latency > self.slo:
            self.over, self.under = self.over + 1, 0
        elif latency is None or latency < self.spec.retire_below * self.slo:
            self.over, self.under = 0, self.under + 1
        else:
            self.over = self.under = 0
        if self.over >= self.spec.up and instances < self.spec.max:
            self.over = self.under = 0
            return "start"
        if self.under >= self.spec.down and instances > self.first:
            self.over = self.under = 0
            return "retire"
        return None


def check(spec, topology) -> None:
    """An slo only where replicas can share the input; replication only with an slo, onto
    nodes that run operators, deciding at an interval inside the run."""
    from topologies.errors import SpecError
    from workloads.pipeline import check_hosts

    for index, operator in enumerate(spec.pipeline):
        if operator.slo is None:
            continue
        path = ("pipeline", index, "slo")
        if operator.window is not None or not operator_engine(operator.engine).in_agent:
            raise SpecError(path, operator.slo, "an slo on a stateless python operator: "
                            f"replicas of {operator.name!r} would share its input, and a "
                            "window's state (or a Spark query's) does not split")
        if operator.follow is not None:
            raise SpecError(path, operator.slo, "no slo for a follow operator: its instances "
                            "are one per user")
    replication = spec.scenario.replication
    if replication is None:
        return
    if not any(operator.slo is not None for operator in spec.pipeline):
        raise SpecError(("scenario", "replication"), "...", "an operator with an `slo`: "
                        "replication watches only those")
    if replication.interval >= spec.run.duration:
        raise SpecError(("scenario", "replication", "interval"), replication.interval,
                        f"an interval shorter than the run (run.duration: "
                        f"{spec.run.duration:g} s): no decision would be taken")
    check_hosts(("scenario", "replication", "to"), replication.to, topology)


# A replica of an operator started or retired: when, the operator, what, on which node, the
# operator's instances after it, and the latency (95th percentile, s) and bound that decided.
TABLES = {"replicas": FeatureTable(pa.schema([
    ("t", pa.float64()), ("operator", NAME), ("action", NAME), ("node", NAME),
    ("instances", pa.int64()), ("latency", pa.float64()), ("slo", pa.float64()),
]))}
