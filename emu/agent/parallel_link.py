"""A parallel migration's own MQTT clients (one per side) and the topics they carry
(emu.agent.parallel says what goes on each)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emu.agent.mqtt import (
    connect_persistent,
    connected,
    end_session,
    new_client,
    no_delay,
    session_args,
    session_present,
)

if TYPE_CHECKING:
    from emu.agent.parts import AgentSurface

# A parallel migration's topics and clients (`MigrationLink`): their sessions outlive a dropped
# connection, and a dead agent's go after this long rather than hold mirrored input.
MIGRATION_TOPICS = "foglab/migration"
LINK_EXPIRY_S = 120


def topics(tag: str, source: str, target: str) -> dict[str, str]:
    """A parallel migration's topics: the mirrored input, the source's diverted outputs, the
    highest SN that went downstream (the checker's word to the source), and the source's
    rollback barrier (a message to itself through the broker). Each names its writer, then
    its reader (`<prefix>/<writer>/<reader>/<tag>/<part>`): a closed cluster's ACL lets a
    node write under its own name and read what is meant for it (emu.cluster.access), so no
    node forges a hand-off it is not part of."""
    ways = {"input": (source, target), "old": (source, target),
            "covered": (target, source), "barrier": (source, source)}
    return {part: f"{MIGRATION_TOPICS}/{writer}/{reader}/{tag}/{part}"
            for part, (writer, reader) in ways.items()}


class MigrationLink:
    """A parallel migration's own MQTT client on one side: a persistent MQTT 5 session
    (client id per migration and side; the broker holds its QoS 1 messages across a dropped
    connection, and ends it LINK_EXPIRY_S after an agent died), subscribed at QoS 1 to
    `filters`; each message goes to `handle(topic, payload, qos)` on the scheduler thread,
    `ready()` is called there once the broker confirmed the subscriptions. On the target it
    stands in `agent.sessions` for the instance (so the node's session does not read the
    instance's input), hence `connect`, `subscribed` and `close` as an InputSession's."""

    def __init__(self, agent: AgentSurface, client_id: str, filters: list[str],
                 handle: Callable[[str, bytes, int], None], ready: Callable[[], None]) -> None:
        self.agent = agent
        self.filters = filters
        self.handle = handle
        self.ready = ready
        self.client = new_client(client_id, persistent=True)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self.subscribed = threading.Event()
        self.started = self.closed = False

    def connect(self) -> None:
        if self.started:
            return
        self.started = True
        arguments = session_args()
        expiry = self.agent.host_seconds(LINK_EXPIRY_S)
        arguments["properties"].SessionExpiryInterval = round(expiry)
        connect_persistent(self.client, self.agent.config.mqtt, self.agent.keepalive, arguments)

    def publish(self, topic: str, payload: bytes) -> None:
        self.client.publish(topic, payload, qos=1)  # paho keeps it across a reconnection

    def close(self) -> None:
        """End the session (also from the scheduler thread: the client stops on its own)."""
        if self.closed:
            return
        self.closed = True
        threading.Thread(target=self._end, daemon=True).start()

    def _end(self) -> None:
        self.client.disconnect(properties=end_session())
        self.client.loop_stop()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, *rest: Any) -> None:
        if not connected(rc):
            return
        no_delay(client)
        if not session_present(flags) or not self.subscribed.is_set():
            client.subscribe([(f, 1) for f in self.filters])

    def _on_subscribe(self, *args: Any) -> None:
        if not self.subscribed.is_set():
            self.subscribed.set()
            self.agent.scheduler.call(self._ready)

    def _ready(self) -> None:
        if not self.closed:
            self.ready()
        self.agent.session_ready()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        self.agent.scheduler.call(self._deliver, message.topic, message.payload, message.qos)

    def _deliver(self, topic: str, payload: bytes, qos: int) -> None:
        if not self.closed:
            self.handle(topic, payload, qos)


__all__ = ["LINK_EXPIRY_S", "MIGRATION_TOPICS", "MigrationLink", "topics"]
