"""An operator instance's own input session: a persistent MQTT session a migration takes over.

Why a session per instance, taken over, and not a shared subscription handed from one member
to the other: a shared subscription ($share/g/...) holds nothing while it has no member (the
broker drops, or with one member left delivers to it, what comes during a gap), and Mosquitto
gives a member's in-flight messages to no one else when it leaves; so a pause would lose input
or need both instances subscribed at once. A persistent MQTT 5 session (no clean start, an
expiry) whose client disconnects without ending it is what a broker is made to hold input for:
Mosquitto queues its QoS 1 messages, in order, and gives them to the next connection with the
same client id, whichever node it comes from. So an operator instance with `session` set in
its OperatorConfig reads its input through a client of its own with that id (`InputSession`),
subscribed at QoS 1; the node's session no longer carries that input, and the node's drivers
publish what the instance reads to the broker (the instance may move away from them).

The session keeps the keys (topic, id, serial number) of the last SEEN messages its instance
processed, and drops an input whose key it saw: a copy QoS 1 redelivered after a move, or
one Mosquitto sent per overlapping subscription (emu.agent.migration says how exactly-once
holds across a move). A target resuming on it answers once the input the broker held is
processed (`watch_resume`).
"""

from __future__ import annotations

import socket
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emu.agent.mqtt import (
    connect_persistent,
    connected,
    end_session,
    new_client,
    no_delay,
    session_present,
)
from emu.agent.operators import Operator
from emu.agent.protocol import Envelope

if TYPE_CHECKING:
    from emu.agent.config import AgentConfig, OperatorConfig
    from emu.agent.parts import AgentSurface

# Keys of the last messages an instance processed, kept to drop redelivered copies: more
# than the QoS 1 messages a broker has in flight to one client (Mosquitto: 20 by default).
SEEN = 1024
RESUME_QUIET_S = 1.0
# A paused session's client stops before it would connect again (its loop ends in 1 s steps).
PAUSED_RECONNECT_S = 3600


def session_address(node: AgentConfig, operator: OperatorConfig) -> str:
    """The address, from this node, of the broker holding an instance's input session
    (OperatorConfig.broker): the node's own broker, or another it has a link to
    (AgentConfig.other_brokers); a ValueError naming both when the node reaches it not."""
    broker = operator.broker
    if not broker or broker == node.broker:  # None or "": the node's own
        return node.mqtt
    if broker in node.other_brokers:
        return node.other_brokers[broker]
    reached = ", ".join(sorted({node.broker or "its own", *node.other_brokers}))
    raise ValueError(f"operator {operator.name!r} reads through its input session "
                     f"{operator.session} on broker {broker}, and node {node.node} has no link "
                     f"to {broker} (it reaches {reached}): the cluster's plan gives a node "
                     "links to the brokers of the instances that may move to it")


def _key(topic: str, envelope: Envelope) -> tuple:
    return (topic, envelope.id, envelope.sn)


class InputSession:
    """An operator instance's own persistent MQTT session (client id = config.session)."""

    def __init__(self, agent: AgentSurface, operator: Operator) -> None:
        self.agent = agent
        self.name = operator.name
        self.client_id = operator.config.session
        # The broker holding the session, which may be another than the node's (a target
        # behind another broker takes it over there).
        self.address = session_address(agent.config, operator.config)
        self.filters = list(operator.filters)
        self.client = new_client(self.client_id, persistent=True)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.subscribed = threading.Event()
        self.seen: OrderedDict[tuple, None] = OrderedDict()
        self.dropped = 0        # copies already processed (redelivered, or overlapping filters)
        self.present = False    # the broker had the session at the last connection
        self.t_connected: float | None = None
        self.on_disconnected: Callable[[], None] | None = None
        self.on_taken: Callable[[Envelope], None] | None = None  # after each processed input
        # A parallel migration's source: stamps and mirrors each input before processing it.
        self.mirror: Callable[[Envelope], None] | None = None
        self.started = False

    def connect(self) -> None:
        """Connect in the background, once."""
        if self.started:
            return
        self.started = True
        connect_persistent(self.client, self.address, self.agent.keepalive)

    def pause(self, done: Callable[[], None]) -> None:
        """Leave the broker without ending the session: it holds the input from now on.

        A half-close, not a DISCONNECT packet: the client shuts its socket's sending side and
        reads on until the broker, seeing the end, closes its own. A message the broker wrote
        before it saw the end is read and processed here (a QoS 0 message lost on the wire
        otherwise: it has no acknowledgement to bring it again); everything after the end the
        broker holds in the session. `done` runs on the scheduler behind the last message read.
        """
        self.on_disconnected = done
        # Paho would connect again after its reconnect delay: not before this loop is stopped.
        self.client.reconnect_delay_set(min_delay=PAUSED_RECONNECT_S,
                                        max_delay=PAUSED_RECONNECT_S)
        sock = self.client.socket()
        try:
            if sock is None:
                raise OSError("not connected")
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # not connected now: the broker holds everything already
            self.on_disconnected = None
            self.agent.scheduler.call(done)

    def leave(self, done: Callable[[], None]) -> None:
        """Unsubscribe from every filter; `done` on the scheduler behind the last message the
        broker sent before (the UNSUBACK follows them on the connection)."""
        self.client.on_unsubscribe = lambda *args: self.agent.scheduler.call(done)
        result, _ = self.client.unsubscribe(self.filters)
        if result != 0:  # not connected: nothing comes any more
            self.agent.scheduler.call(done)

    def fence(self) -> None:
        """The fence (AgentConfig.fence): the node's ZooKeeper session expired, and the host
        took it for dead and re-places the instance. It leaves this session without ending it
        (a half-close: what the broker sent before is processed here, the rest it holds for
        the instance the host re-placed), then goes; said on stderr and in the agent's
        `status` (`fenced`)."""
        agent, name = self.agent, self.name
        agent.fenced[name] = agent.clock()
        print(f"foglab agent {agent.node}: its ZooKeeper session expired at "
              f"{agent.fenced[name]:.3f} (taken for dead): {name} stops here (fenced)",
              file=sys.stderr, flush=True)

        def drained() -> None:
            if agent.sessions.get(name) is not self or name not in agent.operators:
                return
            del agent.sessions[name]  # first: uninstalling would end the session
            threading.Thread(target=self.stop_loop, daemon=True).start()
            agent.uninstall(name)

        self.pause(drained)

    def stop_loop(self) -> None:
        """Stop the client's thread (never from its own callbacks)."""
        self.client.loop_stop()

    def close(self) -> None:
        """Leave for good, ending the session (the run is over, or the instance uninstalled)."""
        self.client.disconnect(properties=end_session())
        self.client.loop_stop()

    def remember(self, keys: list) -> None:
        for key in keys:
            self.note(tuple(key))

    def note(self, key: tuple) -> None:
        self.seen[key] = None
        if len(self.seen) > SEEN:
            self.seen.popitem(last=False)

    def last_seen(self) -> list:
        return [list(key) for key in self.seen]

    # MQTT client's thread ---------------------------------------------------------------------

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, *rest: Any) -> None:
        if not connected(rc):
            return
        no_delay(client)
        self.t_connected = self.agent.clock()
        self.present = session_present(flags)
        # A new session (or one the broker lost): subscribe; a held one kept them, but for
        # its shared subscriptions: Mosquitto 2.0 restores a session from its database after
        # a restart without them (measured on 2.0.11: session present, nothing delivered;
        # the nemesis's replication runs lost every reading after a broker restart).
        wanted = (self.filters if not self.present else
                  [f for f in self.filters if f.startswith("$share/")])
        if wanted:
            client.subscribe([(f, 1) for f in wanted])  # _on_subscribe: ready
        else:
            self.subscribed.set()
            self.agent.scheduler.call(self.agent.session_ready)

    def _on_subscribe(self, *args: Any) -> None:
        self.subscribed.set()
        self.agent.scheduler.call(self.agent.session_ready)

    def _on_disconnect(self, client: Any, userdata: Any, *rest: Any) -> None:
        done, self.on_disconnected = self.on_disconnected, None
        if done is not None:
            # Behind every message the client handed over before: the drain.
            self.agent.scheduler.call(done)

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        self.agent.scheduler.call(self._take, message.topic, message.payload, message.qos)

    # Scheduler thread -------------------------------------------------------------------------

    def _take(self, topic: str, payload: bytes, qos: int) -> None:
        agent = self.agent
        operator = agent.operators.get(self.name)
        if operator is None or not operator.running or agent.sessions.get(self.name) is not self:
            return
        try:
            envelope = Envelope.decode(payload)
        except ValueError:
            agent.unreadable += 1
            return
        key = _key(topic, envelope)
        if key in self.seen:
            self.dropped += 1
            return
        self.note(key)
        if self.mirror is not None:
            self.mirror(envelope)
        agent.take(operator, envelope, qos)
        if self.on_taken is not None:
            self.on_taken(envelope)


def watch_resume(agent: AgentSurface, session: InputSession, answer: Callable[..., None],
                 result: dict[str, Any]) -> None:
    """A target resumes on `session` (the state restored, or the mirror taken up to the
    source's last SN): answer `result` and what the session took once the held input is
    processed: at the first message sent after the connection, or RESUME_QUIET_S after it
    when none comes."""
    counts = {"held": 0, "first": []}
    finished = threading.Event()

    def finish() -> None:
        if finished.is_set():
            return
        finished.set()
        session.on_taken = None
        answer({**result, "t_connected": session.t_connected, "present": session.present,
                "held": counts["held"], "first": counts["first"],
                "t_first": counts.get("t_first"), "dropped": session.dropped})

    def taken(envelope: Envelope) -> None:
        now = agent.clock()
        if session.t_connected is None or envelope.t < session.t_connected:
            counts["held"] += 1
            counts.setdefault("t_first", now)
            if len(counts["first"]) < 64:
                counts["first"].append([envelope.id, envelope.sn])
            return
        counts.setdefault("t_first", now)
        finish()

    def quiet() -> None:
        if finished.is_set():
            return
        if session.t_connected is None or counts["held"]:
            agent.scheduler.at(agent.clock() + RESUME_QUIET_S / 4, quiet)
            return
        if agent.clock() - session.t_connected >= RESUME_QUIET_S:
            finish()
        else:
            agent.scheduler.at(session.t_connected + RESUME_QUIET_S, quiet)

    session.on_taken = taken
    agent.scheduler.at(agent.clock() + RESUME_QUIET_S / 4, quiet)
