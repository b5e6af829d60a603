"""A cluster that is up: its agents, where operators run, starting its drivers.

What `foglab emu` (emu.cli.main) and a run (emu.run.emulate) need to know of, or do to, a cluster
whose containers are running, as plain functions that raise errors: emu.cli.main prints and chooses
the exit codes. The cluster is found by its containers' labels (emu.engines.docker.inventory); the
agents are asked through their brokers (emu.control.commands).

- `agents_and_brokers`: the agents (node, kind, broker, container state), the brokers'
  addresses and every node's kind, from the labels.
- `where_operators_run`: which agents run which operator, from a ping of every agent.
- `experiment_settings`: the scenario's migration settings of the experiment the cluster was
  brought up with (`foglab emu up --experiment` labels its containers with the file and its
  --set options).
- `wait_agents_registered` and `start_drivers`: the start of an experiment, as a run does it:
  every agent registered in ZooKeeper, then every driver started at one epoch
  (`set run.epoch`) EPOCH_LEAD_S ahead, so that every agent hears it before its first message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from emu.agent.timebase import UNDILATED, TimeBase
from emu.cluster.access import kazoo_options
from emu.cluster.tls import tls_login, tls_options
from topologies.errors import SpecError

# Labels of `foglab emu up --experiment`'s containers: the experiment and its --set options.
EXPERIMENT_LABEL = "foglab.experiment"
SETS_LABEL = "foglab.experiment.set"
# How long the agents may take to register before an experiment's drivers start.
REGISTER_TIMEOUT_S = 180.0
# Between the start request and the epoch: every agent hears it before its first message.
EPOCH_LEAD_S = 1.0
PING_TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0


class ExperimentGone(RuntimeError):
    """The experiment a cluster was brought up with no longer loads (moved, or changed)."""


@dataclass(frozen=True)
class Agent:
    """An agent container of a cluster that is up, as its labels and the engine say."""

    node: str
    kind: str
    broker: str
    state: str


def agents_and_brokers(client, cluster: str) -> tuple[dict[str, Agent], dict[str, str],
                                                      dict[str, str]]:
    """The cluster's agents, its brokers' addresses (node -> ip:1883) and every node's kind
    (with its role when it runs no agent)."""
    from emu.cluster.plan import MQTT_PORT
    from emu.engines.docker import inventory

    agents, brokers, kinds = {}, {}, {}
    for summary in inventory.containers(client, cluster):
        labels = summary.get("Labels") or {}
        node, role, kind = (labels.get(k, "") for k in ("foglab.node", "foglab.role",
                                                         "foglab.kind"))
        if not node:
            continue  # the agents' zygote
        kinds[node] = kind if role in ("agent", kind) else f"{kind} ({role})"
        if role == "agent":
            agents[node] = Agent(node, kind, labels.get("foglab.broker", ""),
                                 summary.get("State", ""))
        elif role == "broker":
            network = labels.get("foglab.network", "")
            attached = (summary.get("NetworkSettings") or {}).get("Networks") or {}
            ip = (attached.get(network) or {}).get("IPAddress", "")
            brokers[node] = f"{ip}:{MQTT_PORT}"
    return agents, brokers, kinds


def cluster_login(client, cluster: str) -> tuple[str, str] | None:
    """The host's MQTT login on a cluster up (from the secrets its engine kept in the
    cluster's scratch folder, emu.cluster.access.save); None for an open cluster. A user who
    may not read that folder (0700, root's) gets a PermissionError naming it."""
    from emu.cluster.access import host_login
    from emu.cluster.access import load as load_access
    from emu.engines.docker import inventory

    scratch = next((labels[inventory.SCRATCH] for summary in inventory.containers(client, cluster)
                    if (labels := summary.get("Labels") or {}).get(inventory.SCRATCH)), None)
    try:
        access = load_access(scratch)
    except PermissionError:
        raise PermissionError(f"cluster {cluster} is closed and its secrets in {scratch} are "
                              "root's: run the command as the user who brought it up") from None
    return host_login(access) if access is not None else None


def experiment_settings(client, cluster: str,
                        load: Callable[[str, list[str]], tuple[Any, Any]]):
    """The scenario's migration settings of the experiment the cluster was brought up with
    (`foglab emu up --experiment`), None for a bare topology; ExperimentGone when its file
    no longer loads. `load(file, sets)`: its file and the experiment, checked as an emu run
    (emu.cli.clusters.load_experiment)."""
    from emu.engines.docker import inventory

    labels = next((s.get("Labels") or {} for s in inventory.containers(client, cluster)
                   if (s.get("Labels") or {}).get(EXPERIMENT_LABEL)), {})
    if not labels:
        return None
    try:
        _, loaded = load(labels[EXPERIMENT_LABEL], json.loads(labels.get(SETS_LABEL, "[]")))
    except (SpecError, OSError, ValueError) as failure:
        raise ExperimentGone(f"the cluster's experiment {labels[EXPERIMENT_LABEL]} no longer "
                             f"loads ({failure})") from None
    return loaded.points[0].spec.scenario.migration


def where_operators_run(agents: dict[str, Agent], brokers: dict[str, str],
                        timeout: float = PING_TIMEOUT_S,
                        credentials: tuple[str, str] | None = None
                        ) -> tuple[dict[str, list[str]], list[str]]:
    """Operator -> the nodes where an instance of it runs, from a ping of every agent through
    its broker; and the agents that did not answer. `credentials`: the host's login on a
    closed cluster (`cluster_login`)."""
    from emu.control.commands import Controller

    running: dict[str, list[str]] = {}
    silent: list[str] = []
    by_broker: dict[str, list[str]] = {}
    for agent in agents.values():
        if agent.state == "running":
            by_broker.setdefault(agent.broker, []).append(agent.node)
        else:
            silent.append(agent.node)
    for broker, nodes in sorted(by_broker.items()):
        if broker not in brokers:
            silent += nodes
            continue
        with Controller(brokers[broker], credentials=credentials) as control:
            pinged = control.ping(nodes, timeout=timeout)
        silent += pinged.missing
        for node, reply in pinged.replies.items():
            for name, status in ((reply.result or {}).get("operators") or {}).items():
                if status.get("running", True):
                    running.setdefault(name, []).append(node)
    return running, silent


def wait_agents_registered(cluster, status: dict[str, Any], agents: Iterable[str],
                           check: Callable[[], None] | None = None,
                           timeout: float = REGISTER_TIMEOUT_S) -> None:
    """Until every agent of `agents` has registered in the cluster's ZooKeeper (`status`:
    node -> its container's status, for the addresses); a TimeoutError names those missing,
    and `check()` may give up earlier by raising (emu.control.commands.wait_registered)."""
    from emu.control.commands import wait_registered

    zookeeper = ",".join(f"{status[z].ip}:2181" for z in cluster.plan.zookeeper)
    wait_registered(zookeeper, list(agents), timeout=timeout, check=check,
                    kazoo={**kazoo_options(cluster.plan), **tls_options(cluster.plan)})


def next_epoch(clock: TimeBase = UNDILATED) -> float:
    """The drivers' common epoch for a start request sent now, on the run's clock (its
    emulated time: the agents' clock; EPOCH_LEAD_S of the host's time ahead)."""
    return clock.now() + clock.emulated_seconds(EPOCH_LEAD_S)


def start_drivers(running) -> float:
    """Wait until every agent of a cluster that is up (an emu.engines.docker.engine.Cluster) has
    registered, then start every driver at one epoch (`set run.epoch`, through each agent's
    broker), as a run does (emu.run.emulate); the epoch. A RuntimeError if an agent refused or did
    not answer."""
    from emu.control.commands import Controller

    status = {s.node: s for s in running.status()}
    plan = running.plan
    agents = [a.node for a in plan.agents()]
    wait_agents_registered(running, status, agents)
    epoch = next_epoch()
    for broker in sorted(set(plan.brokers.values())):
        mine = [a for a in agents if plan.brokers[a] == broker]
        with Controller(f"{status[broker].ip}:1883", credentials=tls_login(plan),
                        mqtt5=plan.mqtt5) as control:
            started = control.send(mine, "set", {"key": "run.epoch", "value": epoch},
                                   timeout=START_TIMEOUT_S)
        if not started.ok:
            raise RuntimeError(f"starting the drivers (set run.epoch): {started.summary()}")
    return epoch


def running_operators(plan) -> dict[str, list[str]]:
    """Operator -> the nodes an experiment's plan runs it on (emu.cluster.plan)."""
    where: dict[str, list[str]] = {}
    for agent in plan.agents():
        for op in agent.agent.operators:
            where.setdefault(op.name, []).append(agent.node)
    return where


__all__ = ["EPOCH_LEAD_S", "EXPERIMENT_LABEL", "PING_TIMEOUT_S", "REGISTER_TIMEOUT_S",
           "SETS_LABEL", "Agent", "ExperimentGone", "agents_and_brokers",
           "experiment_settings", "next_epoch", "running_operators", "start_drivers",
           "wait_agents_registered", "where_operators_run"]
