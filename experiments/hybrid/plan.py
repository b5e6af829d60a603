"""What the emulation of a hybrid run looks like at its start, decided before any container.

The model moves users; the emulation runs each moving device's driver on a real gateway. At
the start, each moving device sits on the gateway the model attaches it to at time 0 (the
same movement, seeded alike, as the run's model will replay), or, out of every gateway's range
then, on the nearest gateway with a lost link until it comes into range. The emulation
deploys devices on the gateway they link to (emu.cluster.deployment), so the topology it is given
has a link from each moving device to that gateway. The link is plain (no latency, no loss: one
driver serves a stream's devices on a gateway, and the emulation groups devices by link); the
links coupling sets each device's radio at time 0, before the epoch, and as the user moves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from sim.mobile import Mobility
from sim.policy import FollowPolicy
from topologies.errors import SpecError
from topologies.model import Topology, expand
from topologies.routing import Routes
from topologies.spec import LinkSpec, TopologySpec
from workloads.pipeline import placement


@dataclass(frozen=True)
class Start:
    """Each moving device's gateway at time 0, its radio then (latency s, loss), and for each
    follow operator the node each device's instance starts on."""

    devices: list[str]
    gateway: dict[str, str]
    latency: dict[str, float]
    loss: dict[str, float]
    follow: dict[str, dict[str, str]]


def follow_policy(scenario, operator: str, mobility, topology: Topology,
                  start=None) -> FollowPolicy | None:
    """The scenario's policy for a follow operator, as sim builds it (sim.assembly), with
    `start` for its moves; None when no policy names the operator."""
    policy = scenario.policy
    if policy is None or policy.operator != operator:
        return None
    return FollowPolicy(policy, mobility, Routes(topology).latency,
                        placement(topology, policy.fallback),
                        policy.strategy or scenario.migration.strategy, start)


def start(topology: Topology, scenario, pipeline, seed: int) -> Start:
    """Where everything starts, from the model at time 0 (the run's model replays it)."""
    mobility = scenario.mobility
    devices = topology.select(mobility.devices or [
        n.name for n in topology.of_kind("device")])
    gateways = topology.of_kind("gateway")
    model = Mobility(simpy.Environment(), gateways, mobility, devices, seed)
    where = np.asarray(model.movement.positions(0.0))
    model.step()
    names = model.gateway_names
    positions = np.array([g.position for g in gateways], dtype=float)
    gateway, latency, loss = {}, {}, {}
    for user, device in enumerate(devices):
        index = int(model.current[user])
        if index < 0:  # out of range: the nearest gateway, nothing gets through yet
            index = int(np.argmin(np.hypot(*(positions - where[user]).T)))
            latency[device], loss[device] = 0.0, 1.0
        else:
            latency[device] = float(model.link_latency[user])
            loss[device] = float(model.link_loss[user])
        gateway[device] = names[index]
    follow = {}
    for spec in pipeline:
        if spec.follow:
            policy = follow_policy(scenario, spec.name, model, topology)
            follow[spec.name] = {device: (policy.initial(user) if policy else gateway[device])
                                 for user, device in enumerate(devices)}
    return Start(devices, gateway, latency, loss, follow)


def emulated_topology(spec: TopologySpec, begin: Start) -> Topology:
    """The topology with each moving device linked to its gateway at time 0 (replacing links
    the file gave it: a moving device's access is its radio)."""
    moving = set(begin.devices)
    links = [link for link in spec.links
             if not (set(link.source) <= moving or set(link.target) <= moving)]
    by_gateway: dict[str, list[str]] = {}
    for device in begin.devices:
        by_gateway.setdefault(begin.gateway[device], []).append(device)
    links += [LinkSpec.model_validate({"from": devices, "to": gateway})
              for gateway, devices in by_gateway.items()]
    try:
        return expand(spec.model_copy(update={"links": links}))
    except SpecError as error:  # a bug here, not the user's file: say where it came from
        raise SpecError(("topology",) + error.path, error.value,
                        f"{error.expected} (in the hybrid run's start topology)") from None
