"""A cluster plan closed to outsiders (`run.access: closed`, emu.cluster.access), and with
TLS on top (`run.tls`, emu.cluster.tls): its brokers (each in its kind's terms,
emu.cluster.broker_kinds), ZooKeeper servers and agents changed to match. Plain data and text,
without Docker."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from emu.cluster.access import ACL_FILE, PASSWORD_FILE, Access, read_grants
from emu.cluster.broker_kinds import kind_of_container
from emu.cluster.tls import (
    CA_FILE,
    CERT_FILE,
    KEY_FILE,
    KEYSTORE_FILE,
    NETTY_JARS,
    ROLE_NAMES,
    TLSPlan,
    conf_path,
    issue,
    zookeeper_tls_conf,
)
from emu.cluster.zookeeper_servers import ZOOKEEPER_CONFIG
from workloads.operator_engines import operator_engine


def closed_plan(plan, targets: Mapping[str, Collection[str]] | None = None, *,
                live_acl: bool = True):
    """The plan (an emu.cluster.plan.ClusterPlan) closed to outsiders (emu.cluster.access):
    each broker refuses anonymous clients and takes the cluster's logins and ACL in its kind's
    terms, where each node reads what the operators placed on it read (those that may come to
    it, `targets`, plan_cluster's, are granted at the move, emu.cluster.grants; or here, where
    the brokers cannot take a new ACL while they run: not `live_acl`, or a kind that loads its
    permissions at boot only); each agent logs in as its node, to the broker and to ZooKeeper
    (and adds the run's identity there); each ZooKeeper server takes the host as its super
    user."""
    configs = plan.agent_configs()
    # Mosquitto takes a new ACL while it runs (emu.cluster.grants: a move's target is granted
    # then) where its engine can rewrite the file (`live_acl`: the engine class's; a swarm's
    # brokers read it from a Docker config); a RabbitMQ broker loads its permissions at boot.
    # Otherwise a move's targets are granted now.
    live = all(kind_of_container(c).live_acl for c in plan.containers.values()
               if c.role == "broker")
    reads, common = read_grants(configs, targets, at_move=live and live_acl)
    access = Access.make(configs, common, reads)
    files = ((PASSWORD_FILE, access.password_file()), (ACL_FILE, access.acl_file()))
    containers = dict(plan.containers)
    for name, container in plan.containers.items():
        if container.role == "broker":
            containers[name] = kind_of_container(container).closed(container, access, files)
        elif container.role == "zookeeper":
            containers[name] = replace(container, files=tuple(
                (path, text + access.zookeeper_super() + "\n" if path == ZOOKEEPER_CONFIG
                 else text) for path, text in container.files))
        elif container.agent is not None:
            user, password = access.credentials(name)
            containers[name] = replace(container, agent=replace(
                container.agent, mqtt_user=user, mqtt_password=password,
                zookeeper_auth=access.zookeeper_identities(name)))
    return replace(plan, containers=containers, access=access)


def tls_plan(plan):
    """A closed plan (`closed_plan`'s) with TLS on its brokers and ZooKeeper, its agents told
    to trust the run's authority (AgentConfig.tls_ca), `plan.tls` set for the host's clients
    (emu.cluster.tls's `tls_options`, `tls_login`)."""
    if getattr(plan, "access", None) is None:
        raise ValueError("run.tls is true but run.access is open: TLS needs access: closed "
                         "(the logins it protects)")
    _check_tls(plan)
    servers = {c.node: (c.name, c.node, ROLE_NAMES[c.role]) for c in plan.services()
               if c.role in ROLE_NAMES}
    ca, issued = issue(servers, f"foglab {plan.cluster}")
    containers = dict(plan.containers)
    for name, container in plan.containers.items():
        if name in issued:
            containers[name] = _server(container, *issued[name], ca)
        elif container.agent is not None:
            containers[name] = replace(container, agent=replace(container.agent, tls_ca=ca))
    return replace(plan, containers=containers, tls=TLSPlan(ca))


def _check_tls(plan) -> None:
    """Refuse brokers of a kind without TLS, and Spark operators (plain MQTT only)."""
    refused = [c for c in plan.services()
               if c.role == "broker" and kind_of_container(c).no_tls is not None]
    if refused:
        kind = kind_of_container(refused[0])
        brokers = sorted(c.node for c in refused if kind_of_container(c) is kind)
        raise ValueError(f"run.tls: broker {', '.join(brokers)} is of kind {kind.kind.name}, "
                         f"{kind.no_tls}")
    spark = sorted(c.node for c in plan.agents() if c.agent is not None
                   and any(not operator_engine(op.engine).tls for op in c.agent.operators))
    if spark:
        raise ValueError(f"run.tls: {', '.join(spark)} run Spark operators, whose MQTT "
                         "clients (workloads.spark) speak plain MQTT only: run them without tls")


def _server(container, cert: str, key: str, ca: str):
    """A broker or ZooKeeper server's container speaking TLS only, with its certificate."""
    files = dict(container.files)
    command = container.command
    if container.role == "zookeeper":
        path = conf_path(container)
        files[path] = zookeeper_tls_conf(files[path])
        files[KEYSTORE_FILE] = key + cert
        at = command.index("-cp") + 1
        command = (*command[:at], ":".join((command[at], *NETTY_JARS)), *command[at + 1:])
    else:
        kind = kind_of_container(container)
        path = kind.tls_conf_path(container)
        files[path] = kind.tls_conf(files[path])
    files.update({CA_FILE: ca, CERT_FILE: cert, KEY_FILE: key})
    return replace(container, command=command, files=tuple(files.items()))
