"""The drivers' move to a spare broker (workloads.broker_scaling): a `drivers.broker` request.

When a watched broker stays slow, the host (emu.broker_scaling) tells some of the nodes that
publish through it to publish their drivers' messages through a spare broker, which bridges
them to the watched one (emu.cluster.plan.spare_files). The node opens a second MQTT session,
on the spare, for its drivers only, and answers once the spare has accepted it: from then on
every driver's message that goes to a broker goes there, at its stream's QoS. Everything else
stays on the node's first session: management, operators' subscriptions and outputs, and the
node's local operators still take its drivers' messages in-process, as before.

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

from emu.agent.mqtt import connected, end_session, new_client, no_delay, session_args

if TYPE_CHECKING:
    from emu.agent.agent import Agent

KEEPALIVE = 30


def drivers_client_id(node: str) -> str:
    return f"foglab-agent-{node}-drivers"


class DriversBroker:
    """A node's drivers' session on a spare broker: `answer(result)` on the scheduler's
    thread once it is connected and the drivers publish through it."""

    def __init__(self, agent: Agent, broker: str, address: str,
                 answer: Callable[..., None]) -> None:
        from emu.agent.agent import broker_address

        self.agent = agent
        self.broker = broker
        self.address = address
        self._answer: Callable[..., None] | None = answer
        self.client = new_client(drivers_client_id(agent.node), persistent=True)
        self.client.on_connect = self._on_connect
        self.client.reconnect_delay_set(min_delay=1, max_delay=4)
        host, port = broker_address(address)
        self.client.connect_async(host, port, keepalive=KEEPALIVE, **session_args())
        self.client.loop_start()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, *rest: Any) -> None:
        if not connected(rc):
            print(f"foglab agent {self.agent.node}: spare broker {self.broker} refused the "
                  f"drivers' connection: {rc}", file=sys.stderr, flush=True)
            return
        no_delay(client)
        self.agent.scheduler.call(self._switch)

    def _switch(self) -> None:
        """On the scheduler's thread: the drivers publish here from the next message on."""
        if self._answer is None:  # a reconnection
            return
        self.agent.drivers_client = self.client
        answer, self._answer = self._answer, None
        answer({"broker": self.broker, "address": self.address,
                "t": self.agent.clock()})

    def close(self) -> None:
        self.client.disconnect(properties=end_session())
        self.client.loop_stop()


def move(agent: Agent, args: dict[str, Any], answer: Callable[..., None]) -> None:
    """`drivers.broker`: args `broker`, a spare of the node's config (AgentConfig.spares), or
    `address` ("host:port", with `broker` naming it or not)."""
    broker, address = args.get("broker"), args.get("address")
    if address is None:
        if not isinstance(broker, str) or broker not in agent.config.spares:
            spares = ", ".join(sorted(agent.config.spares)) or "none"
            raise ValueError(f"args need 'broker', a spare broker of node {agent.node} "
                             f"({spares}), or 'address'; not {broker!r}")
        address = agent.config.spares[broker]
    if not isinstance(address, str) or not address:
        raise ValueError(f"'address' is a broker's host:port, not {address!r}")
    # A node moved before keeps its earlier drivers' session open (its QoS 1 messages in
    # flight) until it stops.
    agent.drivers_brokers.append(DriversBroker(agent, str(broker or address), address, answer))
