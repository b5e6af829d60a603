"""Who may use a closed cluster's brokers and ZooKeeper: credentials per node, Mosquitto's
password file and ACL, ZooKeeper's digest identity. Plain data and text, without Docker.

Closed (`run.access: closed`; a shared host or a swarm where other tenants reach the networks):
- Mosquitto refuses anonymous clients. Every agent logs in as its node (a password of its own);
  the host's controller as HOST_USER, with every topic.
- A node publishes only its own topics, those with its name at the second level
  (`<stream>/<node>[/...]`, `<writes>/<node>`, `foglab/load/<node>`), and reads those, the
  topics its requests come on, and the pipeline's: what any operator of the run reads (an
  operator may be moved to any node by a migration, a recovery or a replica). The run's
  control families every node takes part in (a request's reply, migrations' hand-offs,
  broadcasts) are open to every node. A publish outside its ACL is dropped by Mosquitto; a
  subscription outside it is granted (Mosquitto 2.0's SUBACK says QoS 1) but nothing the ACL
  forbids is delivered on it.
- ZooKeeper: every znode foglab makes carries one digest ACL, the run's identity
  (ZOOKEEPER_USER and a password per run), which the agents and the host add to their
  sessions; a client without it is refused (NoAuth) on foglab's paths. ZooKeeper's own
  (`/zookeeper`) stay as they are.

Open (the default on one host): anonymous, as before; nothing here applies.
The passwords are in each container's environment or config, which anyone who can inspect the
containers can read: closed keeps out other tenants of a network, not the cluster's operator.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from emu.agent.zookeeper import digest_id  # noqa: F401 - the one source, re-exported
from workloads.topics import shared

HOST_USER = "foglab-host"
ZOOKEEPER_USER = "foglab"
MODES = ("open", "closed")
# Mosquitto 2's password hash (mosquitto_passwd's): PBKDF2-HMAC-SHA512, 101 rounds, 12 bytes
# of salt, written `$7$<rounds>$<salt, base64>$<hash, base64>`.
PBKDF2_ROUNDS = 101
SALT_BYTES = 12
# Every node may write replies to the controller, migration hand-offs and broadcasts to its
# children (their topics name the request, the migration or the receiver, not the writer),
# and read the requests to all nodes and migrations' hand-offs.
# A Spark standby's warm-up runs on a topic of its own (workloads.spark.job.warm_up).
CONTROL_WRITES = ("foglab/mgmt/controller/#", "foglab/migration/#", "foglab/broadcast/#",
                  "foglab/warmup/#")
CONTROL_READS = ("foglab/mgmt/all/#", "foglab/migration/#", "foglab/warmup/#")
# A node's own topics: its name at the second level (emu.agent.protocol's topic rules), its
# requests, its simulated load, its part of a broadcast.
OWN = ("+/%u", "+/%u/#", "foglab/mgmt/%u/#", "foglab/load/%u", "foglab/broadcast/+/%u")


@dataclass(frozen=True)
class Access:
    """A closed cluster's secrets: a password per node and the host's, ZooKeeper's identity."""

    passwords: Mapping[str, str]   # node -> its MQTT password
    host_password: str
    zookeeper_password: str
    pipeline_reads: tuple[str, ...] = ()  # every topic filter an operator of the run reads

    @classmethod
    def make(cls, nodes: Iterable[str], pipeline_reads: Iterable[str] = ()) -> Access:
        # A shared subscription is checked on its filter (`$share/g/clean/#`: clean/#).
        reads = {shared(topic)[1] for topic in pipeline_reads}
        return cls({node: _password() for node in nodes}, _password(), _password(),
                   tuple(sorted(reads)))

    def credentials(self, node: str) -> tuple[str, str]:
        """(user, password) the node's MQTT clients log in with."""
        return node, self.passwords[node]

    @property
    def host(self) -> tuple[str, str]:
        return HOST_USER, self.host_password

    @property
    def zookeeper_auth(self) -> str:
        """`user:password`, as ZooKeeper's digest scheme takes it (addauth)."""
        return f"{ZOOKEEPER_USER}:{self.zookeeper_password}"

    def password_file(self, salt: bytes | None = None) -> str:
        """Mosquitto's password_file: each user with its hash (a fixed `salt` for tests)."""
        users = {**self.passwords, HOST_USER: self.host_password}
        return "".join(f"{user}:{mosquitto_hash(password, salt)}\n"
                       for user, password in sorted(users.items()))

    def acl_file(self) -> str:
        """Mosquitto's acl_file: the host everything, every node its own and the pipeline's."""
        lines = ["# foglab's closed cluster (emu.cluster.access): the host reads and writes all",
                 f"user {HOST_USER}", "topic readwrite #", "topic read $SYS/#", "",
                 "# every node: its own topics, the run's control, the pipeline's inputs"]
        lines += [f"pattern readwrite {topic}" for topic in OWN]
        lines += [f"pattern write {topic}" for topic in CONTROL_WRITES]
        lines += [f"pattern read {topic}" for topic in CONTROL_READS]
        lines += [f"pattern read {topic}" for topic in self.pipeline_reads]
        return "\n".join(lines) + "\n"


def _password() -> str:
    return secrets.token_urlsafe(18)


def mosquitto_hash(password: str, salt: bytes | None = None) -> str:
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, PBKDF2_ROUNDS)
    return (f"$7${PBKDF2_ROUNDS}${base64.b64encode(salt).decode()}"
            f"${base64.b64encode(digest).decode()}")


def closed_conf(conf: str, password_file: str, acl_file: str) -> str:
    """A mosquitto.conf closed: anonymous clients refused, the password file and ACL read."""
    lines = [line for line in conf.splitlines() if not line.startswith("allow_anonymous")]
    return "\n".join([*lines, "# closed (emu.cluster.access)", "allow_anonymous false",
                      f"password_file {password_file}", f"acl_file {acl_file}"]) + "\n"


def host_login(plan) -> tuple[str, str] | None:
    """The host's MQTT login on a cluster's brokers (an emu.cluster.plan.ClusterPlan): None
    when the cluster is open."""
    access = getattr(plan, "access", None)
    return access.host if access is not None else None


def kazoo_options(plan) -> dict:
    """KazooClient's arguments for the host's sessions on a cluster's ZooKeeper: on a closed
    one, its identity added and every znode made with its digest ACL."""
    access = getattr(plan, "access", None)
    if access is None:
        return {}
    from kazoo.security import make_digest_acl

    return {"auth_data": [("digest", access.zookeeper_auth)],
            "default_acl": [make_digest_acl(ZOOKEEPER_USER, access.zookeeper_password,
                                            all=True)]}


def check_mode(value: str, where: str = "run.access") -> str:
    if value not in MODES:
        raise ValueError(f"{where}: {value!r} is not one of {', '.join(MODES)}")
    return value
