"""Publish/subscribe in the model: brokers, and operator groups as shared subscriptions."""

from __future__ import annotations

from itertools import cycle

from sim.message import Message
from sim.stations import Cpu
from topologies.spec import BrokerSpec
from workloads.topics import matches


class Group:
    """An operator's instances; reading through a broker they form one shared subscription
    (`$share/<operator>/<filter>`), so each message reaches one instance, in turn.

    A stateful operator's group stamps serial numbers on its input, and a migration may pause
    it (the broker holds its messages) or mirror its input to a second instance. A `shared`
    group (an operator sim.features.replication may replicate) reads everything through the broker,
    even what is published where an instance runs, so that its replicas share all of it;
    replicas `join` it and `leave` it."""

    # Slots: a run has a group per moving user, and compact objects keep more of them cached.
    __slots__ = ("name", "filters", "sequenced", "next_sn", "paused", "held", "mirror",
                 "on_change", "shared", "instances", "on_node", "_turns")

    def __init__(self, name: str, filters: list[str], instances: list, sequenced: bool = False):
        self.name = name
        self.filters = filters
        self.sequenced = sequenced
        self.next_sn = 1
        self.paused = False
        self.held: list[Message] = []
        self.mirror = None
        self.on_change = None  # told when the instances change (cached routing plans)
        self.shared = False  # no local read: every message through the broker (replication)
        self._set(instances)

    def _set(self, instances: list) -> None:
        self.instances = instances
        self.on_node = {instance.node: instance for instance in instances}
        self._turns: dict[str, cycle] = {}  # each broker takes turns of its own, as MQTT's do

    def replace(self, old, new) -> None:
        """A migration's switch-over: `new` takes `old`'s place in the subscription."""
        self._set([new if i is old else i for i in self.instances])
        if self.on_change is not None:
            self.on_change(self)

    def join(self, instance) -> None:
        """A replica joins the shared subscription: from now on it takes its turns."""
        self._set([*self.instances, instance])
        if self.on_change is not None:
            self.on_change(self)

    def leave(self, instance) -> None:
        """A replica leaves the subscription: nothing new reaches it (what it has, it does)."""
        self._set([i for i in self.instances if i is not instance])
        if self.on_change is not None:
            self.on_change(self)

    def share(self) -> None:
        """Read everything through the broker from now on (sim.features.replication)."""
        self.shared = True
        if self.on_change is not None:
            self.on_change(self)

    def reads(self, topic: str) -> bool:
        if len(self.filters) == 1:  # most groups: no generator to set up
            return matches(self.filters[0], topic)
        return any(matches(f, topic) for f in self.filters)

    def pick(self, broker: str):
        if len(self.instances) == 1:
            return self.instances[0]
        turn = self._turns.get(broker)
        if turn is None:
            turn = self._turns[broker] = cycle(self.instances)
        return next(turn)

    def take(self, msg: Message, local=None, broker: str = "") -> list:
        """The instances this message goes to: `local`, the instance on the node where it was
        published, or the broker's next in turn; none while paused (it is held)."""
        if self.sequenced:
            msg.sn = self.next_sn
            self.next_sn += 1
        if self.paused:
            self.held.append(msg.copy())
            return []
        instance = local or self.pick(broker)
        return [instance] if self.mirror is None else [instance, self.mirror]


class Broker:
    """An MQTT broker: a service time on its node's CPU, then a copy to each matching group.

    The kafka-like profile stalls at every flush interval for a base time plus the bytes
    written since the previous flush at the disk's bandwidth (the spikes of seed 001, 5.1).
    """

    def __init__(self, env, name: str, spec: BrokerSpec, cpu: Cpu, network, readers):
        self.env = env
        self.name = name
        self.cpu = cpu
        self.network = network
        self._readers = readers
        self._service = spec.service_time
        self._flushing = spec.model == "kafka-like"
        self._interval = spec.flush_interval
        self._flush_base = spec.flush_base
        self._disk_bits_per_s = spec.disk_bandwidth
        self._period = 0
        self._period_bytes = 0
        self._stall_until = 0.0
        self._at = env.at
        self._on_served = [self._served]
        self.direct = False  # hand copies to the links at the finish time, without an event
        self.in_place = False  # dispatch at once when nothing else happens before the finish
        self.received = 0
        self.topics: set[str] = set()  # every topic published to this broker
        self._paths: dict[str, tuple] = {}  # to each subscriber's node

    @property
    def completions(self) -> list:
        """The callback list of this broker's services: a queued event that has it is a
        message the broker holds (sim.features.faults takes them back at a restart)."""
        return self._on_served

    def receive(self, msg: Message) -> None:
        now = self.env._now
        self.received += 1
        done = self.cpu.admit(now, self._service)
        if self._flushing:
            done = self._after_flush(done, msg.size)
        if self.direct:
            self._dispatch(msg, done)
        elif done > now:
            # In place only for a message that arrived over a link: its arrival does nothing
            # after handing it over, where a publish on this node may go on to other work.
            if self.in_place and msg.path and self.env.skip_to(done):
                self._dispatch(msg, done)
            else:
                msg.callbacks = self._on_served
                self._at(msg, done)
        else:
            self._dispatch(msg, now)

    def admit(self, now: float, size: int) -> float:
        """Take a message of `size` bytes arriving now on the broker's CPU (behind its queue,
        held by a flush): when it is served. What `receive` does first (inlined there: the
        hot path), for a message that goes nowhere after, such as a controller's probe."""
        done = self.cpu.admit(now, self._service)
        return self._after_flush(done, size) if self._flushing else done

    def _after_flush(self, done: float, size: int) -> float:
        period = int(done // self._interval)
        if period > self._period:
            # Only a flush right after a busy period has bytes to write.
            dirty = self._period_bytes if period == self._period + 1 else 0
            # A flush that outlasts its interval delays the next one: stalls never overlap.
            self._stall_until = max(self._stall_until, period * self._interval) + (
                self._flush_base + dirty * 8 / self._disk_bits_per_s)
            self._period, self._period_bytes = period, 0
        self._period_bytes += size
        return done if done >= self._stall_until else self._stall_until

    def _served(self, msg: Message) -> None:
        self._dispatch(msg, self.env._now)

    def _dispatch(self, msg: Message, t: float) -> None:
        groups = msg.readers
        if groups is None:
            groups = self._readers(msg.topic)
        if len(groups) == 1:  # the common case, without the comprehension's call
            targets = groups[0].take(msg, None, self.name)
        else:
            targets = [instance for group in groups
                       for instance in group.take(msg, None, self.name)]
        last = len(targets) - 1
        for i, instance in enumerate(targets):
            self.send(msg if i == last else msg.copy(), instance, t)

    def send(self, msg: Message, instance, t: float | None = None) -> None:
        instance.pending += 1
        path = self._paths.get(instance.node)
        if path is None:
            path = self._paths[instance.node] = self.network.path(self.name, instance.node)
        self.network.send(msg, path, instance.receive, t)
