"""The emulation's side of each broker kind (topologies.brokers): one registered class per
kind, looked up by the kind's name (`kind_of`) or by a planned container's image
(`kind_of_container`). Plain data and text, without Docker.

A kind says the image and command its brokers run and the files the plan writes for them
(`planned`), how a closed cluster's logins and ACL are put in its terms (`closed`), how its
listener speaks TLS or why it cannot (`no_tls`), whether it takes a new ACL while it runs
(`live_acl`) and what a run cannot have it with (`refusal`, which `check_broker_kinds` asks
before anything starts). Code that treats brokers differently asks the kind; it never compares
names.

- Mosquitto (the services image). At a dilation K its own timers are scaled in a conf of its
  own (`mosquitto_files`); a spare (scenario.broker_scaling) runs the image's conf with $SYS
  counters every (emulated) second (`spare_files`). Closed: its conf refuses anonymous clients
  and reads the cluster's password file and ACL (emu.cluster.access), which it takes again
  while it runs.
- RabbitMQ (the rabbitmq image: Debian's RabbitMQ 3.10 with its MQTT plugin, on 1883): its
  rabbitmq.conf with the container's memory (`rabbitmq_files`); closed in its own terms
  (emu.cluster.rabbitmq_access), loaded at boot. Refused at a dilation (its timers are not
  scaled), on an engine other than docker, as a spare, with less memory than the Erlang node
  needs, and with TLS (not finished).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from emu.cluster.access import ACL_FILE, PASSWORD_FILE, Access, closed_conf
from emu.cluster.rabbitmq_access import closed_rabbitmq
from emu.cluster.tls import conf_path, mosquitto_tls_conf, rabbitmq_tls_conf
from emu.images import MOSQUITTO_COMMAND, RABBITMQ, SERVICES, ImageSpec
from topologies import brokers
from topologies.brokers import DEFAULT_BROKER_KIND, BrokerKind
from topologies.errors import SpecError
from topologies.model import Node, Topology

ROOTFS = Path(__file__).resolve().parents[1] / "rootfs"
# The services image's mosquitto.conf, whose settings a spare's, a dilated and a closed conf keep.
MOSQUITTO_DEFAULTS = ROOTFS / "services/mosquitto.conf"
SPARE_CONFIG = "/etc/foglab/spare.conf"  # a spare broker's mosquitto.conf (spare_files)
SPARE_COMMAND = ("mosquitto", "-c", SPARE_CONFIG)
# A broker's mosquitto.conf at a dilation (mosquitto_files): the image's with its timers scaled.
DILATED_CONFIG = "/etc/foglab/dilated.conf"
DILATED_COMMAND = ("mosquitto", "-c", DILATED_CONFIG)
# A closed cluster's Mosquitto (emu.cluster.closing.closed_plan): its conf.
CLOSED_CONFIG = "/etc/foglab/closed.conf"
CLOSED_COMMAND = ("mosquitto", "-c", CLOSED_CONFIG)
# Mosquitto's timers foglab's conf leaves at their defaults (s): the persistence database's
# autosave and the $SYS topics' period (a spare's is SPARE_SYS_INTERVAL_S).
MOSQUITTO_AUTOSAVE_S = 1800
MOSQUITTO_SYS_INTERVAL_S = 10
SPARE_SYS_INTERVAL_S = 1
# A broker of kind rabbitmq (rabbitmq_files): the image's rabbitmq.conf, written again with the
# container's memory limit, which the Erlang VM does not read from its cgroup.
RABBITMQ_CONFIG = "/etc/foglab/rabbitmq/rabbitmq.conf"
RABBITMQ_DEFAULTS = ROOTFS / "rabbitmq/rabbitmq.conf"
# The least memory a RabbitMQ broker's profile may have: the node takes about 100 MiB idle
# with the MQTT plugin (measured: docs/brokers.md), and its flow control blocks publishers at
# the watermark's share of the rest.
RABBITMQ_MIN_MEMORY = 256 * 1024**2

Files = tuple[tuple[str, str], ...]


class BrokerKindEmu:
    """A broker kind on the containers; one instance per kind in BROKERS."""

    kind: BrokerKind
    image: ImageSpec
    # It takes a new ACL while it runs (emu.cluster.grants grants a move's target then).
    live_acl = False
    # Why a run with TLS cannot have it, after "is of kind <name>, " (None: it can).
    no_tls: str | None = None

    def planned(self, cluster: str, broker: str, node: Node,
                dilation: float) -> tuple[tuple[str, ...], Files]:
        """The command and files of broker node `node`'s container (named `broker`)."""
        raise NotImplementedError

    def refusal(self, node: Node, *, dilation: float | str, engine: str,
                spares: Collection[str]) -> str | None:
        """Why the emulation cannot run broker `node` with the run's settings; None: it can."""
        return None

    def closed(self, container, access: Access, files: Files):
        """The broker's container (emu.cluster.plan.ContainerPlan) closed to outsiders, with
        the cluster's `access` and its Mosquitto password file and ACL (`files`)."""
        raise NotImplementedError

    def tls_conf_path(self, container) -> str:
        """The file of the container's that TLS goes in."""
        return conf_path(container)

    def tls_conf(self, conf: str) -> str:
        """That file's text with its listener speaking TLS only."""
        raise NotImplementedError


BROKERS: dict[str, BrokerKindEmu] = {}


def _registered(cls: type[BrokerKindEmu]) -> type[BrokerKindEmu]:
    """Register a kind's class, once per kind of topologies.brokers."""
    if cls.kind.name in BROKERS or cls.kind is not brokers.BROKER_KINDS.get(cls.kind.name):
        raise ValueError(f"broker kind {cls.kind.name!r}: registered already, or not one of "
                         "topologies.brokers.BROKER_KINDS")
    BROKERS[cls.kind.name] = cls()
    return cls


@_registered
class Mosquitto(BrokerKindEmu):
    kind = brokers.MOSQUITTO
    image = SERVICES
    live_acl = True

    def planned(self, cluster: str, broker: str, node: Node,
                dilation: float) -> tuple[tuple[str, ...], Files]:
        if dilation != 1:
            return DILATED_COMMAND, mosquitto_files(cluster, broker, dilation)
        return MOSQUITTO_COMMAND, ()

    def closed(self, container, access: Access, files: Files):
        """Its conf (the one its command names, else the image's) refusing anonymous clients
        and reading the password file and ACL, which are written beside it."""
        conf = container.command[-1] if container.command[-2:-1] == ("-c",) else None
        written = dict(container.files)
        text = written.pop(conf, None) or MOSQUITTO_DEFAULTS.read_text()
        return replace(
            container, command=CLOSED_COMMAND,
            files=(*written.items(),
                   (CLOSED_CONFIG, closed_conf(text, PASSWORD_FILE, ACL_FILE)), *files))

    def tls_conf(self, conf: str) -> str:
        return mosquitto_tls_conf(conf)


@_registered
class RabbitMQ(BrokerKindEmu):
    kind = brokers.RABBITMQ
    image = RABBITMQ
    no_tls = ("whose MQTT plugin over TLS foglab has not made work (a run with it never "
              "started): run it without tls, or make the broker kind mosquitto")
    engines = ("docker",)  # the engines (run.engine) it was tried on

    def planned(self, cluster: str, broker: str, node: Node,
                dilation: float) -> tuple[tuple[str, ...], Files]:
        return self.image.cmd, rabbitmq_files(cluster, broker, node.profile.memory)

    def refusal(self, node: Node, *, dilation: float | str, engine: str,
                spares: Collection[str]) -> str | None:
        """A time dilation (its timers are not scaled: heartbeats, the session queues'
        expiry), a swarm (not tried), a spare (the host reads a spare's $SYS counters, which
        are Mosquitto's); and a profile with less memory than the Erlang node needs."""
        if dilation != 1:
            shown = dilation if isinstance(dilation, str) else f"{dilation:g}"
            return (f"run.dilation is {shown}: RabbitMQ's timers are not scaled with it, "
                    "run it at dilation 1")
        if engine not in self.engines:
            return f"run.engine is {engine}: a RabbitMQ broker runs on the docker engine only"
        if node.name in spares:
            return ("it is a spare of scenario.broker_scaling, whose load the host reads from "
                    "Mosquitto's $SYS counters")
        if node.profile.memory < RABBITMQ_MIN_MEMORY:
            return (f"its profile {node.profile_name} has {node.profile.memory / 1024**2:.0f} "
                    f"MiB: a RabbitMQ node needs at least {RABBITMQ_MIN_MEMORY // 1024**2} MiB")
        return None

    def closed(self, container, access: Access, files: Files):
        """In RabbitMQ's terms (emu.cluster.rabbitmq_access), from the same logins and ACL."""
        return closed_rabbitmq(container, access, dict(files)[ACL_FILE], RABBITMQ_CONFIG)

    def tls_conf_path(self, container) -> str:
        return RABBITMQ_CONFIG

    def tls_conf(self, conf: str) -> str:
        return rabbitmq_tls_conf(conf)


def kind_of(node: Node) -> BrokerKindEmu:
    """The emulation's side of the kind broker node `node` runs (its `broker.kind`)."""
    return BROKERS[node.broker_kind.name]


def kind_of_container(container) -> BrokerKindEmu:
    """The kind a planned broker container (emu.cluster.plan.ContainerPlan) runs, by its
    image."""
    kind = next((kind for kind in BROKERS.values() if kind.image == container.image), None)
    if container.role == "broker" and kind is not None:
        return kind
    raise ValueError(f"{container.node} is no broker of a known kind "
                     f"(role {container.role}, image {container.image.name})")


def check_broker_kinds(topology: Topology, *, dilation: float | str = 1.0,
                       closed: bool = False, engine: str = "docker",
                       spares: Collection[str] = ()) -> None:
    """Refuse, naming the broker's `kind`, a broker whose kind the emulation cannot run with
    these settings (a RabbitMQ broker where it only knows Mosquitto's ways: RabbitMQ.refusal).
    `dilation` as written (`auto` and `real-speed` may choose K > 1: refused too).
    `experiments.checks` calls this with the run's settings before anything starts;
    plan_cluster with those it knows. `closed` is taken by every kind."""
    for node in topology.of_kind("broker"):
        kind = kind_of(node)
        why = kind.refusal(node, dilation=dilation, engine=engine, spares=spares)
        if why is not None:
            raise SpecError(("nodes", node.name, "broker", "kind"), kind.kind.name,
                            f"kind {DEFAULT_BROKER_KIND.name} for broker {node.name}: {why}",
                            f"topology {topology.name}")


# The files of Mosquitto's and RabbitMQ's containers -----------------------------------------

def _scaled_seconds(seconds: float, dilation: float) -> int:
    # Mosquitto reads whole seconds: at a K that is not a whole number, the nearest one.
    return max(1, round(seconds * dilation))


def mosquitto_timers(dilation: float, sys_interval_s: float = MOSQUITTO_SYS_INTERVAL_S) -> str:
    """The conf lines of Mosquitto's own timers at a dilation K: each K times its emulated
    value (the defaults; `sys_interval_s` a spare's). Clients' keepalives are the clients':
    Mosquitto enforces 1.5 times what each CONNECT asks for, so a client that scales its
    keepalive (the agents do, emu.agent) is held to the scaled one."""
    return "\n".join([
        f"# Mosquitto's timers at dilation {dilation:g}: emulated value x {dilation:g}",
        f"autosave_interval {_scaled_seconds(MOSQUITTO_AUTOSAVE_S, dilation)}",
        f"sys_interval {_scaled_seconds(sys_interval_s, dilation)}"]) + "\n"


def mosquitto_files(cluster: str, broker: str, dilation: float) -> Files:
    """A broker's mosquitto.conf at a dilation (DILATED_CONFIG): the image's settings and its
    timers scaled (`mosquitto_timers`)."""
    header = (f"# {broker}: a broker of cluster {cluster} "
              "(emu.cluster.broker_kinds.mosquitto_files)\n")
    return ((DILATED_CONFIG,
             MOSQUITTO_DEFAULTS.read_text() + header + mosquitto_timers(dilation)),)


def spare_files(cluster: str, spare: str, dilation: float = 1.0) -> Files:
    """A spare broker's mosquitto.conf: the image's settings, and its $SYS counters published
    every (emulated) second, so the host can read how many messages it received
    (emu.features.broker_scaling); at a dilation, its timers scaled (`mosquitto_timers`)."""
    defaults = MOSQUITTO_DEFAULTS.read_text()
    header = (f"# {spare}: a spare broker of cluster {cluster} "
              "(emu.cluster.broker_kinds.spare_files)\n")
    timers = (f"sys_interval {SPARE_SYS_INTERVAL_S}\n" if dilation == 1 else
              mosquitto_timers(dilation, SPARE_SYS_INTERVAL_S))
    return ((SPARE_CONFIG, defaults + header + timers),)


def rabbitmq_files(cluster: str, broker: str, memory: int) -> Files:
    """A RabbitMQ broker's rabbitmq.conf (RABBITMQ_CONFIG): the image's, with the memory its
    container has (its profile's), which the Erlang VM would otherwise read as the host's: the
    memory watermark, a share of it, then blocks publishers before the kernel kills the node."""
    header = (f"# {broker}: a broker of cluster {cluster} "
              "(emu.cluster.broker_kinds.rabbitmq_files)\n")
    return ((RABBITMQ_CONFIG, RABBITMQ_DEFAULTS.read_text() + header
             + f"total_memory_available_override_value = {int(memory)}\n"),)
