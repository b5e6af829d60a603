"""A paho-mqtt client that works alike with Debian's paho 1.6 and with paho 2.x, and how the
agent's persistent sessions connect to their broker and subscribe."""

from __future__ import annotations

import socket
from typing import Any

from emu.agent.config import local_address

# How long the broker keeps a persistent client's session after it went (s): a broker
# restart or a partition is seconds; a run is much shorter than this.
SESSION_EXPIRY_S = 3600
# paho's delays between reconnection attempts (min, max), host seconds at any dilation: a
# cluster starts in host time (an agent usually starts before its broker listens, and at K
# times these delays the gateways of a real-speed run had not registered after 180 s); a
# broker restart's reconnection is then K times quicker in emulated time (docs/dilation.md).
RECONNECT_DELAYS_S = (1, 4)
MQTT_V5 = 5
# Every persistent session's keepalive, in emulated seconds (an agent gives paho it on the host's
# clock: Agent.keepalive).
KEEPALIVE = 30
# The login of every client this process makes (a closed cluster, emu.cluster.access): set
# once by an agent for its node (`use_credentials`); the host passes its own per client.
_credentials: tuple[str, str] | None = None
# Whether this process's persistent clients speak MQTT 5 (`use_mqtt5`): an agent's config says
# (AgentConfig.mqtt5); false in a cluster with a broker that has no MQTT 5 (RabbitMQ 3.10's
# plugin, a broker of kind rabbitmq: emu.cluster.plan), whose clients are MQTT 3.1.1 with
# clean session off instead.
_mqtt5 = True


class Login(tuple):
    """A client's (user, password) and the ssl context it connects with, for the host's
    clients on a cluster with TLS (emu.cluster.tls.tls_login); None: plain."""

    def __new__(cls, login: tuple[str, str], tls: Any = None) -> Login:
        made = super().__new__(cls, login)
        made.tls = tls
        return made


def broker_address(address: str) -> tuple[str, int]:
    """(host, port) a client connects to for a broker's "host:port" (1883 if no port is given),
    the node's own host name resolved (emu.agent.config.local_address)."""
    host, _, port = local_address(address).rpartition(":")
    if not host:
        return address, 1883
    return host.strip("[]"), int(port)


def use_mqtt5(on: bool) -> None:
    """Make this process's persistent clients MQTT 5 (on) or MQTT 3.1.1 without a clean
    session (off); `new_client` and `session_args` follow it unless told otherwise."""
    global _mqtt5
    _mqtt5 = bool(on)


def use_credentials(user: str, password: str) -> None:
    """Log every client made from now on in as `user` (an agent: its node)."""
    global _credentials
    _credentials = (user, password) if user else None


def credentials() -> tuple[str, str] | None:
    """The process's login (`use_credentials`), for what it starts (a Spark job)."""
    return _credentials


def new_client(client_id: str, persistent: bool = False,
               credentials: tuple[str, str] | None = None, mqtt5: bool | None = None) -> Any:
    """An MQTT client; on paho 2.x with the version-2 callbacks.

    Not `persistent`: MQTT 3.1.1 with a clean session. `persistent`: MQTT 5, to be connected
    with `session_args()`: the broker keeps the client's session (its subscriptions, and its
    QoS 1 messages queued while the client is away: a dropped connection, a broker restarted
    with its database) for SESSION_EXPIRY_S after it went, or until the client ends it
    (`end_session`). The id must be the same at every connection.
    Callbacks written as `on_connect(client, userdata, flags, rc, *rest)` and
    `on_disconnect(client, userdata, *rest)` suit both versions and protocols; `connected(rc)`
    reads rc, `session_present(flags)` the flags. `credentials` (user, password): its login
    on a closed broker, by default the process's (`use_credentials`); none: anonymous. A
    Login with a context connects with TLS; an agent's clients do on a cluster with TLS
    (emu.agent.tls), checking that the server is a broker of the run.
    `mqtt5` false (default: the process's, `use_mqtt5`): a persistent client is MQTT 3.1.1
    with clean session off, for a broker without MQTT 5; the broker keeps its session as
    long as it keeps such sessions (RabbitMQ: mqtt.subscription_ttl), and paho leaves out the
    MQTT 5 properties of its SUBSCRIBE and DISCONNECT packets (subscription identifiers, the
    session's end: the copies then come once per session, and an ended session stays).
    """
    import paho.mqtt.client as mqtt

    api = getattr(mqtt, "CallbackAPIVersion", None)  # only paho 2.x has it
    v5 = _mqtt5 if mqtt5 is None else mqtt5
    kwargs: dict[str, Any] = (
        {"client_id": client_id, "protocol": MQTT_V5} if persistent and v5
        else {"client_id": client_id, "clean_session": not persistent})
    client = mqtt.Client(**kwargs) if api is None else mqtt.Client(api.VERSION2, **kwargs)
    login = credentials or _credentials
    if login is not None:
        client.username_pw_set(*login)
    tls = getattr(login, "tls", None)
    if tls is None and credentials is None and _tls_on():
        from emu.agent.tls import BROKER_NAME, context

        tls = context(BROKER_NAME)
    if tls is not None:
        client.tls_set_context(tls)
    return client


def _tls_on() -> bool:
    """Whether this process's clients use TLS (emu.agent.tls), without importing ssl when
    they do not."""
    import sys

    module = sys.modules.get("emu.agent.tls")
    return module is not None and module.enabled()


def session_args(mqtt5: bool | None = None) -> dict[str, Any]:
    """connect()'s and connect_async()'s arguments for a persistent client: no clean start,
    at the first connection too, and the session's expiry.

    Not a clean start at the first connection either: Mosquitto 2.0 (Debian 12's 2.0.11, the
    services image's) writes to its database only the sessions of clients that connected
    without one, so a session begun with a clean start is gone after a restart (measured:
    session_present false after a restart with clean start first, true without). A client
    therefore resumes a session an earlier client of its id left on the broker without
    ending it; a run's broker is its own, so there is none. An MQTT 3.1.1 client (`mqtt5`
    false, default the process's) takes none: its clean session is off from its creation.
    """
    if not (_mqtt5 if mqtt5 is None else mqtt5):
        return {}
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    properties = Properties(PacketTypes.CONNECT)
    properties.SessionExpiryInterval = SESSION_EXPIRY_S
    return {"clean_start": False, "properties": properties}


def connect_persistent(client: Any, address: str, keepalive: int,
                       arguments: dict[str, Any] | None = None) -> None:
    """Connect a persistent client (`new_client(..., persistent=True)`) to the broker at
    `address` in the background, with `session_args()` (or `arguments`): paho reconnects after
    RECONNECT_DELAYS_S, and its network loop runs on a thread of its own."""
    host, port = broker_address(address)
    client.reconnect_delay_set(*RECONNECT_DELAYS_S)
    client.connect_async(host, port, keepalive=keepalive,
                         **(session_args() if arguments is None else arguments))
    client.loop_start()


def subscribe_identified(client: Any, topic_filter: str, identifier: int) -> int:
    """Subscribe `topic_filter` at QoS 1 with MQTT 5's subscription identifier (a broker
    without MQTT 5 gets it without: emu.agent.subscriptions); the SUBSCRIBE's message id."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    properties = Properties(PacketTypes.SUBSCRIBE)
    properties.SubscriptionIdentifier = identifier
    return client.subscribe(topic_filter, 1, properties=properties)[1]


def end_session() -> Any:
    """disconnect()'s properties for a persistent client leaving for good: the broker drops
    its session at once rather than keep it."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    properties = Properties(PacketTypes.DISCONNECT)
    properties.SessionExpiryInterval = 0
    return properties


def connected(rc: Any) -> bool:
    """Whether a CONNACK's code (an int in paho 1.6, a ReasonCode in 2.x) means success."""
    failure = getattr(rc, "is_failure", None)
    return not failure if failure is not None else rc == 0


def session_present(flags: Any) -> bool:
    """Whether the broker resumed the client's session: flags are a dict in paho 1.6,
    ConnectFlags in 2.x."""
    if isinstance(flags, dict):
        return bool(flags.get("session present"))
    return bool(getattr(flags, "session_present", False))


def no_delay(client: Any) -> None:
    """Send small packets at once: paho leaves Nagle's algorithm on, which holds a reply
    sent right after an acknowledgement for the peer's delayed ACK (about 40 ms)."""
    sock = client.socket()
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
