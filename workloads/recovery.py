"""Failure detection and recovery (`scenario.recovery`, an operator's `checkpoint`): the schema,
the detector's timing and the re-placement rule, shared by the model and the emulation.

The detector is ZooKeeper's: each gateway's agent holds a session with an ephemeral znode
(`/iot/gateways/<node>`, emu.agent.registry); a crashed agent stops pinging, the server
expires its session `session_timeout` after the last thing it heard, on its next tick, and
the znode goes. A controller watching the znodes (emu.features.recovery;
sim.features.recovery models it) re-places the operators that ran on the node, each on the
live candidate nearest its input (`place`), and restores each from its last checkpoint: the
operator's state written to
ZooKeeper every `checkpoint` seconds by the instance (in chunks of at most 1 MB, as migration
moves state). The operator's input session (its own persistent MQTT session, QoS 1) held
what came meanwhile; the new instance takes it over. What the crashed instance processed
after its last checkpoint is gone with it (`rolled_back`), and what it had taken from the
broker but not processed is lost (`lost`).

One source for the timings both backends use: ZooKeeper's tick (the emulation's zoo.cfg
is written from ZK_TICK_S) and the clients' ping interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator

from topologies.fields import PositiveDuration
from topologies.routing import NoRoute, Routes
from workloads.faults import Patterns
from workloads.operator_engines import operator_engine
from workloads.reports import NAME, FeatureTable

# ZooKeeper's tickTime in the emulation (emu.cluster.plan writes it into zoo.cfg): a session
# expires on the first tick after its deadline. Small so that a 2 s session is noticed in
# about 2 s (the default tick, 2 s, allows no session under 4 s).
ZK_TICK_S = 0.2
# Sessions ZooKeeper accepts, in ticks (its defaults are 2 and 20 ticks: 0.4 to 4 s here,
# too short for the agents' 10 s default); zoo.cfg states them.
ZK_MIN_SESSION_TICKS = 2
ZK_MAX_SESSION_TICKS = 600
# A client pings when it sent nothing for a third of its session timeout (kazoo, and
# emu.agent.zookeeper as it): the server last heard of a crashed one up to that long before.
PING_FRACTION = 1 / 3
# An instance's checkpoints fall this far into each period of the run's grid: at
# (k + CHECKPOINT_PHASE) * checkpoint seconds, between the closes of windows aligned on the
# grid, never at one (a snapshot just before a close would restore a window already sent).
# emu.agent.checkpoint keeps the same (its image carries no pydantic; a test keeps them equal).
CHECKPOINT_PHASE = 0.5
# An agent's ZooKeeper session timeout when the scenario does not ask for detection.
DEFAULT_SESSION_TIMEOUT = 10.0


class RecoverySpec(BaseModel):
    """Detect crashed gateways through their ZooKeeper sessions and re-place their operators."""

    model_config = ConfigDict(extra="forbid")

    session_timeout: PositiveDuration = Field(
        default=2.0, description="each agent's ZooKeeper session timeout: a crashed node is "
        "noticed this long after the server last heard from it (on ZooKeeper's next tick)")
    to: Patterns = Field(
        default_factory=lambda: ["gateways", "cloud_vms"],
        description="where a crashed node's operators may go (names, patterns or kinds); "
                    "each goes to the live one nearest its input")

    @field_validator("session_timeout")
    @classmethod
    def _zookeeper_accepts(cls, timeout: float) -> float:
        low, high = ZK_MIN_SESSION_TICKS * ZK_TICK_S, ZK_MAX_SESSION_TICKS * ZK_TICK_S
        if not low <= timeout <= high:
            raise ValueError(f"{timeout:g} s is outside what ZooKeeper accepts here: "
                             f"{low:g} s to {high:g} s")
        return timeout


def ping_interval(session_timeout: float) -> float:
    return session_timeout * PING_FRACTION


def expiry(t_crash: float, session_timeout: float, phase: float,
           tick: float = ZK_TICK_S, tick_phase: float = 0.0) -> float:
    """When ZooKeeper expires the session of an agent that crashed at `t_crash`.

    The agent pinged every `ping_interval` from `phase` on (the server heard of it last at
    the last ping at or before the crash); the server expires a session on the first of its
    ticks (every `tick` from `tick_phase`) after the last contact plus the timeout."""
    every = ping_interval(session_timeout)
    last = phase + math.floor((t_crash - phase) / every) * every if t_crash >= phase else t_crash
    deadline = last + session_timeout
    return tick_phase + math.ceil((deadline - tick_phase) / tick - 1e-9) * tick


def path_latency(topology) -> Callable[[str, str], float]:
    """The topology's path latency between two nodes, inf where no path joins them: what
    `place` weighs on emu (the model weighs its own network's, the same paths)."""
    routes = Routes(topology)

    def latency(a: str, b: str) -> float:
        try:
            return routes.latency(a, b)
        except NoRoute:
            return math.inf

    return latency


def place(candidates: Iterable[str], sources: Iterable[str],
          latency: Callable[[str, str], float]) -> str | None:
    """The candidate nearest the operator's input: the least mean path latency from its
    sources (the devices of the streams it reads), ties to the first in `candidates`'s order;
    None when no candidate is left. With no sources, the first candidate."""
    candidates = list(candidates)
    sources = list(sources)
    if not candidates:
        return None
    if not sources:
        return candidates[0]

    def mean_latency(node: str) -> float:
        return sum(latency(source, node) for source in sources) / len(sources)

    return min(candidates, key=mean_latency)


def input_streams(reads: Iterable[str], workload) -> list[str]:
    """The streams an operator reads (its `reads`: stream names or topic filters, whose first
    level names the stream), in the workload's order."""
    from workloads.pipeline import topic_filter

    firsts = {topic_filter(read).split("/", 1)[0] for read in reads}
    if firsts & {"+", "#"}:
        return [stream.name for stream in workload.streams]
    return [stream.name for stream in workload.streams if stream.name in firsts]


def input_devices(reads: Iterable[str], workload, topology) -> list[str]:
    """The devices of the streams an operator reads, in the workload's order: whose latency
    to a candidate `place` weighs."""
    streams = set(input_streams(reads, workload))
    devices: dict[str, None] = {}
    for stream in workload.streams:
        if stream.name in streams:
            for pattern in stream.sources:
                devices.update(dict.fromkeys(topology.match(pattern)))
    return list(devices)


def candidates(to: Iterable[str], topology, down: Iterable[str],
               hosting: Iterable[str]) -> list[str]:
    """Where an operator may go: the nodes `to` names, less those down and those already
    running an instance of it (an agent holds one instance per operator)."""
    from workloads.pipeline import placement

    excluded = set(down) | set(hosting)
    return [node for node in placement(topology, list(to)) if node not in excluded]


def check(spec, topology) -> None:
    """Checkpoints only where there is state to keep, at a period inside the run; recovery
    re-places only onto nodes that run operators."""
    from topologies.errors import SpecError
    from workloads.pipeline import check_hosts

    for index, operator in enumerate(spec.pipeline):
        if operator.checkpoint is None:
            continue
        path = ("pipeline", index, "checkpoint")
        if not operator_engine(operator.engine).in_agent or operator.window is None:
            raise SpecError(path, operator.checkpoint, "a checkpoint keeps a window's state: "
                            f"operator {operator.name!r} has no `window` (or runs on Spark, "
                            "whose checkpoints are its own)")
        if operator.follow is not None:
            raise SpecError(path, operator.checkpoint, "no checkpoint for a follow operator: "
                            "its per-user instances move with their users")
        if operator.checkpoint * CHECKPOINT_PHASE >= spec.run.duration:
            raise SpecError(path, operator.checkpoint, f"a period whose first checkpoint "
                            f"(at {CHECKPOINT_PHASE:g} x the period) falls inside the run "
                            f"(run.duration: {spec.run.duration:g} s)")
    recovery = spec.scenario.recovery
    if recovery is not None:
        check_hosts(("scenario", "recovery", "to"), recovery.to, topology)


# An operator re-placed after its node crashed: the node, the operator, where it went; when
# the node crashed, ZooKeeper noticed (its session expired) and the new instance processed
# input again, and the spans from the crash (detect, recover); the checkpoint restored (its
# time, NaN: none, the instance began empty) and its bytes; the held inputs the new instance
# took, the inputs the crashed one had processed after its checkpoint (rolled_back) and those
# that reached no instance (lost).
TABLES = {"recoveries": FeatureTable(pa.schema([
    ("node", NAME), ("operator", NAME), ("target", NAME), ("t_crash", pa.float64()),
    ("t_detected", pa.float64()), ("t_recovered", pa.float64()), ("detect", pa.float64()),
    ("recover", pa.float64()), ("t_checkpoint", pa.float64()),
    ("state_bytes", pa.int64()), ("held", pa.int64()), ("rolled_back", pa.int64()),
    ("lost", pa.int64()),
]))}
