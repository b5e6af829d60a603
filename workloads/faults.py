"""The schema of a fault schedule (`scenario.faults`) and its check against the topology.

Part of the experiment description, so it imports nothing of the simulator or the emulation:
`resolve` turns the faults as written into what a backend injects (the nodes and links each
one touches, from when to when), and refuses a schedule that names what the topology lacks,
applies a fault to a node of the wrong kind, overlaps two faults on one node or link, or
runs past the run's end. Both the validation (experiments.checks) and the model
(sim.features.faults) call it, so the two cannot read a schedule differently.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Annotated

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from topologies.errors import SpecError
from topologies.fields import Names, NonNegativeDuration, PositiveDuration, Ratio
from topologies.model import Topology
from workloads.reports import NAME, FeatureTable, fail, required

KINDS = ("crash", "partition", "delay", "loss", "slow", "restart")
# The node kinds each node fault applies to: a crash stops anything that serves or forwards
# (a switch too), slow scales a CPU (nodes that run code), restart is a broker's process.
CRASHABLE = ("gateway", "broker", "cloud_vm", "coordinator", "switch")
WITH_CPU = ("gateway", "broker", "cloud_vm", "coordinator")
NODE_FAULTS = ("crash", "slow", "restart")
LINK_FAULTS = ("delay", "loss")


Patterns = Annotated[Names, Field(min_length=1)]


class _Fault(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    at: NonNegativeDuration = Field(description="when the fault starts, from the run's start")
    duration: PositiveDuration | None = Field(
        default=None, alias="for", description="how long until it is healed")


class LinkRef(BaseModel):
    """The links a fault acts on, named as the topology's link rules name them: every link
    between a node matching `from` and one matching `to` (both directions)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    source: Patterns = Field(alias="from")
    target: Patterns = Field(alias="to")


    def __str__(self) -> str:
        return f"{','.join(self.source)}>{','.join(self.target)}"


class Crash(_Fault):
    """The node stops: it drops what it holds and serves nothing until `for` ends (without
    `for`: for good)."""

    crash: Patterns = Field(description="node names or patterns (gw-1*)")


class Partition(_Fault):
    """No traffic crosses between two groups of nodes for `for`."""

    partition: tuple[Patterns, Patterns] = Field(
        description="[GROUP_A, GROUP_B], each a node name or pattern, or a list of them")
    duration: PositiveDuration = Field(alias="for")


class Delay(_Fault):
    """Added latency (and jitter) on links for `for`."""

    delay: LinkRef
    latency: PositiveDuration = Field(description="added to each direction's latency")
    jitter: NonNegativeDuration = Field(default=0.0, description="added jitter")
    duration: PositiveDuration = Field(alias="for")


class Loss(_Fault):
    """Links drop a share of what crosses them for `for`."""

    loss: LinkRef
    rate: Ratio = Field(gt=0, le=1, description="the share dropped, beside the link's own")
    duration: PositiveDuration = Field(alias="for")


class Slow(_Fault):
    """The node's processing takes `factor` times as long for `for`."""

    slow: Patterns = Field(description="node names or patterns")
    factor: float = Field(gt=1, le=1000, allow_inf_nan=False,
                          description="how many times slower the node processes")
    duration: PositiveDuration = Field(alias="for")


class Restart(_Fault):
    """The broker process restarts: down for `for` (default 1 s). What it queued at QoS 0 is
    lost; QoS 1 messages of persistent sessions are kept and delivered after."""

    restart: Patterns = Field(description="broker names or patterns")
    duration: PositiveDuration = Field(default=1.0, alias="for")


def kind_of(value: object) -> str | None:
    """Which fault a fault is (as written, or as validated): crash, partition, ..., or None."""
    if isinstance(value, dict):
        found = [kind for kind in KINDS if kind in value]
        return found[0] if len(found) == 1 else None
    found = [kind for kind in KINDS if hasattr(value, kind)]
    return found[0] if found else None


def _tag(value: object) -> str | None:
    # Capitalised, so an error's field path leaves the tag out (experiments.loader).
    kind = kind_of(value)
    return kind.capitalize() if kind else None


FaultSpec = Annotated[
    Annotated[Crash, Tag("Crash")] | Annotated[Partition, Tag("Partition")]
    | Annotated[Delay, Tag("Delay")] | Annotated[Loss, Tag("Loss")]
    | Annotated[Slow, Tag("Slow")] | Annotated[Restart, Tag("Restart")],
    Discriminator(_tag, custom_error_type="fault_kind",
                  custom_error_message="a fault with exactly one of the keys "
                                       + ", ".join(KINDS))]


@dataclass(frozen=True)
class Injected:
    """One fault as a backend injects it: what it touches, from when to when (t_end None:
    for good), and its parameters for the `faults` table."""

    index: int
    kind: str
    target: str  # as written
    t_start: float
    t_end: float | None
    params: dict = field(default_factory=dict)
    nodes: tuple[str, ...] = ()  # crash, slow, restart
    links: tuple[tuple[str, str], ...] = ()  # delay, loss: (a, b) as in the topology
    groups: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # partition

    def touches(self) -> set:
        """What two faults of one kind family may not share at once."""
        if self.kind in LINK_FAULTS:
            return {(self.kind, link) for link in self.links}
        if self.kind == "partition":
            return {("partition", n) for group in self.groups for n in group}
        return {("node", n) for n in self.nodes}

    def describe(self) -> str:
        end = "for good" if self.t_end is None else f"to {self.t_end:g} s"
        return f"{self.kind} of {self.target} from {self.t_start:g} s {end}"


def columns(faults: list[Injected]) -> dict[str, list]:
    """The `faults` table (experiments.schema) of what was injected."""
    return {"kind": [f.kind for f in faults], "target": [f.target for f in faults],
            "t_start": [f.t_start for f in faults],
            "t_end": [math.nan if f.t_end is None else f.t_end for f in faults],
            "params": [json.dumps(f.params, sort_keys=True) for f in faults]}


def resolve(faults: list, topology: Topology, duration: float) -> list[Injected]:
    """The schedule checked against the topology and the run's duration: a SpecError naming
    the field path (scenario.faults[i]....), the value and what was expected, else the
    faults as injected."""
    injected = [_resolve(i, fault, topology, duration) for i, fault in enumerate(faults)]
    _check_overlaps(injected)
    return injected


def _path(i: int, *rest) -> tuple:
    return ("scenario", "faults", i, *rest)


def _resolve(i: int, fault, topology: Topology, duration: float) -> Injected:
    kind = kind_of(fault)
    if fault.at >= duration:
        raise SpecError(_path(i, "at"), fault.at, f"a time before the run ends "
                        f"(run.duration: {duration:g} s)")
    end = None if fault.duration is None else fault.at + fault.duration
    if end is not None and end > duration + 1e-9:
        raise SpecError(_path(i, "for"), fault.duration,
                        f"a duration that heals the fault by the run's end ({fault.at:g} s + "
                        f"{fault.duration:g} s > run.duration {duration:g} s)")
    common = dict(index=i, kind=kind, t_start=fault.at, t_end=end)
    if kind in NODE_FAULTS:
        patterns = getattr(fault, kind)
        allowed = {"crash": CRASHABLE, "slow": WITH_CPU, "restart": ("broker",)}[kind]
        nodes = _nodes(topology, _path(i, kind), patterns, allowed, kind)
        params = {"factor": fault.factor} if kind == "slow" else {}
        return Injected(target=",".join(patterns), params=params, nodes=tuple(nodes), **common)
    if kind in LINK_FAULTS:
        ref: LinkRef = getattr(fault, kind)
        links = _links(topology, _path(i, kind), ref)
        params = ({"latency": fault.latency, "jitter": fault.jitter} if kind == "delay"
                  else {"rate": fault.rate})
        return Injected(target=str(ref), params=params, links=tuple(links), **common)
    a, b = (_nodes(topology, _path(i, "partition", g), group, None, "partition")
            for g, group in enumerate(fault.partition))
    shared = sorted(set(a) & set(b))
    if shared:
        raise SpecError(_path(i, "partition"), [list(g) for g in fault.partition],
                        f"two groups with no node in common, but {shared[0]} is in both")
    return Injected(target="|".join(",".join(g) for g in fault.partition),
                    groups=(tuple(a), tuple(b)), **common)


def _nodes(topology: Topology, path: tuple, patterns: list[str], allowed, kind: str
           ) -> list[str]:
    for j, pattern in enumerate(patterns):
        if not topology.match(pattern):
            raise SpecError(path + (j,) if len(patterns) > 1 else path, pattern,
                            f"a node name or pattern of topology {topology.name}")
    nodes = topology.select(patterns)
    if allowed is not None:
        for name in nodes:
            node_kind = topology.nodes[name].kind
            if node_kind not in allowed:
                raise SpecError(path, patterns if len(patterns) > 1 else patterns[0],
                                f"nodes a {kind} applies to ({', '.join(allowed)}), but "
                                f"{name} is a {node_kind}")
    return nodes


def _links(topology: Topology, path: tuple, ref: LinkRef) -> list[tuple[str, str]]:
    ends = []
    for side, patterns in (("from", ref.source), ("to", ref.target)):
        ends.append(set(_nodes(topology, path + (side,), patterns, None, "link fault")))
    links = [(link.a, link.b) for link in topology.links
             if (link.a in ends[0] and link.b in ends[1])
             or (link.b in ends[0] and link.a in ends[1])]
    if not links:
        raise SpecError(path, str(ref), f"links of topology {topology.name} (no link joins "
                        f"a node of from: {ref.source} to one of to: {ref.target})")
    return links


def _check_overlaps(faults: list[Injected]) -> None:
    for j, later in enumerate(faults):
        for earlier in faults[:j]:
            if not _overlap(earlier, later):
                continue
            shared = earlier.touches() & later.touches()
            if shared:
                what = sorted(shared, key=str)[0][1]
                what = what if isinstance(what, str) else f"the link {what[0]} <> {what[1]}"
                raise SpecError(_path(later.index), later.describe(),
                                f"a fault that does not overlap scenario.faults"
                                f"[{earlier.index}] ({earlier.describe()}) on {what}")


def _overlap(a: Injected, b: Injected) -> bool:
    a_end = math.inf if a.t_end is None else a.t_end
    b_end = math.inf if b.t_end is None else b.t_end
    return a.t_start < b_end and b.t_start < a_end


def check(spec, topology: Topology) -> None:
    """`scenario.faults` against the topology and the run (`resolve`)."""
    resolve(spec.scenario.faults, topology, spec.run.duration)


# -- its table ----------------------------------------------------------------------------

def _check_table(name: str, table: pa.Table) -> None:
    required(name, table, ["kind", "target", "t_start", "params"])
    fail(name, table, "t_end is null (for good) or after t_start",
         pc.less_equal(table.column("t_end"), table.column("t_start")))


# A fault injected on the scenario's schedule: its kind, its target as written, when it began
# and was healed (null: for good), its parameters as JSON.
TABLES = {"faults": FeatureTable(pa.schema([
    ("kind", NAME), ("target", pa.string()), ("t_start", pa.float64()),
    ("t_end", pa.float64()), ("params", pa.string()),
]), _check_table)}
