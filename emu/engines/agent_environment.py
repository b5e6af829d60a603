"""The environment an agent's container starts with, whatever engine runs it: its config
(emu.agent.config) pointing at its links' addresses, without its secrets, and the host's
Spark JVM options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from emu.agent.config import CONFIG_VARIABLE, RECORDS_DIR, without_secrets
from workloads.spark.jvm import JVM_OPTIONS_VARIABLE, jvm_options

if TYPE_CHECKING:
    from emu.cluster.plan import ClusterPlan, ContainerPlan


def agent_environment(cluster: ClusterPlan, plan: ContainerPlan,
                      addresses: Mapping[tuple[str, str], str], *,
                      keep_secrets: bool = False) -> dict[str, str]:
    """The environment of `plan`'s agent in `cluster`, its links at `addresses` ((client,
    service) -> host:port); none for a container without an agent. `keep_secrets`: with its
    secrets in the config, for the zygote's request only (a socket only root reaches), never
    a container's."""
    if plan.agent is None:
        return {}
    config = plan.agent
    links = cluster.links_of(plan.node)
    broker = cluster.brokers.get(plan.node)
    mqtt = [addresses[link.key] for link in links if link.role == "mqtt"
            and link.service == broker]
    zookeeper = [addresses[link.key] for link in links if link.role == "zookeeper"]
    # The spares its drivers may move to (emu.cluster.plan), through their links too.
    spares = {link.service: addresses[link.key] for link in links
              if link.service in config.spares}
    # The other brokers its operators read on (emu.cluster.plan), likewise.
    others = {link.service: addresses[link.key] for link in links
              if link.service in config.other_brokers}
    config = replace(config, mqtt=mqtt[0] if mqtt else config.mqtt,
                     zookeeper=",".join(zookeeper), records=RECORDS_DIR, spares=spares,
                     other_brokers=others)
    # Its secrets go in a 0400 file instead (the engine's), or in the zygote's request: the
    # environment is in `docker inspect` for anyone who may use the engine.
    if not keep_secrets:
        config = without_secrets(config)[0]
    # The host's Spark JVM options, for the node's jobs (workloads.spark.jvm).
    options = jvm_options()
    return {CONFIG_VARIABLE: config.to_json(), "PYTHONUNBUFFERED": "1",
            **({JVM_OPTIONS_VARIABLE: options} if options else {})}
