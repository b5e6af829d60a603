"""Building a run's parts from its description, for the message model (sim.model) to compose.

Each function makes one kind of part: an operator's instance on a node, the operator groups
of a static pipeline, each moving user's group of a `follow` operator with the policy that
places it, the devices' sources. The decisions are the description's and topologies.routing's
(placement, a device's gateway, the nearest broker); the parts are the model's (CPUs,
channels, brokers). The hybrid backend takes the same decisions (placement, the policy) to
the emulation instead.
"""

from __future__ import annotations

from sim.draws import Draws
from sim.operators import OperatorInstance, spark_batches
from sim.policy import FollowPolicy
from sim.pubsub import Group
from sim.sources import Source
from sim.windowed import OpenWindow, WindowedInstance
from topologies.routing import gateway_of
from workloads.pipeline import OperatorSpec, placement, topic_filter
from workloads.spec import WorkloadSpec

HOSTS = ("gateway", "broker", "cloud_vm", "coordinator")  # node kinds with a CPU that runs code


class ModelError(ValueError):
    """The description is valid on its own but cannot be built into a model (no route, ...)."""


def instance(model, spec: OperatorSpec, node: str, state: OpenWindow | None = None,
             group: str | None = None):
    """An instance of `spec` on `node` (a window operator's with `state` when it moved)."""
    cost = model.costs.operator(spec, node)
    made = _instance(model, spec, node, cost.message, state, group)
    batch = cost.batch
    if batch is not None:
        # From now to the run's end: a migration's new instance starts charging when made.
        settings = model.settings
        model.env.process(spark_batches(model.env, made, batch.cost, batch.trigger,
                                        settings.duration + settings.drain, batch.threads,
                                        batch.per_message))
    return made


def _instance(model, spec: OperatorSpec, node: str, cost: float, state: OpenWindow | None,
              group: str | None):
    if spec.window is not None:
        return WindowedInstance(model.env, node, model.node_index[node], model.cpus[node],
                                cost, group or spec.name, spec.window.size, spec.window.jitter,
                                model.window_rng, model.coordinator.window_closed,
                                model.log if spec.is_sink else None, state)
    return OperatorInstance(
        model.env, node, model.node_index[node], model.cpus[node], cost, spec.selectivity,
        None if spec.is_sink else f"{spec.writes}/{node}", spec.out_size, model.publish,
        model.log)


def operator_group(model, spec: OperatorSpec) -> Group:
    """A static operator's group: an instance on every node its `on` places it."""
    instances = []
    for node in placement(model.topology, spec.on):
        if node not in model.cpus:
            raise ModelError(f"operator {spec.name} is placed on {node}, a "
                             f"{model.topology.nodes[node].kind}; operators run on "
                             f"{', '.join(HOSTS)}")
        instances.append(instance(model, spec, node))
    return Group(spec.name, [topic_filter(r) for r in spec.reads], instances,
                 sequenced=spec.stateful)


def follow_groups(model, spec: OperatorSpec, policy_spec, strategy: str
                  ) -> tuple[list[Group], FollowPolicy | None]:
    """A `follow: users` operator: a group per moving user, each with one instance on the
    node the policy picks (the user's gateway without a policy for this operator)."""
    mobility = model.mobility
    groups: list[Group] = []
    placer = None
    if policy_spec is not None and policy_spec.operator == spec.name:
        def start(user: int, target: str, strategy: str, done) -> None:
            group = groups[user]
            model.coordinator.start(group, group.instances[0], target, strategy, done)

        placer = FollowPolicy(policy_spec, mobility, model.network.routes.latency,
                              placement(model.topology, policy_spec.fallback),
                              policy_spec.strategy or strategy, start)
    for user, device in enumerate(mobility.devices):
        node = (placer.initial(user) if placer else
                mobility.gateway_names[max(int(mobility.current[user]), 0)])
        name = f"{spec.name}@{device}"
        reads = [f"{r}/+/{device}" for r in spec.reads]
        groups.append(Group(name, reads, [instance(model, spec, node, group=name)],
                            sequenced=spec.stateful))
    return groups, placer


def sources(model, workload: WorkloadSpec, seed: int) -> list[Source]:
    """A source per device and stream; devices send to their gateway's driver, or publish
    to the nearest broker themselves when no gateway is linked to them. A moving user's
    sources are attached (path, topic, driver) at the first mobility step. Each source draws
    from its own stream (sim.draws), so no change in the order events run moves its times."""
    made = []
    per_device: dict[str, int] = {}
    devices_of = []
    for stream in workload.streams:
        devices = model.topology.select(stream.sources)
        devices_of.append(devices)
        for device in devices:
            per_device[device] = per_device.get(device, 0) + 1
    mobility = model.mobility
    mobile = {d: u for u, d in enumerate(mobility.devices)} if mobility else {}
    duration = model.settings.duration
    for index, stream in enumerate(workload.streams):
        for device in devices_of[index]:
            if device in mobile:
                user = mobile[device]
                rng = Draws(seed, "sources", device, stream.name)
                source = Source(model.env, stream, index, model.node_index[device], "", rng,
                                duration, mobility.path_of(user), model.unattached(user),
                                model.network, model.new_id, False)
                model.user_sources[user].append(source)
                made.append(source)
                continue
            gateway = gateway_of(model.topology, device)
            if gateway is None:
                broker = model.broker_for(device)
                target, deliver = broker, model.brokers[broker].receive
            else:
                target, deliver = gateway, model.driver(gateway).receive
            path = model.path(device, target)
            # A private source puts each message on its link ahead of its time: not when a
            # feature changes links while the model runs (sim.features.faults), nor for a
            # device that may move to a spare broker (its path changes).
            moves = gateway is None and bool(model.spares)
            private = (per_device[device] == 1 and not model.links_change and not moves
                       and (stream.qos == 0 or not path[0].loss if path else False))
            rng = Draws(seed, "sources", device, stream.name)
            made.append(Source(model.env, stream, index, model.node_index[device],
                               stream.topic(device, gateway), rng, duration, path, deliver,
                               model.network, model.new_id, private))
    return made
