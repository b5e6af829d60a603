"""The placement problem, as plain frozen numbers: what a policy receives and what it returns.

A flow is a stream of messages entering an operator at a node: a gateway's devices' readings,
or an upstream operator's output where its instance runs. It is routed as foglab's backends
route a message published at that node (sim.model's publish, sim.pubsub's shared
subscriptions, the containers' MQTT): to the operator's instance on the flow's node if it has
one there (local delivery, no link crossed); else to the node's broker (`Node.broker`), which
hands the operator's instances the messages in turn, each an equal share, over the path
node -> broker -> instance. A node with no broker known sends its share straight to each
instance. This is the objective's account of where a message goes (workloads.placement.
evaluate).

Indices, not names, inside: node i is `problem.nodes[i]`, operator j `problem.operators[j]`;
`latency[i][k]` the path latency in seconds from node i to node k (0 on the diagonal, inf with
no route), `bandwidth[i][k]` the path's narrowest link in bits per second (inf: not a
bottleneck), `joules_per_bit[i][k]` the energy a bit costs on that path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Node:
    """A node of the problem: a candidate host, a flow's node or a broker. `capacity`:
    reference-vCPU seconds per second it offers (speed x cores); `parent`: the next host north
    on its path to the cloud (edge-ward's walk), None at the top. Power in watts, idle and at
    full load; `battery`: joules, None on mains. `broker`: the node (of the problem) whose
    broker what is published here goes through when no local instance reads it (the nearest
    broker, as the backends pick it; itself on a broker node); None: none known, a message
    goes straight to each instance."""

    name: str
    kind: str                       # gateway, cloud_vm, broker, coordinator
    speed: float                    # one core's speed, relative to a reference vCPU
    cores: int
    site: str | None = None
    parent: str | None = None
    power_idle: float = 0.0
    power_busy: float = 0.0
    battery: float | None = None
    memory: int = 0                 # bytes free for operators' state
    broker: str | None = None

    @property
    def capacity(self) -> float:
        return self.speed * self.cores


@dataclass(frozen=True)
class Flow:
    """Messages entering an operator from outside the pipeline: `rate` per second of `size`
    bytes, arriving at node `at` (the gateway the devices publish through), of the workload's
    stream `stream` (what a run-time observation measures: workloads.placement.replace)."""

    at: str
    rate: float
    size: int
    stream: str = ""


@dataclass(frozen=True)
class Operator:
    """An operator to place. `upstream`: the operators whose output it reads; `flows`: the
    devices' streams it reads; `cost`: reference-vCPU seconds per input message (the model's,
    sim.costs); `selectivity`: outputs per input; `state`: bytes of state an instance keeps;
    `candidates`: the nodes it may run on; `pinned`: the nodes `on` names (the policy keeps
    them), None when the policy decides."""

    name: str
    cost: float
    selectivity: float = 1.0
    in_size: int = 100
    out_size: int = 100
    state: int = 0
    upstream: tuple[str, ...] = ()
    flows: tuple[Flow, ...] = ()
    candidates: tuple[str, ...] = ()
    pinned: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Weights:
    """The objective's weights (experiment `placement.objective`): seconds of latency per
    message, network usage (iFogSim's: bytes x seconds of latency, per second), watts."""

    latency: float = 1.0
    network: float = 0.0
    energy: float = 0.0


@dataclass(frozen=True)
class Problem:
    """The operators in an order where each comes after those it reads (the pipeline's),
    the candidate nodes in the topology's order, the paths between them, and the seed."""

    operators: tuple[Operator, ...]
    nodes: tuple[Node, ...]
    latency: tuple[tuple[float, ...], ...]
    bandwidth: tuple[tuple[float, ...], ...] = ()
    joules_per_bit: tuple[tuple[float, ...], ...] = ()
    weights: Weights = field(default_factory=Weights)
    seed: int = 0

    def __post_init__(self) -> None:
        n = len(self.nodes)
        for name, matrix in (("latency", self.latency), ("bandwidth", self.bandwidth),
                             ("joules_per_bit", self.joules_per_bit)):
            if matrix and (len(matrix) != n or any(len(row) != n for row in matrix)):
                raise ValueError(f"problem.{name} is not {n} x {n} (one row per node)")
        names = [o.name for o in self.operators]
        if len(set(names)) != len(names):
            raise ValueError("problem.operators: two operators of one name")
        seen: set[str] = set()
        known = {node.name for node in self.nodes}
        for node in self.nodes:
            if node.broker is not None and node.broker not in known:
                raise ValueError(f"node {node.name} names broker {node.broker}, not a node of "
                                 "the problem")
        for op in self.operators:
            for up in op.upstream:
                if up not in seen:
                    raise ValueError(f"operator {op.name} reads {up}, which is not placed "
                                     "before it (the operators in pipeline order)")
            for where in (*op.candidates, *(op.pinned or ()), *(f.at for f in op.flows)):
                if where not in known:
                    raise ValueError(f"operator {op.name} names node {where}, not a node of "
                                     "the problem")
            seen.add(op.name)

    def index(self) -> Mapping[str, int]:
        """Node name -> index."""
        return {node.name: i for i, node in enumerate(self.nodes)}

    def operator(self, name: str) -> Operator:
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)


# The reason of an operator `on` pins: decide() writes it whatever the policy said.
PINNED = "pinned by `on`"


@dataclass(frozen=True)
class Decision:
    """An answer: each operator's nodes (names, in the problem's node order) and why."""

    nodes: Mapping[str, tuple[str, ...]]
    reasons: Mapping[str, str] = field(default_factory=dict)
    # Filled by whoever decides (workloads.placement.policy.decide): the policy's name, the
    # objective (evaluate.objective), the wall time the decision took, and an exact
    # solver's gap (0: optimal; None: a heuristic).
    policy: str = ""
    objective: float = math.nan
    seconds: float = 0.0
    gap: float | None = None


# Slack on a node's capacity (reference-vCPU s/s): a sum of floats equal to it fits.
ROOM = 1e-9


class Unplaceable(ValueError):
    """No candidate of an operator fits it: `what` names the resource (cpu, memory, route)."""

    def __init__(self, operator: str, what: str, detail: str):
        super().__init__(f"operator {operator} fits on no candidate node: {what} ({detail})")
        self.operator, self.what, self.detail = operator, what, detail

    @classmethod
    def no_room(cls, operator: str, demand: float, free: Mapping[str, float]) -> Unplaceable:
        """An operator needing `demand` reference-vCPU s/s, with `free` the room left on each
        of its candidates (in the problem's order): none at all, or the most there is."""
        if not free:
            return cls(operator, "route", "it has no candidate node")
        best = max(free, key=free.__getitem__)  # the first of equally free ones
        return cls(operator, "cpu", f"needs {demand:.4g} reference-vCPU s/s; the most free on "
                   f"its candidates is {free[best]:.4g} on {best}")
