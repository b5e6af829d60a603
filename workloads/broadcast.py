"""The schema of control-message broadcasts (`scenario.broadcasts`) and their check against
the topology (issue 19, item 3; seed 000's broadcast figure).

A broadcast sends one control message from a coordinator to N workers, either `naive` (the
coordinator sends to each worker in turn) or over a `tree` (the coordinator and then every
worker reached forwards to up to `fanout` children: the coordinator is the root and the
workers, in declaration order, fill the tree level by level, so worker i (from 1) hangs under
node (i - 1) // fanout, 0 being the coordinator). Each send costs its sender `cost` of CPU (on
one reference vCPU, scaled by the node's speed) before the message goes on the sender's links.

Part of the experiment description, so it imports nothing of the simulator: `resolve` turns
the broadcasts as written into what the model runs, and both the validation
(experiments.checks) and the model (sim.features.broadcasts) call it. `results` builds the
`broadcasts` table and each broadcast's completion for the run's facts from the rows of the
workers reached, alike for the model and the emulation (emu.features.broadcasts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from topologies.errors import SpecError
from topologies.fields import Names, NonNegativeDuration, Size
from topologies.model import Topology
from workloads.reports import NAME, TIME_TOLERANCE_S, FeatureTable, fail, required

# The broadcasts table's columns (experiments.schema): a row per worker reached.
COLUMNS = ("broadcast", "mode", "fanout", "worker", "depth", "t_sent", "t_received", "latency")
# Node kinds that run code, so they can send and forward (sim.assembly.HOSTS).
SENDERS = ("gateway", "broker", "cloud_vm", "coordinator")




class BroadcastSpec(BaseModel):
    """One control message from `from` to every node matching `to`, at `at`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    at: NonNegativeDuration = Field(description="when the coordinator starts sending")
    source: str = Field(alias="from", description="the node that broadcasts (a coordinator)")
    to: Annotated[Names, Field(min_length=1)] = Field(
        description="the workers: node names or patterns (worker-*)")
    mode: Literal["naive", "tree"] = "naive"
    fanout: int = Field(default=2, ge=1, le=1000,
                        description="tree: children each node forwards to")
    size: Size = Field(default=1024, gt=0, description="the control message's bytes")
    cost: NonNegativeDuration = Field(
        default=1e-3, description="CPU per send (serialising, the framework's send call) on "
                                  "one reference vCPU")


@dataclass(frozen=True)
class Planned:
    """One broadcast as the model runs it: its sender, its workers in order, and its tree."""

    index: int
    at: float
    source: str
    workers: tuple[str, ...]
    mode: str
    fanout: int  # 0 for naive: the coordinator sends to all
    size: int
    cost: float

    def parent(self, i: int) -> int:
        """The sender of worker i (1..N; 0 is the coordinator)."""
        return 0 if self.mode == "naive" else (i - 1) // self.fanout

    def children(self, i: int) -> range:
        """Who node i (0: the coordinator, 1..N: the workers) sends to, in order."""
        n = len(self.workers)
        if self.mode == "naive":
            return range(1, n + 1) if i == 0 else range(0)
        return range(i * self.fanout + 1, min(i * self.fanout + self.fanout, n) + 1)

    def depth(self, i: int) -> int:
        depth = 0
        while i:
            i, depth = self.parent(i), depth + 1
        return depth


def _path(i: int, *rest) -> tuple:
    return ("scenario", "broadcasts", i, *rest)


def resolve(broadcasts: list[BroadcastSpec], topology: Topology, duration: float
            ) -> list[Planned]:
    """The broadcasts checked against the topology and the run's duration: a SpecError naming
    the field path (scenario.broadcasts[i]....), the value and what was expected."""
    return [_resolve(i, b, topology, duration) for i, b in enumerate(broadcasts)]


def _resolve(i: int, spec: BroadcastSpec, topology: Topology, duration: float) -> Planned:
    if spec.at >= duration:
        raise SpecError(_path(i, "at"), spec.at,
                        f"a time before the run ends (run.duration: {duration:g} s)")
    if spec.source not in topology.nodes:
        raise SpecError(_path(i, "from"), spec.source,
                        f"one node's name of topology {topology.name}")
    _runs_code(topology, _path(i, "from"), spec.source, spec.source)
    for j, pattern in enumerate(spec.to):
        where = _path(i, "to", j) if len(spec.to) > 1 else _path(i, "to")
        found = topology.match(pattern)
        if not found:
            raise SpecError(where, pattern, f"a node name or pattern of topology "
                            f"{topology.name}")
        for name in found:
            _runs_code(topology, where, pattern, name)
            if name == spec.source:
                raise SpecError(where, pattern, f"workers other than the sender "
                                f"(from: {spec.source})")
    workers = tuple(topology.select(spec.to))
    return Planned(i, spec.at, spec.source, workers, spec.mode,
                   spec.fanout if spec.mode == "tree" else 0, spec.size, spec.cost)


def _runs_code(topology: Topology, path: tuple, value: str, name: str) -> None:
    kind = topology.nodes[name].kind
    if kind not in SENDERS:
        raise SpecError(path, value, f"nodes that run code and can send or forward "
                        f"({', '.join(SENDERS)}), but {name} is a {kind}")


def results(planned: list[Planned], rows: list[tuple]) -> tuple[dict, list[dict]]:
    """The `broadcasts` table's columns and the facts' `broadcasts` (each broadcast's
    completion: the latency of its last worker, None when not every worker was reached) from
    the rows of the workers reached, each a tuple of COLUMNS' values."""
    import numpy as np

    rows = sorted(rows, key=lambda r: (r[0], r[6]))
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in COLUMNS]
    table = {name: np.array(values, dtype=object if name in ("mode", "worker") else None)
             for name, values in zip(COLUMNS, columns, strict=True)}
    summary = []
    for plan in planned:
        mine = [r for r in rows if r[0] == plan.index]
        summary.append({"id": plan.index, "mode": plan.mode, "fanout": plan.fanout,
                        "from": plan.source, "workers": len(plan.workers),
                        "reached": len(mine), "at": plan.at,
                        "completion": max(r[7] for r in mine) if len(mine) == len(
                            plan.workers) else None,  # not every worker reached
                        "depth": max((r[4] for r in mine), default=0)})
    return table, summary


def check(spec, topology: Topology) -> None:
    """`scenario.broadcasts` against the topology and the run (`resolve`)."""
    resolve(spec.scenario.broadcasts, topology, spec.run.duration)


# -- its table ----------------------------------------------------------------------------

# A control message that reached a worker: the broadcast's index, mode, fanout (0: naive), the
# worker, its depth in the tree (hops of forwarding from the sender), when the broadcast
# began, when the worker had it.
SCHEMA = pa.schema([
    ("broadcast", pa.int64()), ("mode", NAME), ("fanout", pa.int64()), ("worker", NAME),
    ("depth", pa.int64()), ("t_sent", pa.float64()), ("t_received", pa.float64()),
    ("latency", pa.float64()),
])


def _check_table(name: str, table: pa.Table) -> None:
    required(name, table, list(SCHEMA.names))
    fail(name, table, "latency is t_received - t_sent", pc.greater(pc.abs(pc.subtract(
        table.column("latency"), pc.subtract(table.column("t_received"),
                                             table.column("t_sent")))), TIME_TOLERANCE_S))
    fail(name, table, "latency is >= 0", pc.less(table.column("latency"), -TIME_TOLERANCE_S))
    fail(name, table, "depth is >= 1 (a worker is one send or more from the sender)",
         pc.less(table.column("depth"), 1))


TABLES = {"broadcasts": FeatureTable(SCHEMA, _check_table)}
