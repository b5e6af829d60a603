"""The simulated network: one channel per link direction, routes as channel tuples, hop events."""

from __future__ import annotations

from itertools import pairwise

from sim.message import Message
from sim.stations import Channel
from topologies.model import Topology
from topologies.routing import Routes


def radio(topology: Topology, src: str, dst: str) -> bool:
    """Whether the link direction is a device's radio to a gateway, the one link that drops:
    the gateway's agent emulates it (emu.agent.drivers), where every other link of the
    emulation is a TCP connection through the link layer (a device group's too:
    emu.cluster.deployment links its container, its devices' link included)."""
    nodes = topology.nodes
    return nodes[src].kind == "device" and nodes[dst].kind == "gateway"


class Network:
    """Carries messages hop by hop. A loss on a device's radio to its gateway drops the message
    (QoS 1 sends the leg again, QoS 0 records it lost); every other link carries TCP, where a
    loss is a retransmission delay on the leg's connection (sim.stations), never a drop."""

    def __init__(self, env, topology: Topology, seed: int, on_lost, lead=None):
        """`lead(node)`: the delay each leg `node` sends pays beyond its path (sim.costs)."""
        self.env = env
        self.routes = Routes(topology)
        self.channels: dict[tuple[str, str], Channel] = {}
        for link in topology.links:
            for src, dst in ((link.a, link.b), (link.b, link.a)):
                channel = Channel(len(self.channels), src, dst, link.latency, link.jitter,
                                  link.bandwidth, link.loss, f"{seed}:{src}>{dst}")
                if lead is not None:
                    channel.lead = lead(src)
                channel.tcp = not radio(topology, src, dst)
                self.channels[(src, dst)] = channel
        self._paths: dict[tuple[str, str], tuple[Channel, ...]] = {}
        self._on_lost = on_lost
        self._at = env.at
        # SimPy only reads an event's callback list, so one list serves every message.
        self._on_arrival = [self.arrived]
        self._on_retry = [self._retry]

    def check_arrivals(self, check):
        """Put `check(msg)` in place of every arrival at a link's end, messages already on a
        link included (SimPy reads an event's callbacks when it fires); returns the arrival
        it replaces, which `check` calls to let a message go on (or it calls `lose`). Only
        a run that asks for it (sim.features.faults) pays for the check."""
        arrived = self.arrived
        self.arrived = check
        self._on_arrival[0] = check
        return arrived

    def take_back(self, which) -> list:
        """The messages on their way (on a link, or waiting to be sent again after a loss)
        for which `which(msg)` holds, taken out of the run and returned, each counted from
        its leg's start again (its sender sends it again from there)."""
        crossing, resending = self._on_arrival, self._on_retry

        def match(msg) -> bool:
            callbacks = msg.callbacks
            if (callbacks is crossing or callbacks is resending) and which(msg):
                if callbacks is crossing:  # on a link: its leg's hops so far do not count
                    msg.hops -= msg.leg
                return True
            return False
        return self.env.withdraw(match)

    def take_resending(self) -> list:
        """The QoS 1 messages waiting to be sent again after a loss, taken out and returned."""
        resending = self._on_retry
        return self.env.withdraw(lambda msg: msg.callbacks is resending)

    def path(self, source: str, target: str) -> tuple[Channel, ...]:
        key = (source, target)
        found = self._paths.get(key)
        if found is None:
            nodes = self.routes.path(source, target)
            found = self._paths[key] = tuple(self.channels[pair] for pair in pairwise(nodes))
        return found

    def send(self, msg: Message, path: tuple[Channel, ...], deliver,
             at: float | None = None) -> None:
        """Start one MQTT leg (or a driver hop) now, or at `at` >= now when the sender hands
        over directly; `deliver(msg)` runs when it arrives."""
        msg.path = path
        msg.leg = 0
        msg.deliver = deliver
        t = self.env._now if at is None else at
        msg.t_attempt = t
        if path:
            self._cross(msg, t)
        else:
            deliver(msg)

    def _cross(self, msg: Message, t: float) -> None:
        """A leg's first link (its later ones: `arrived`), with the leg's lead."""
        channel = msg.path[0]
        lead = channel.lead
        # The leg's path is its TCP connection (one per sender and receiver, as the emulation
        # opens them): a retransmission on a link holds that connection's later messages.
        arrival = channel.transmit(t, msg.size, lead, msg.path)
        if arrival < 0.0:
            self.lose(msg, channel, t)
            return
        msg.callbacks = self._on_arrival
        self._at(msg, arrival)

    def arrived(self, msg: Message) -> None:
        """The message has crossed its current link: on to the next one, or delivered."""
        msg.hops += 1
        leg = msg.leg + 1
        path = msg.path
        if leg == len(path):
            msg.deliver(msg)
            return
        # _cross written out: this runs once per hop, the most frequent event of a run.
        msg.leg = leg
        now = self.env._now
        channel = path[leg]
        arrival = channel.transmit(now, msg.size, 0.0, path)
        if arrival < 0.0:
            self.lose(msg, channel, now)
        else:
            msg.callbacks = self._on_arrival
            self._at(msg, arrival)

    def lose(self, msg: Message, channel: Channel, now: float) -> None:
        """A link dropped the message: QoS 0 records the loss, QoS 1 sends the leg again."""
        if msg.qos == 0:
            self._on_lost(msg, channel, now)
            return
        # QoS 1: the sender has no acknowledgement after `retry` and sends the leg again.
        msg.hops -= msg.leg
        msg.callbacks = self._on_retry
        resend = msg.t_attempt + msg.retry
        self._at(msg, max(resend, self.env._now))

    def _retry(self, msg: Message) -> None:
        msg.leg = 0
        now = self.env._now
        msg.t_attempt = now
        self._cross(msg, now)
