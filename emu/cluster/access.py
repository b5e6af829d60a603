"""Who may use a closed cluster's brokers and ZooKeeper: credentials per node, Mosquitto's
password file and ACL, ZooKeeper's digest identities. Plain data and text, without Docker.

Closed (`run.access: closed`, the default on the containers; docs/access.md):
- Mosquitto refuses anonymous clients. Every agent logs in as its node (a password of its own);
  the host's controller as HOST_USER, with every topic.
- A node publishes only its own topics, those with its name at the second level
  (`<stream>/<node>[/...]`, `<writes>/<node>`, `foglab/load/<node>`), and reads those, its
  requests, and what the operators placed on it read (`read_grants`): not every operator's
  filter for every node. An instance the host starts on a node later (a migration's,
  recovery's or replica's target) is granted its reads there just before
  (emu.cluster.grants: the brokers reload the ACL). The run's control families name their writer
  at a level Mosquitto's ACL checks (`%u`): a reply (`foglab/mgmt/controller/<node>/...`), a
  migration's hand-off (`foglab/migration/<writer>/<reader>/...`), a broadcast's message
  (`foglab/broadcast/<sender>/<index>/<receiver>`); so no node writes another's. A publish
  outside its ACL is dropped by Mosquitto; a subscription outside it is granted (Mosquitto
  2.0's SUBACK says QoS 1) but nothing the ACL forbids is delivered on it.
- ZooKeeper: every agent logs in as its node (digest, its MQTT password) and adds the run's
  shared identity (ZOOKEEPER_USER); the host logs in as HOST_USER, ZooKeeper's super user
  (`superDigest` in zoo.cfg). A znode a node makes carries two entries: its node, every
  permission; the shared identity, read. The parents every node makes children under
  (`/iot/gateways`, `/foglab/checkpoints`, ...) give the shared identity read and create, not
  delete: a node cannot delete or change another's znodes, nor one it does not own. A
  client without the run's identities is refused (NoAuth). Paths one node makes and another
  must change are granted where they are handed over (emu.agent.zookeeper's `handed` ACL,
  the host's `zookeeper_acl` at a recovery's takeover).

Open (by choice, for a quick look): anonymous, as before; nothing here applies.
The passwords are in each container's environment or config, which anyone who can inspect the
containers can read: closed keeps out other tenants of a network, not the cluster's operator.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emu.agent.zookeeper import (
    READ,
    READ_CREATE,
    digest_id,  # noqa: F401 - the one source, re-exported
)
from workloads.pipeline import reads_from
from workloads.topics import shared

# Where a closed broker reads its users' hashes and its ACL (closed_plan writes them; the
# run's grants rewrite the ACL: emu.cluster.grants).
PASSWORD_FILE = "/etc/foglab/passwd"
ACL_FILE = "/etc/foglab/acl"
HOST_USER = "foglab-host"
ZOOKEEPER_USER = "foglab"
MODES = ("open", "closed")
DEFAULT_MODE = "closed"
# Where a closed cluster's secrets wait for the host's later `foglab emu` commands: a file of
# the cluster's scratch folder (0700, removed at `down`), 0600.
ACCESS_FILE = "access.json"
# Mosquitto 2's password hash (mosquitto_passwd's): PBKDF2-HMAC-SHA512, 101 rounds, 12 bytes
# of salt, written `$7$<rounds>$<salt, base64>$<hash, base64>`.
PBKDF2_ROUNDS = 101
SALT_BYTES = 12
# Every node, by pattern (%u: its name). Its own topics (its name at the second level,
# emu.agent.protocol's topic rules), its simulated load.
OWN = ("+/%u", "+/%u/#", "foglab/load/%u")
# What it writes with its name at a level: replies to the controller, migrations' hand-offs
# it sends, broadcast messages it sends. A Spark standby's warm-up runs on a topic of its own
# (workloads.spark.job.warm_up), synthetic readings.
CONTROL_WRITES = ("foglab/mgmt/controller/%u/#", "foglab/migration/%u/#",
                  "foglab/broadcast/%u/#")
# What it reads: its requests and those to all, hand-offs and broadcast messages meant for it.
CONTROL_READS = ("foglab/mgmt/%u/#", "foglab/mgmt/all/#", "foglab/migration/+/%u/#",
                 "foglab/broadcast/+/+/%u")
CONTROL_READWRITE = ("foglab/warmup/#",)


@dataclass(frozen=True)
class Access:
    """A closed cluster's secrets, and what each node reads beyond its own topics: `reads`,
    node -> filters for it alone; `common_reads`, filters every node reads (%u its name)."""

    passwords: Mapping[str, str]   # node -> its MQTT and ZooKeeper password
    host_password: str
    zookeeper_password: str        # the run's shared identity's (ZOOKEEPER_USER)
    reads: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    common_reads: tuple[str, ...] = ()

    @classmethod
    def make(cls, nodes: Iterable[str], common_reads: Iterable[str] = (),
             reads: Mapping[str, Iterable[str]] | None = None) -> Access:
        # A shared subscription is checked on its filter (`$share/g/clean/#`: clean/#).
        return cls({node: _password() for node in nodes}, _password(), _password(),
                   {node: _filters(filters) for node, filters in (reads or {}).items()},
                   _filters(common_reads))

    def credentials(self, node: str) -> tuple[str, str]:
        """(user, password) the node's MQTT clients log in with."""
        return node, self.passwords[node]

    @property
    def host(self) -> tuple[str, str]:
        return HOST_USER, self.host_password

    @property
    def zookeeper_auth(self) -> str:
        """The run's shared identity, `user:password` as ZooKeeper's digest scheme takes it."""
        return f"{ZOOKEEPER_USER}:{self.zookeeper_password}"

    @property
    def host_zookeeper_auth(self) -> str:
        """The host's identity: ZooKeeper's super user (`zookeeper_super`)."""
        return f"{HOST_USER}:{self.host_password}"

    def zookeeper_identities(self, node: str) -> str:
        """What a node's sessions add (AgentConfig.zookeeper_auth, emu.agent.zookeeper.use_auth):
        its own identity first (its znodes' every permission), then the run's (read)."""
        return f"{node}:{self.passwords[node]},{self.zookeeper_auth}"

    def zookeeper_acl(self, node: str) -> list:
        """kazoo ACLs of a znode handed to `node` (a checkpoint a recovery's target takes
        over): the node every permission, the run read."""
        from kazoo.security import ACL, Id

        owner, reader = digest_id(f"{node}:{self.passwords[node]}"), digest_id(self.zookeeper_auth)
        return [ACL(31, Id("digest", owner)), ACL(READ, Id("digest", reader))]

    def zookeeper_super(self) -> str:
        """zoo.cfg's line making the host ZooKeeper's super user (an unknown key is read as the
        system property `zookeeper.<key>`, which DigestAuthenticationProvider reads)."""
        return f"DigestAuthenticationProvider.superDigest={digest_id(self.host_zookeeper_auth)}"

    def password_file(self, salt: bytes | None = None) -> str:
        """Mosquitto's password_file: each user with its hash (a fixed `salt` for tests)."""
        users = {**self.passwords, HOST_USER: self.host_password}
        return "".join(f"{user}:{mosquitto_hash(password, salt)}\n"
                       for user, password in sorted(users.items()))

    def acl_file(self, granted: Mapping[str, Iterable[str]] | None = None,
                 probe: str | None = None) -> str:
        """Mosquitto's acl_file: the host everything; every node its own topics and the run's
        control by pattern, the filters every node reads; then each node's own reads, with
        what was `granted` to it while the run goes (emu.cluster.grants). `probe`: a pattern
        topic every node may use, which says which version of the file a broker runs."""
        lines = ["# foglab's closed cluster (emu.cluster.access): the host reads and writes all",
                 f"user {HOST_USER}", "topic readwrite #", "topic read $SYS/#", ""]
        granted = granted or {}
        for node in sorted({*self.reads, *granted}):
            filters = sorted({*self.reads.get(node, ()), *granted.get(node, ())})
            if filters:
                lines += [f"user {node}", *(f"topic read {topic}" for topic in filters), ""]
        lines += ["# every node (%u: its name): its own topics, the run's control it takes "
                  "part in, the pipeline's inputs every node reads"]
        lines += [f"pattern readwrite {topic}"
                  for topic in (*OWN, *CONTROL_READWRITE, *([probe] if probe else []))]
        lines += [f"pattern write {topic}" for topic in CONTROL_WRITES]
        lines += [f"pattern read {topic}" for topic in (*CONTROL_READS, *self.common_reads)]
        return "\n".join(lines) + "\n"

    # Kept for the host's later commands ----------------------------------------------------

    def to_json(self) -> str:
        return json.dumps({"passwords": dict(self.passwords), "host": self.host_password,
                           "zookeeper": self.zookeeper_password,
                           "reads": {n: list(f) for n, f in self.reads.items()},
                           "common_reads": list(self.common_reads)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str = "access") -> Access:
        try:
            data = json.loads(text)
            return cls(dict(data["passwords"]), str(data["host"]), str(data["zookeeper"]),
                       {n: tuple(f) for n, f in data.get("reads", {}).items()},
                       tuple(data.get("common_reads", ())))
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise ValueError(f"{where}: not a closed cluster's access file ({error!r})") from None


def _filters(topics: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({shared(topic)[1] for topic in topics}))


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


# Per-node reads -------------------------------------------------------------------------------


def operator_filters(op: Any) -> set[str]:
    """What an operator's instance reads through a broker (an OperatorConfig, or its fields
    as a request carries them): its reads (a shared subscription checked on its filter), and
    for one reading through a session of its own with outputs, those outputs' every writer
    (a parallel migration's source watches the target's, emu.agent.parallel)."""
    get = op.get if isinstance(op, Mapping) else lambda key, default=None: getattr(
        op, key, default)
    filters = {shared(f)[1] for f in get("reads") or ()}
    if get("session") and get("writes"):
        filters.add(f"{get('writes')}/+")
    return filters


def read_grants(configs: Mapping[str, Any],
                targets: Mapping[str, Collection[str]] | None = None, *,
                at_move: bool = True) -> tuple[dict[str, set[str]], set[str]]:
    """What each node reads beyond its own topics, from the pipeline's placement: (node ->
    filters, filters every node reads by pattern).

    `configs`: each agent's AgentConfig (its operators as placed). An operator's filters go to
    the nodes it is placed on at the start. `at_move` (the default, Mosquitto brokers on one
    engine): an instance started elsewhere later (a migration's, a recovery's, a replica's
    target) is granted its reads there when it starts (emu.cluster.grants), so nothing more
    is granted here. Not `at_move` (brokers that cannot take a new ACL while they run): an
    operator that may move (a session of its own, or a latency bound) is granted on the nodes
    it may come to as well (`targets` as emu.cluster.plan.plan_cluster takes it; None: every
    gateway and cloud VM). An operator with an instance on each of several gateways, reading
    in process there and through no session of its own, takes its own gateway's readings, its
    own topics (`<stream>/<gateway>/...`, OWN), when every stream it reads is the devices' or
    written on each of those gateways too (`local_reads`): it is granted nothing more. One
    that reads what operators elsewhere write (a display on every phone reading the level a
    cloud VM computes) reads it through the broker, and is granted it.
    A filter granted to every gateway and cloud VM is one pattern line, not one per node:
    the ACL stays linear in the nodes."""
    from emu.agent.config import AGENT_KINDS

    movers = sorted(n for n, c in configs.items() if c.kind in AGENT_KINDS)
    placed: dict[str, list[str]] = {}
    operators: dict[str, Any] = {}
    for node, config in configs.items():
        for op in config.operators:
            placed.setdefault(op.name, []).append(node)
            operators.setdefault(op.name, op)
    per_node: dict[str, set[str]] = {}
    common: set[str] = set()
    writers: dict[str, set[str]] = {}  # an operator-written stream -> the nodes writing it
    for name, nodes in placed.items():
        if getattr(operators[name], "writes", None):
            writers.setdefault(operators[name].writes, set()).update(nodes)
    for name, nodes in placed.items():
        op = operators[name]
        filters = operator_filters(op)
        moves = bool(op.session) or op.slo is not None
        if (not moves and len(nodes) > 1 and all(configs[n].kind == "gateway" for n in nodes)
                and local_reads(filters, nodes, writers)):
            continue  # each instance its own gateway's: its own topics (OWN) already
        readers = set(nodes)
        if moves and not at_move:
            readers |= set(movers if targets is None else targets.get(name, ()))
        if movers and set(movers) <= readers:
            common |= filters
            continue
        for node in readers:
            per_node.setdefault(node, set()).update(filters)
    return per_node, common


def local_reads(filters: Iterable[str], nodes: Collection[str],
                writers: Mapping[str, Collection[str]]) -> bool:
    """Whether instances on `nodes` read all that `filters` match where it is published: every
    operator-written stream a filter matches is written on each of `nodes` (what the devices
    send, the agent's own, is read where it enters)."""
    return all(set(nodes) <= set(at) for stream, at in writers.items()
               if any(reads_from(f, stream) for f in filters))


# Where the host finds them --------------------------------------------------------------------


def save(access: Access, folder: Path | str) -> Path:
    """Write the secrets into a cluster's scratch folder (0700), as a file 0600 made anew
    (never through a link planted there)."""
    path = Path(folder) / ACCESS_FILE
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    descriptor = os.open(path, flags, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(access.to_json())
    return path


def load(folder: Path | str | None) -> Access | None:
    """A cluster's secrets from its scratch folder; None when it has none (an open cluster)."""
    if not folder:
        return None
    path = Path(folder) / ACCESS_FILE
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(descriptor) as file:
        return Access.from_json(file.read(), str(path))


def host_login(plan) -> tuple[str, str] | None:
    """The host's MQTT login on a cluster's brokers (an emu.cluster.plan.ClusterPlan, or an
    Access): None when the cluster is open."""
    access = plan if isinstance(plan, Access) else getattr(plan, "access", None)
    return access.host if access is not None else None


def kazoo_options(plan) -> dict:
    """KazooClient's arguments for the host's sessions on a cluster's ZooKeeper (a plan, or an
    Access): on a closed one, the host's identity (ZooKeeper's super user) added, and the
    znodes it makes (the parents the agents make theirs under) readable by the run and open
    to its children."""
    access = plan if isinstance(plan, Access) else getattr(plan, "access", None)
    if access is None:
        return {}
    from kazoo.security import ACL, Id

    reader = digest_id(access.zookeeper_auth)
    return {"auth_data": [("digest", access.host_zookeeper_auth)],
            "default_acl": [ACL(READ_CREATE, Id("digest", reader))]}


def check_mode(value: str, where: str = "run.access") -> str:
    if value not in MODES:
        raise ValueError(f"{where}: {value!r} is not one of {', '.join(MODES)}")
    return value
