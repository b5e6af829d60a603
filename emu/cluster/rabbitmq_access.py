"""A closed cluster's RabbitMQ broker: the same logins and topic rules as its Mosquitto's, in
RabbitMQ's terms. Plain data and text, without Docker.

What `run.access: closed` gives a Mosquitto broker (emu.cluster.access: a password per node
and the host's, Mosquitto's ACL), a RabbitMQ broker gets as a definitions file it loads at boot
(`load_definitions`): nothing to run once it is up, no management plugin, no CLI round trip.

- Users: each node and the host (HOST_USER), with RabbitMQ's own salted hash
  (rabbit_password_hashing_sha256: base64(salt4 + sha256(salt4 + password))); the image's
  `guest` is not created (a node that loads definitions at its first boot seeds no default
  user) and anonymous MQTT clients are refused (`mqtt.allow_anonymous = false`).
- Vhost permissions: what the MQTT plugin itself needs, its session queues
  (`mqtt-subscription-<client id>qos0|1`) and the topic exchange; the AMQP listener stays off.
- Topic permissions, on the MQTT plugin's exchange (amq.topic): the rules are read from the
  Mosquitto ACL the closed plan wrote (one source for both brokers), each ACL topic filter as a
  regular expression over RabbitMQ's routing keys. The plugin turns a topic into a routing key
  with `/` and `.` swapped and a filter's `+` into `*`; it checks `write` on every publish and
  `read` on the filter of every SUBSCRIBE (not per message: it delivers what the binding
  routes), so a grant `a/+` must not match a subscription `a/#` (its key `a.#`). Every user
  gets an entry: a user without one on an exchange may use every topic there.

Unlike Mosquitto, which grants a subscription outside the ACL and then delivers nothing on it,
RabbitMQ 3.10 refuses it (its SUBACK says failure), and it has no shared subscriptions.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

EXCHANGE = "amq.topic"
VHOST = "/"
HASHING = "rabbit_password_hashing_sha256"
SALT_BYTES = 4
# RabbitMQ's "nothing": a regular expression no resource name or routing key matches.
NOTHING = "^$"
# The MQTT plugin's own resources: its session queues and the topic exchange it publishes to.
QUEUES = r"^mqtt-subscription-.*$"
RESOURCES = r"^(amq\.topic|mqtt-subscription-.*)$"
ACCESS = {"read": ("read",), "write": ("write",), "readwrite": ("read", "write")}
# RabbitMQ 3.10 has no shared subscriptions: an operator's `$share/<group>/<filter>` is a
# literal filter there, on topics no client may publish to, so reading it gives nothing, and
# a node subscribes to it (the readings it takes come in-process from its own drivers).
# Refused, the subscription would close the node's connection again at every reconnection.
SHARED_LITERAL = "$share/#"


def rabbitmq_hash(password: str, salt: bytes | None = None) -> str:
    """RabbitMQ's password_hash for rabbit_password_hashing_sha256 (a fixed `salt` for tests)."""
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    if len(salt) != SALT_BYTES:
        raise ValueError(f"a RabbitMQ hash takes {SALT_BYTES} bytes of salt, got {len(salt)}")
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def routing_level(level: str) -> str:
    """An MQTT topic level as RabbitMQ's routing keys spell it, escaped for a regex: the
    plugin swaps `.` and `/`, so a `.` inside a level is a `/` in the key."""
    return re.escape(level.replace(".", "/"))


def filter_regex(topic: str) -> str:
    """A regular expression matching the routing keys of the topics and subscription filters
    an ACL topic filter covers: `+` a level (or a `+` of the subscriber's, `*`), `#` the level
    it stands at and all below (a `#` of the subscriber's among them), as Mosquitto reads
    them."""
    levels = topic.split("/")
    parts: list[str] = []
    for index, level in enumerate(levels):
        if level == "#":
            if index != len(levels) - 1:
                raise ValueError(f"ACL topic {topic!r}: '#' must be its last level")
            # `a/#` covers `a` itself and everything below; `#` alone, everything.
            return ("^" + r"\.".join(parts) + r"(\..*)?$") if parts else "^.*$"
        parts.append("[^.#]*" if level == "+" else routing_level(level))
    return "^" + r"\.".join(parts) + "$"


@dataclass
class _Grants:
    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)

    def add(self, access: str, topic: str, where: str) -> None:
        if access not in ACCESS:
            raise ValueError(f"{where}: access {access!r} has no RabbitMQ counterpart "
                             f"(one of {', '.join(ACCESS)})")
        for kind in ACCESS[access]:
            getattr(self, kind).append(topic)


def parse_acl(text: str, users: Iterable[str]) -> dict[str, _Grants]:
    """Each user's read and write filters from a Mosquitto acl_file: `user` sections with
    their `topic` lines, and `pattern` lines, which apply to every user with %u their name.
    A `%c` (client id) or a `deny` has no counterpart here: refused, naming the line."""
    grants = {user: _Grants() for user in users}
    patterns: list[tuple[str, str]] = []
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"the closed cluster's ACL, line {number}"
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        access, _, topic = rest.strip().partition(" ")
        if not topic.strip():  # `topic T` grants readwrite
            access, topic = "readwrite", access
        topic = topic.strip()
        if word == "user":
            current = rest.strip()
        elif word == "topic" and current in grants:
            grants[current].add(access, topic, where)
        elif word == "pattern":
            if "%c" in topic:
                raise ValueError(f"{where}: {topic!r} names the client id (%c), which "
                                 "RabbitMQ's topic permissions here do not")
            patterns.append((access, topic))
        elif word != "topic":
            raise ValueError(f"{where}: {word!r} is not an ACL line RabbitMQ can take")
    for user, grant in grants.items():
        for access, topic in patterns:
            grant.add(access, topic.replace("%u", user), "the closed cluster's ACL")
    return grants


def _alternatives(topics: list[str]) -> str:
    if not topics:
        return NOTHING
    return "|".join(f"(?:{filter_regex(topic)})" for topic in dict.fromkeys(topics))


def definitions(passwords: Mapping[str, str], acl: str, salt: bytes | None = None) -> dict:
    """RabbitMQ's definitions for a closed broker: `passwords` user -> password (every node
    and the host), `acl` the Mosquitto acl_file whose rules every user gets."""
    grants = parse_acl(acl, passwords)
    users = sorted(passwords)
    return {
        "users": [{"name": user, "password_hash": rabbitmq_hash(passwords[user], salt),
                   "hashing_algorithm": HASHING, "tags": ""} for user in users],
        "vhosts": [{"name": VHOST}],
        "permissions": [{"user": user, "vhost": VHOST, "configure": QUEUES,
                         "write": RESOURCES, "read": RESOURCES} for user in users],
        "topic_permissions": [{"user": user, "vhost": VHOST, "exchange": EXCHANGE,
                               "write": _alternatives(grants[user].write),
                               "read": _alternatives([*grants[user].read, SHARED_LITERAL])}
                              for user in users],
    }


def closed_rabbitmq_conf(conf: str, definitions_file: str) -> str:
    """A rabbitmq.conf closed: no anonymous MQTT client, no default login, the definitions
    loaded at boot."""
    dropped = ("mqtt.allow_anonymous", "mqtt.default_user", "mqtt.default_pass",
               "loopback_users", "load_definitions")
    lines = [line for line in conf.splitlines() if not line.startswith(dropped)]
    return "\n".join([*lines, "# closed (emu.cluster.rabbitmq_access)",
                      "mqtt.allow_anonymous = false",
                      f"load_definitions = {definitions_file}"]) + "\n"


def definitions_json(passwords: Mapping[str, str], acl: str) -> str:
    return json.dumps(definitions(passwords, acl), indent=1, sort_keys=True) + "\n"


DEFINITIONS_FILE = "/etc/foglab/rabbitmq/definitions.json"


def closed_rabbitmq(container, access, acl: str, conf_file: str):
    """A RabbitMQ broker's container (emu.cluster.plan.ContainerPlan) as planned open, closed
    in RabbitMQ's terms: its rabbitmq.conf (`conf_file`) refusing anonymous clients and
    loading DEFINITIONS_FILE, made from the closed cluster's logins (`access`,
    emu.cluster.access.Access) and the Mosquitto ACL (`acl`) the closed plan wrote."""
    host_user, host_password = access.host
    passwords = {**access.passwords, host_user: host_password}
    files = dict(container.files)
    files[conf_file] = closed_rabbitmq_conf(files[conf_file], DEFINITIONS_FILE)
    files[DEFINITIONS_FILE] = definitions_json(passwords, acl)
    return replace(container, files=tuple(files.items()))
