"""A spare broker joining (workloads.broker_scaling): `readers.broker` and `drivers.broker`.

When a watched broker stays slow, the host (emu.features.broker_scaling) first tells the nodes that
read through it to read from a spare broker too (`readers.broker`): the node opens a second
MQTT session, on the spare, with the subscriptions its operators have on its first session
(the same filters and subscription identifiers, at QoS 1), and answers once the spare has
confirmed them; what comes on it is taken as what comes on the first. Then it tells some of
the nodes that publish through the watched broker to publish their drivers' messages through
the spare (`drivers.broker`): the node opens a second session there for its drivers only, and
answers once the spare has accepted it: from then on every driver's message that goes to a
broker goes there, at its stream's QoS. The spare hands them to the readers directly, so the
watched broker no longer carries them. Everything else stays on the node's first session:
management, operators' outputs, and the node's local operators still take its drivers'
messages in-process, as before. (The readers' session carries what the node's own session
subscribes to: operators that read through sessions of their own, emu.cluster.deployment, are not
moved; emu.features.broker_scaling refuses a run that would need them to.)

Nothing is lost in the switch: the first session stays connected, so its QoS 1 messages still
in flight are acknowledged and resent there as ever; the switch happens on the scheduler's
thread, between two messages. The drivers' session is persistent as the node's is (a fixed
client id, MQTT 5 with a session expiry, emu.agent.mqtt): after a dropped connection paho
resends its unacknowledged QoS 1 messages.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emu.agent.mqtt import (
    connect_persistent,
    connected,
    end_session,
    new_client,
    no_delay,
    subscribe_identified,
)

if TYPE_CHECKING:
    from emu.agent.parts import AgentSurface


class SpareSession:
    """A node's second persistent MQTT session, on a spare broker, for one `role` (drivers,
    readers): connected, it calls `_connected` on the scheduler's thread; `answer(result)`
    once, when the session is ready for the role (a reconnection answers nothing)."""

    role = ""

    def __init__(self, agent: AgentSurface, broker: str, address: str,
                 answer: Callable[..., None]) -> None:
        self.agent = agent
        self.broker = broker
        self.address = address
        self._answer: Callable[..., None] | None = answer
        self.client = new_client(f"foglab-agent-{agent.node}-{self.role}", persistent=True)
        self.client.on_connect = self._on_connect
        self._set_up(self.client)
        connect_persistent(self.client, address, self.agent.keepalive)

    def _set_up(self, client: Any) -> None:
        """The role's callbacks, before the connection."""

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, *rest: Any) -> None:
        if not connected(rc):
            print(f"foglab agent {self.agent.node}: spare broker {self.broker} refused the "
                  f"{self.role}' connection: {rc}", file=sys.stderr, flush=True)
            return
        no_delay(client)
        self.agent.scheduler.call(self._connected)

    def _connected(self) -> None:
        raise NotImplementedError

    def _answered(self, **result: Any) -> None:
        if self._answer is None:  # a reconnection
            return
        answer, self._answer = self._answer, None
        answer({"broker": self.broker, "address": self.address, **result,
                "t": self.agent.clock()})

    def close(self) -> None:
        self.client.disconnect(properties=end_session())
        self.client.loop_stop()


class DriversBroker(SpareSession):
    """A node's drivers' session on a spare broker: answered once it is connected and the
    drivers publish through it."""

    role = "drivers"

    def _connected(self) -> None:
        """On the scheduler's thread: the drivers publish here from the next message on."""
        if self._answer is not None:
            self.agent.drivers_client = self.client
        self._answered()


class ReadersBroker(SpareSession):
    """A node's operators' second session, on a spare broker: the node session's
    subscriptions there too; answered once the spare has confirmed them all."""

    role = "readers"

    def _set_up(self, client: Any) -> None:
        self._waiting: set[int] = set()
        client.on_subscribe = self._on_subscribe
        client.on_message = self.agent.on_node_message  # as the first session's messages

    def _connected(self) -> None:
        self._subscribe()

    def _subscribe(self) -> None:
        """On the scheduler's thread: the node session's filters, with their identifiers (the
        agent tells one subscription's copy from another's by them)."""
        subscriptions = self.agent.subscriptions
        mids = set()
        for topic_filter in sorted(subscriptions.filters):
            mids.add(subscribe_identified(self.client, topic_filter,
                                          subscriptions.id(topic_filter)))
        self._waiting = mids
        if not mids:
            self._answered(filters=sorted(subscriptions.filters))

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, *rest: Any) -> None:
        self.agent.scheduler.call(self._acknowledged, mid)

    def _acknowledged(self, mid: int) -> None:
        self._waiting.discard(mid)
        if not self._waiting:
            self._answered(filters=sorted(self.agent.subscriptions.filters))


class OtherBroker(ReadersBroker):
    """A node's operators' session on another broker of the run (AgentConfig.other_brokers:
    brokers are not bridged, and a sim broker hands its messages to every reader): opened at
    the agent's start with the filters the node's operators read through the node session
    (and their identifiers), and kept in step with them (`follow`); the node starts its
    drivers and registers once every such session has confirmed them (Agent.session_ready),
    so no publisher's first message finds a reader not yet listening."""

    role = "readers"

    def __init__(self, agent: AgentSurface, broker: str, address: str) -> None:
        self.ready = False
        super().__init__(agent, broker, address, self._confirmed)

    def _confirmed(self, result: dict[str, Any]) -> None:
        self.ready = True
        self.agent.session_ready()

    def _subscribe(self) -> None:
        """On the scheduler's thread: the filters the node reads through its session now,
        whether or not that session has subscribed them yet."""
        agent = self.agent
        mids = set()
        for topic_filter in sorted(agent.session_filters()):
            mids.add(subscribe_identified(self.client, topic_filter,
                                          agent.subscriptions.id(topic_filter)))
        self._waiting = mids
        if not mids:
            self._answered(filters=[])

    def follow(self, new: set[str], gone: set[str]) -> None:
        """On the scheduler's thread: the node session's subscriptions changed (an operator
        installed, started, stopped or removed); so do this session's."""
        if not self.client.is_connected():
            return  # its next connection subscribes what the node reads then
        for topic_filter in sorted(new):
            subscribe_identified(self.client, topic_filter,
                                 self.agent.subscriptions.id(topic_filter))
        if gone:
            self.client.unsubscribe(sorted(gone))


def _spare(agent: AgentSurface, args: dict[str, Any]) -> tuple[str, str]:
    """The spare a request names: `broker`, a spare of the node's config (AgentConfig.spares),
    or `address` ("host:port", with `broker` naming it or not)."""
    broker, address = args.get("broker"), args.get("address")
    if address is None:
        if not isinstance(broker, str) or broker not in agent.config.spares:
            spares = ", ".join(sorted(agent.config.spares)) or "none"
            raise ValueError(f"args need 'broker', a spare broker of node {agent.node} "
                             f"({spares}), or 'address'; not {broker!r}")
        address = agent.config.spares[broker]
    if not isinstance(address, str) or not address:
        raise ValueError(f"'address' is a broker's host:port, not {address!r}")
    return str(broker or address), address


def read(agent: AgentSurface, args: dict[str, Any], answer: Callable[..., None]) -> None:
    """`readers.broker`: the node's operators read from the spare too (args as `move`'s)."""
    broker, address = _spare(agent, args)
    agent.spare_sessions.append(ReadersBroker(agent, broker, address, answer))


def move(agent: AgentSurface, args: dict[str, Any], answer: Callable[..., None]) -> None:
    """`drivers.broker`: args `broker`, a spare of the node's config (AgentConfig.spares), or
    `address` ("host:port", with `broker` naming it or not)."""
    broker, address = _spare(agent, args)
    # A node moved before keeps its earlier drivers' session open (its QoS 1 messages in
    # flight) until it stops.
    agent.spare_sessions.append(DriversBroker(agent, broker, address, answer))
