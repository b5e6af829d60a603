"""Broker scaling at run time (seed 000, the QoS white paper, section 3: "scale the brokers at
runtime ... by monitoring performance of brokers", a controller adding a broker VM): the
scenario's `broker_scaling` entries, their check against the topology, the controller's
decision and the rule for who moves, shared by the model (sim) and the emulation (emu) so
that both decide alike from what they measure.

An entry pairs a watched `broker` with a `spare`: a broker node of the topology that no
publisher takes at the start (`first_brokers` leaves the spares out of every node's choice of
broker, on both backends). What is measured is the broker's own delay: every `probe` seconds
the controller sends a small QoS 0 message through the broker (sim: a job of the broker's
service time on its node's CPU, behind what it has queued; emu: a message the host publishes
to the broker and receives back from it) and takes its time through; an interval's figure is
the 95th percentile of its probes (workloads.replication.percentile). After `up` intervals in
a row over `bound`, the spare joins: a `share` of the publishers that publish through the
broker (the nodes running devices' drivers, and on sim devices publishing straight to it) are
told to move, the ones nearest the spare first (`movers`), and from when each has the command
its devices' readings go to the spare (only the drivers' readings: operators on a moved
gateway keep their broker). The spare hands them to the watched broker's readers itself
(sim: brokers hand copies to any subscriber; emu: the readers subscribe on the spare too
before anyone moves), so the watched broker carries them no more and nothing is lost. An entry
acts once (a broker with several entries calls its spares one after the other); spares do not
leave again (the white paper's controller only adds VMs). Recorded with the replicas: a row
of the `replicas` table per join, when the last mover has switched (operator: the broker;
action: `broker_join`; node: the spare; instances: the brokers now serving the broker's
publishers; latency: the deciding figure; slo: the bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from topologies.errors import SpecError
from topologies.fields import PositiveDuration, Ratio
from topologies.model import Topology
from topologies.routing import NoRoute, Routes

ACTION = "broker_join"  # the replicas table's action for a spare broker joining
PROBE_SIZE = 64  # bytes of a probe message


class BrokerScalingSpec(BaseModel):
    """A spare broker that joins `broker` when the broker's delay stays over `bound`."""

    model_config = ConfigDict(extra="forbid")

    broker: str = Field(description="the broker watched (a node of kind broker)")
    spare: str = Field(description="the broker that joins (a node of kind broker no publisher "
                                   "takes at the start)")
    bound: PositiveDuration = Field(description="the broker's delay bound: a probe's time "
                                                "through its queue and service")
    interval: PositiveDuration = Field(default=1.0, description="how often the controller "
                                       "decides, from the probes of the interval")
    probe: PositiveDuration = Field(default=0.1, description="time between two probes")
    up: int = Field(default=2, ge=1, description="intervals in a row over the bound before "
                                                 "the spare joins")
    share: Ratio = Field(default=0.5, gt=0, le=1, description="of the broker's publishers, "
                         "the share that moves to the spare (at least one)")


@dataclass
class Scaler:
    """One entry's decision: `observe` once per interval with the interval's delay (None: no
    probe came back); answers True once, when the spare should join."""

    spec: BrokerScalingSpec
    over: int = 0
    joined: bool = False

    def observe(self, delay: float | None) -> bool:
        if self.joined:
            return False
        # A probe that never came back counts as over: the broker is at least that slow.
        self.over = self.over + 1 if delay is None or delay > self.spec.bound else 0
        if self.over >= self.spec.up:
            self.joined = True
            return True
        return False


@dataclass(frozen=True)
class Planned:
    """The entries as checked, and the spares among the topology's brokers."""

    entries: tuple[BrokerScalingSpec, ...] = ()
    spares: frozenset[str] = field(default_factory=frozenset)


def _path(i: int, *rest) -> tuple:
    return ("scenario", "broker_scaling", i, *rest)


def resolve(entries: list[BrokerScalingSpec], topology: Topology) -> Planned:
    """The entries checked against the topology: a SpecError naming the field path
    (scenario.broker_scaling[i]....), the value and what was expected."""
    spares: set[str] = set()
    watched = {entry.broker for entry in entries}
    routes = Routes(topology) if entries else None
    for i, entry in enumerate(entries):
        for name in ("broker", "spare"):
            value = getattr(entry, name)
            node = topology.nodes.get(value)
            if node is None or node.kind != "broker":
                raise SpecError(_path(i, name), value, f"a node of kind broker in topology "
                                f"{topology.name} ({', '.join(sorted(_brokers(topology)))})")
        if entry.spare == entry.broker:
            raise SpecError(_path(i, "spare"), entry.spare, "a broker other than the one "
                            "watched")
        if entry.spare in spares:
            raise SpecError(_path(i, "spare"), entry.spare, "a spare named by one entry only")
        if entry.spare in watched:
            raise SpecError(_path(i, "spare"), entry.spare, "a spare that is not watched "
                            "itself (a spare takes no publisher until it joins)")
        try:
            routes.path(entry.spare, entry.broker)
        except NoRoute:
            raise SpecError(_path(i, "spare"), entry.spare, f"a broker with a route to "
                            f"{entry.broker} (it passes the moved publishers' messages on)"
                            ) from None
        spares.add(entry.spare)
    if spares and not set(_brokers(topology)) - spares:
        raise SpecError(("scenario", "broker_scaling"), sorted(spares),
                        "at least one broker that is no spare")
    return Planned(tuple(entries), frozenset(spares))


def _brokers(topology: Topology) -> list[str]:
    return [node.name for node in topology.of_kind("broker")]


def first_brokers(topology: Topology, spares: frozenset[str] | set[str]) -> list[str]:
    """The brokers publishers and readers may take at the start: all but the spares, in
    declaration order (topologies.routing.nearest picks among them)."""
    return [name for name in _brokers(topology) if name not in spares]


def movers(publishers: list[str], spare: str, share: float, routes: Routes) -> list[str]:
    """Which of a broker's publishers move to its spare: ceil(share x n) of them (at least
    one), the nearest the spare first (path latency; declaration order among equals), given
    in that order. Publishers with no route to the spare stay."""
    reachable = []
    for order, name in enumerate(publishers):
        try:
            reachable.append((routes.latency(name, spare), order, name))
        except NoRoute:
            continue
    count = min(len(reachable), max(1, math.ceil(share * len(publishers))))
    return [name for _, _, name in sorted(reachable)[:count]]


def check(spec, topology: Topology) -> None:
    """`scenario.broker_scaling` against the topology (`resolve`) and the run: a probe period
    no longer than the interval that decides on its probes (else an interval may hold none,
    and counts as over the bound), and an interval that ends inside the run."""
    resolve(spec.scenario.broker_scaling, topology)
    for i, entry in enumerate(spec.scenario.broker_scaling):
        if entry.probe > entry.interval:
            raise SpecError(_path(i, "probe"), entry.probe, f"a probe period no longer than "
                            f"the interval that decides on it (interval: {entry.interval:g} s)")
        if entry.interval >= spec.run.duration:
            raise SpecError(_path(i, "interval"), entry.interval, f"an interval shorter than "
                            f"the run (run.duration: {spec.run.duration:g} s): no decision "
                            "would be taken")
