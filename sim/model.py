"""The message model of one run: nodes' CPUs, the network, brokers, operator groups, drivers
and sources composed (sim.assembly builds them), messages moved between them, and the run."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from itertools import count

import numpy as np

from sim import assembly
from sim.assembly import HOSTS, ModelError
from sim.clock import Environment, collector_paused
from sim.costs import Costs
from sim.features import FEATURES
from sim.message import Message
from sim.migration import Coordinator
from sim.mobile import Mobility
from sim.network import Network
from sim.operators import Driver
from sim.pubsub import Broker, Group
from sim.recorder import MessageLog, SeriesLog, migration_columns
from sim.sampler import Sampler
from sim.saturation import saturation
from sim.windowed import OpenWindow, WindowOutput
from topologies.model import Topology
from topologies.routing import nearest
from workloads.broker_scaling import first_brokers
from workloads.calibration import Calibration
from workloads.mobility import MobilitySpec
from workloads.pipeline import OperatorSpec
from workloads.scenario import MigrationSettings, PolicySpec
from workloads.spec import WorkloadSpec

__all__ = ["HOSTS", "Model", "ModelError", "Settings", "SimResult", "simulate"]


@dataclass
class Settings:
    duration: float
    seed: int
    sample: float = 1.0
    drain: float = 30.0
    driver_cost: float = 20e-6
    calibration: Calibration | None = None  # what sim.costs.Costs takes from the emulation
    dilation: float = 1.0  # with a calibration: the emulation's time dilation (sim.costs)
    direct_handover: bool = True  # off only to check that it changes nothing
    bucketed_queue: bool = True  # sim.clock's queue; off only to check that it changes nothing
    in_place: bool = True  # jobs done before any other event finish in place; ditto
    # The model's own parts: the coordinator's costs (every migration's, a policy's too),
    # the moving users and the policy that places their follow operators; the message
    # model composes them (sim.assembly builds groups and sources from them).
    migration: MigrationSettings = field(default_factory=MigrationSettings)
    mobility: MobilitySpec | None = None
    policy: PolicySpec | None = None
    # The scenario's features present in the run (sim.features.FEATURES): key -> its spec
    # (migrations, faults, broadcasts, recovery, broker_scaling, replication).
    scenario: dict[str, object] = field(default_factory=dict)


@dataclass
class SimResult:
    tables: dict[str, dict[str, np.ndarray]]
    facts: dict = field(default_factory=dict)


class Model:
    """The model: nodes' CPUs, the network, brokers, operator groups, drivers and sources."""

    @collector_paused()
    def __init__(self, topology: Topology, workload: WorkloadSpec, pipeline: list[OperatorSpec],
                 settings: Settings):
        self.env = Environment(settings.bucketed_queue)
        self.topology = topology
        self.settings = settings
        self.node_names = list(topology.nodes)
        self.node_index = {name: i for i, name in enumerate(self.node_names)}
        self.stream_names = [stream.name for stream in workload.streams]
        self.log = MessageLog()
        seed = settings.seed
        self._set_up_hosts(topology, settings)
        self.workload = workload
        unknown = sorted(set(settings.scenario) - set(FEATURES))
        if unknown:
            raise ModelError(f"scenario: the model has no feature {', '.join(unknown)} "
                             f"(it has {', '.join(FEATURES)})")
        present = [(key, cls) for key, cls in FEATURES.items() if key in settings.scenario]
        # What the present features will change while the run goes on (sim.features.base).
        self.links_change = any(cls.changes_links for _, cls in present)
        self.spares: set[str] = set().union(
            *(cls.spares(settings.scenario[key]) for key, cls in present))
        self.down: set[str] = set()  # nodes crashed now (sim.features.faults keeps it)
        self._on_crash: list = []
        self.specs = {spec.name: spec for spec in pipeline}
        self._plans: dict[tuple[str, str], tuple] = {}
        self._plans_of: dict[str, list[tuple[str, str]]] = {}  # group -> plans it is part of
        self.coordinator = Coordinator(self, settings.migration)
        self.window_rng = random.Random(f"{seed}:windows")
        self.groups: list[Group] = []
        self._by_name: dict[str, Group] = {}
        self._spec_of: dict[str, str] = {}  # group -> its operator's name
        for spec in pipeline:
            if not spec.follow:
                self.groups.append(self._add(assembly.operator_group(self, spec), spec))
        self._followers: dict[str, list[Group]] = {}  # device -> its follow operators' groups
        self.drivers: dict[str, Driver] = {}
        self._readers_of: dict[str, list[Group]] = {}
        self._nearest_broker: dict[str, str] = {}
        self._redirected: dict[tuple[str, str], str] = {}  # (node, topic) -> a spare broker
        # Spares are nobody's broker at the start (sim.features.broker_scaling moves
        # publishers there).
        self._first_brokers = first_brokers(topology, self.spares)
        self.new_id = count().__next__  # message ids, 0, 1, 2, ...
        self._set_up_mobility(settings)
        self.sources = assembly.sources(self, workload, seed)
        if self.mobility is not None:
            self.mobility.start()
            self._follow(pipeline)
        # Migrations move instances while the model runs, which could break the conditions
        # under which a direct hand-over is exact: only static pipelines use it. So do the
        # other features that move instances or paths (a broker join: paths to a spare and
        # from it, which the check does not see, may cross a node it made direct). (In-place
        # finishes stay exact: such a change happens at an event.)
        # (`moves(spec)`: `dynamic`, or what the spec says: energy moves only with an offload.)
        self.dynamic = bool(self.mobility or any(
            cls.moves(settings.scenario[key]) for key, cls in present))
        if settings.direct_handover and not self.dynamic:
            self._hand_over_directly()
        mean_size = float(np.mean([stream.size for stream in workload.streams]))
        self.sampler = Sampler(self.env, topology, list(self.cpus.values()),
                               list(self.network.channels.values()), settings.sample,
                               settings.duration, mean_size)
        self.features = {key: cls(self, settings.scenario[key]) for key, cls in present}

    def _set_up_hosts(self, topology: Topology, settings: Settings) -> None:
        """The costs, the network, the hosts' CPUs and the brokers on them."""
        seed = settings.seed
        self.costs = Costs(topology, settings.driver_cost, settings.calibration,
                           settings.dilation)
        self.network = Network(self.env, topology, seed, self._lost, self.costs.lead)
        self.cpus = {node.name: self.costs.cpu(node)
                     for node in topology.nodes.values() if node.kind in HOSTS}
        self.brokers = {node.name: Broker(self.env, node.name, self.costs.broker(node),
                                          self.cpus[node.name], self.network, self._readers)
                        for node in topology.of_kind("broker")}
        for broker in self.brokers.values():
            broker.in_place = settings.in_place

    def _set_up_mobility(self, settings: Settings) -> None:
        """The moving users, if the run has them; no policy yet (_follow sets a follow
        operator's placer, sim.assembly the users' sources)."""
        seed = settings.seed
        self.mobility = None
        self.policy = None
        self.user_sources: list[list] = []  # a moving user's sources, attached at handovers
        if settings.mobility is not None:
            devices = self.topology.select(settings.mobility.devices or [
                n.name for n in self.topology.of_kind("device")])
            self.mobility = Mobility(self.env, self.topology.of_kind("gateway"),
                                     settings.mobility, devices, seed, settings.duration)
            self.mobility.on_attach = self._attach
            self.user_sources = [[] for _ in devices]

    # -- composing ------------------------------------------------------------------------

    def _add(self, group: Group, spec: OperatorSpec) -> Group:
        group.on_change = self._forget_plans
        self._by_name[group.name] = group
        self._spec_of[group.name] = spec.name
        return group

    def _follow(self, pipeline: list[OperatorSpec]) -> None:
        """Follow operators: a group per moving user, on the node the policy picks."""
        mobility = self.mobility
        for spec in (s for s in pipeline if s.follow):
            groups, placer = assembly.follow_groups(self, spec, self.settings.policy,
                                           self.settings.migration.strategy)
            for device, group in zip(mobility.devices, groups, strict=True):
                self._add(group, spec)
                self._followers.setdefault(device, []).append(group)
            if placer is not None:
                self.policy = placer
                mobility.on_step = placer.check

    def _attach(self, user: int, gateway: str) -> None:
        """A moving user attached to a gateway: its streams go to that gateway's driver."""
        driver = self.driver(gateway)
        device = self.mobility.devices[user]
        for source in self.user_sources[user]:
            source.deliver = driver.receive
            source.topic = source.stream.topic(device, gateway)

    def unattached(self, user: int):
        """Where a moving user's message goes that it sent before its first attachment (out
        of every gateway's range, resent at QoS 1 until one is near): to the driver and topic
        of the gateway it is attached to when the message gets through."""
        sources = self.user_sources[user]

        def deliver(msg: Message) -> None:
            source = next(s for s in sources if s.stream_index == msg.stream)
            msg.topic = source.topic
            source.deliver(msg)
        return deliver

    # -- the public API: what migrations and scenario features (sim.features) use ---------

    def group(self, name: str) -> Group:
        return self._by_name[name]

    def every_group(self) -> list[Group]:
        """Every operator group: the static ones, then the follow operators' (a user each)."""
        return list(self._by_name.values())

    def groups_of(self, operator: str) -> list[Group]:
        """The groups of one pipeline operator (one; a follow operator's: one per user)."""
        return [g for name, g in self._by_name.items() if self._spec_of[name] == operator]

    def operator_of(self, group: str) -> OperatorSpec:
        """The pipeline operator a group (by its name) is of."""
        return self.specs[self._spec_of[group]]

    def window_size(self, group: str) -> float:
        window = self.operator_of(group).window
        return window.size if window is not None else 0.0

    def instance_on(self, group: Group, node: str, state: OpenWindow | None):
        """A new instance of a group's operator on `node`, for a migration's target."""
        return assembly.instance(self, self.operator_of(group.name), node, state, group.name)

    def on_crash(self, listener) -> None:
        """Have `listener(node, now)` told as a node crashes, before it drops its work."""
        self._on_crash.append(listener)

    def crashed(self, node: str, now: float) -> None:
        """A node crashes now (sim.features.faults): it is down, and the listeners know."""
        self.down.add(node)
        for listener in self._on_crash:
            listener(node, now)

    def move_publisher(self, node: str, broker: str) -> None:
        """A publisher's readings go through `broker` from now on: a gateway's driver
        publishes there (each topic's routing plan made again at its first use after; the
        gateway's operators keep their broker, as on emu, where only the driver's session
        moves), a device publishing straight to a broker sends there. What is already on
        its way finishes where it is."""
        target = self.brokers[broker]
        for source in self.sources:
            if source.device_index == self.node_index[node] and isinstance(
                    getattr(source.deliver, "__self__", None), Broker):
                source.path = self.path(node, broker)
                source.deliver = target.receive
        driver = self.drivers.get(node)
        if driver is not None:
            redirected, plans, publish = self._redirected, self._plans, self.publish

            def publish_through(node: str, msg: Message, at: float | None = None) -> None:
                key = (node, msg.topic)
                if redirected.get(key) != broker:
                    redirected[key] = broker
                    plans.pop(key, None)
                publish(node, msg, at)
            driver.publish = publish_through

    def broker_serving(self, group: Group) -> Broker:
        """The broker that dispatches a group's input (the one its first instance is nearest)."""
        return self.brokers[self.broker_for(group.instances[0].node)]

    def window_forwarded(self, output: WindowOutput) -> None:
        """A window output went downstream: it is published when its operator writes."""
        spec = self.specs[self._spec_of[output.operator]]
        if spec.writes is not None:
            msg = Message(self.new_id(), -1, self.node_index[output.node], output.t_first,
                          spec.out_size or 64, 0, 1.0, f"{spec.writes}/{output.node}")
            self.publish(output.node, msg)

    def driver(self, gateway: str) -> Driver:
        if gateway not in self.drivers:
            driver = self.drivers[gateway] = Driver(self.env, gateway, self.cpus[gateway],
                                                    self.costs.driver(gateway), self.publish)
            driver.in_place = self.settings.in_place
        return self.drivers[gateway]

    def broker_for(self, node: str) -> str:
        """The broker a node publishes to: the nearest but spares, by topologies.routing.
        nearest's rule (publishers of one kind take equally near brokers in turn)."""
        broker = self._nearest_broker.get(node)
        if broker is None:
            if not self.brokers:
                raise ModelError(f"{node} must publish through a broker, but the topology "
                                 "has no node of kind broker")
            broker = nearest(self.network.routes, node, self._first_brokers)
            if broker is None:
                raise ModelError(f"no route from {node} to any broker")
            self._nearest_broker[node] = broker
        return broker

    def _hand_over_directly(self) -> None:
        """Let brokers and drivers hand their output to the links at its finish time, with no
        event for the finish, where that is exact: the node's CPU does one kind of job at one
        cost (so jobs finish in arrival order), it hosts no operator, no route passes through
        it and its links lose nothing (no QoS 1 resend), so its outgoing links see sends in
        time order, as they would with an event at each finish."""
        groups = list(self._by_name.values())
        hosting = {i.node for g in groups for i in g.instances}
        instances = [i for g in groups for i in g.instances]
        paths = [source.path for source in self.sources]
        for broker in self.brokers:
            paths.extend(self.path(broker, i.node) for i in instances)
        publishers = set(self.drivers) | {i.node for i in instances if i.out_topic}
        for node in publishers - set(self.brokers):
            if any(node not in g.on_node for g in groups):
                paths.append(self.path(node, self.broker_for(node)))
        transit = {channel.src for path in paths for channel in path[1:]}
        # Only a radio drops (a TCP link delays, in order per connection: sim.stations).
        lossy = {c.src for c in self.network.channels.values() if c.loss > 0 and not c.tcp}
        if any(source.stream.qos for source in self.sources):
            # A QoS 1 leg lost on a later link is resent from its start, out of time order.
            lossy |= {path[0].src for path in paths
                      if path and any(c.loss and not c.tcp for c in path)}
        busy = hosting | transit | lossy
        for name, broker in self.brokers.items():
            broker.direct = name not in busy and name not in self.drivers
        for name, driver in self.drivers.items():
            driver.direct = name not in busy and name not in self.brokers

    def path(self, source: str, target: str) -> tuple:
        try:
            return self.network.path(source, target)
        except LookupError as exc:
            raise ModelError(str(exc)) from None

    # -- the hot path -------------------------------------------------------------------------

    def _readers(self, topic: str) -> list[Group]:
        groups = self._readers_of.get(topic)
        if groups is None:
            groups = self._readers_of[topic] = self._match(topic)
        return groups

    def _match(self, topic: str) -> list[Group]:
        """The groups whose filters match a topic: the static ones, and the follow operators'
        groups of the device the topic ends with (a new topic at every handover)."""
        groups = [g for g in self.groups if g.reads(topic)] if self.groups else []
        if self._followers:
            for group in self._followers.get(topic.rsplit("/", 1)[-1], ()):
                if group.reads(topic):
                    groups.append(group)
        return groups

    def publish(self, node: str, msg: Message, at: float | None = None) -> None:
        """Hand a message to every group that reads its topic: to the group's instance on this
        node when there is one, else once through the nearest broker for all other groups.
        `at`: a direct hand-over's finish time (its node hosts no instance)."""
        plan = self._plans.get((node, msg.topic))
        if plan is None:
            plan = self._plan(node, msg.topic)
        local, broker_path, broker, remote = plan
        last = len(local) - (0 if broker is not None else 1)
        for i, group in enumerate(local):
            copy = msg if i == last else msg.copy()
            for j, instance in enumerate(group.take(copy, group.on_node[node])):
                this = copy if j == 0 else copy.copy()
                instance.pending += 1
                if instance.node == node:
                    instance.receive(this)
                else:  # a parallel migration's mirror elsewhere
                    self.network.send(this, self.path(node, instance.node), instance.receive,
                                      at)
        if broker is not None:
            msg.readers = remote
            self.network.send(msg, broker_path, broker.receive, at)
        elif not local and msg.stream >= 0:  # a reading no operator reads
            self.log.filtered(msg, self.env._now)

    def _forget_plans(self, group: Group) -> None:
        """A group's instances moved: the plans that deliver to it must be made again."""
        for key in self._plans_of.pop(group.name, ()):
            self._plans.pop(key, None)

    def _plan(self, node: str, topic: str) -> tuple:
        local, remote = [], []
        for group in self._readers(topic):
            self._plans_of.setdefault(group.name, []).append((node, topic))
            if node in group.on_node and not group.shared:
                local.append(group)
            else:
                remote.append(group)
        broker = broker_path = None
        if remote and node in self.brokers:
            broker, broker_path = self.brokers[node], ()
        elif remote:  # a moved driver's readings: through its broker (move_publisher)
            name = self._redirected.get((node, topic)) or self.broker_for(node)
            broker, broker_path = self.brokers[name], self.path(node, name)
        if broker is not None:
            broker.topics.add(topic)
        plan = self._plans[(node, topic)] = (tuple(local), broker_path, broker, tuple(remote))
        return plan

    def _lost(self, msg: Message, channel, now: float) -> None:
        self.log.lost(msg, now)

    # -- running --------------------------------------------------------------------------

    @collector_paused()
    def run(self, progress=None) -> SimResult:
        """Run sources for the duration, let messages in flight drain, and return the tables."""
        settings = self.settings
        self.env.process(self.sampler.run())
        # A thousand steps of progress (a 30-day run's moves every 43 simulated minutes), none
        # shorter than a sample; stopping at a step changes no event's order (SimPy's `until`).
        step = max(settings.duration / 1000, settings.sample)
        t = 0.0
        while t < settings.duration:
            t = min(t + step, settings.duration)
            self.env.run(until=t)
            if progress:
                progress(t)
        if settings.drain > 0:
            self.env.run(until=settings.duration + settings.drain)
        self.coordinator.finish(self.window_size)
        tables = {"nodes": self.sampler.nodes_log.columns(),
                  "links": self.sampler.links_log.columns(),
                  "windows": self.coordinator.forwarded.columns(),
                  "positions": (self.mobility.positions if self.mobility
                                else SeriesLog("t", "device", "x", "y", "gateway")).columns()}
        by_device: dict[str, int] = {}  # as emu.run.tables counts its drivers' records
        for source in self.sources:
            device = self.node_names[source.device_index]
            by_device[device] = by_device.get(device, 0) + source.emitted
        facts = {"emitted": sum(by_device.values()), "emitted_by_device": by_device,
                 "handovers": self.mobility.handovers if self.mobility else 0,
                 "end": self.env.now, "brokers": {b.name: b.received
                                                  for b in self.brokers.values()},
                 "costs": self.costs.applied()}  # which figure each operator was charged
        # Messages a TCP link held back by a retransmission (sim.stations), per link direction,
        # as the emulation's relays count their stalls: only where there were some.
        stalls = {f"{c.src}>{c.dst}": c.stalls for c in self.network.channels.values()
                  if c.stalls}
        if stalls:
            facts["retransmissions"] = stalls
        # The reverse of the order they attached in (sim.features: broadcasts take their
        # messages back before faults record what is still being sent again as lost).
        for feature in reversed(self.features.values()):
            feature.finish(tables, facts)
        # Once every message has its end in the log (features record theirs there as they
        # finish), the messages table is built, once.
        self._record_in_flight()
        messages = self.log.columns(self.stream_names, self.node_names, self.env.now)
        self.coordinator.consumed_twice(messages)
        tables["messages"] = messages
        tables["migrations"] = migration_columns(self.coordinator.records)
        saturated = saturation(tables["nodes"])
        if saturated:
            facts["saturated"] = saturated
        return SimResult(tables=tables, facts=facts)

    def _record_in_flight(self) -> None:
        """Record the readings still on their way when the run ends: an event queued for
        them (on a link, in a CPU's queue, waiting to be sent again) or held by a paused
        operator."""
        queued = self.env.withdraw(lambda event: type(event) is Message and bool(event.callbacks))
        held = [msg for group in self._by_name.values() for msg in group.held]
        for msg in (*queued, *held):
            if msg.stream >= 0:
                self.log.in_flight(msg)


def simulate(topology: Topology, workload: WorkloadSpec, pipeline: list[OperatorSpec],
             settings: Settings, progress=None) -> SimResult:
    """Build and run one simulation."""
    return Model(topology, workload, pipeline, settings).run(progress)
