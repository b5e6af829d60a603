"""Turn a cluster plan's containers into Docker Swarm service specs, as plain data.

One service per container plan: replicas 1 and restart policy `none` (a crashed gateway stays
a fault, as a plain container does; Swarm would otherwise start a fresh task), the same image,
command, environment, limits and labels as the plain engine's container. The cluster's labels
go on the service (so `down` finds the services) and on its task's container (so
emu.engines.docker.inventory finds the containers as it finds plain ones).

Networks. Every service joins the cluster's attachable overlay network, under its node name
and its container name (ZooKeeper's zoo.cfg names servers by container name); sites are not
separate networks on a swarm: what a client's traffic crosses is its relay, which its config
names. Every service also joins the cluster's swarm-scoped bridge (`host_network`): on the
manager's node that is a local bridge the host reaches, as it reaches a plain cluster's
bridges, for its controller, the readiness checks and the relays.
On several nodes the host cannot reach a node's bridges: a service's port is then published
in host mode on its node (`publish`), and the host reaches it at the node's address.

Endpoints are DNS round robin (`dnsrr`), not a virtual IP: a VIP needs the kernel's IPVS, and
on foglab's host (kernel without ip_vs) a connection to a service's VIP found no route, where
the task's own address answered. One task per service makes round robin exact anyway.

Placement. When the swarm's nodes carry `foglab.site` labels, a service whose site has a node
so labelled is constrained there (`node.labels.foglab.site==<site>`); other services, and every
service on a swarm with no site labels (one node), go where Swarm puts them.

Files (zoo.cfg, a dilated mosquitto.conf) become Swarm configs, mounted at their path: a
service's container cannot be written to before it starts, as the plain engine does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from emu.agent.config import RECORDS_DIR
from emu.cluster.plan import ContainerPlan

SITE_LABEL = "foglab.site"
LOG_OPTIONS = {"max-size": "10m", "max-file": "2"}
# How long Swarm waits after SIGTERM when a service is removed, before SIGKILL (ns). `down`
# ends a plain container at once (SIGKILL); Swarm's default, 10 s, made down of 10 gateways
# whose agents run take 17 s. A run stops its agents itself first, so they flush their records.
STOP_GRACE_NS = 100_000_000


@dataclass(frozen=True)
class ServiceSpec:
    """What `docker.APIClient.create_service` is given for one container plan."""

    name: str
    image: str
    command: tuple[str, ...]
    env: dict[str, str]
    hostname: str
    labels: dict[str, str]
    nano_cpus: int
    mem_limit: int
    mounts: tuple[str, ...]
    networks: tuple[tuple[str, tuple[str, ...]], ...]  # (network, aliases)
    constraints: tuple[str, ...] = ()
    configs: tuple[tuple[str, str], ...] = ()  # (config name, path in the container)
    # (secret name, file name under /run/secrets): Docker secrets, root's and 0400, which no
    # API call reads back (the agent's MQTT password and ZooKeeper identity: not in `env`).
    secrets: tuple[tuple[str, str], ...] = ()
    init: bool = False
    pids_limit: int = 0  # the tasks' pids.max (emu.cluster.plan's per role); 0: none
    published: tuple[int, ...] = ()  # ports published in host mode on the task's node
    extra: dict[str, object] = field(default_factory=dict)

    def create_arguments(self, config_ids: Mapping[str, str]) -> dict[str, object]:
        """Keyword arguments of APIClient.create_service; `config_ids`: config (and secret)
        name -> id. The command replaces the image's CMD (`args`), as a plain container's does."""
        from docker import types

        references = [types.ConfigReference(config_ids[name], name, filename=path, mode=0o444)
                      for name, path in self.configs]
        secrets = [types.SecretReference(config_ids[name], name, filename=file, mode=0o400)
                   for name, file in self.secrets]
        container = types.ContainerSpec(
            self.image, args=list(self.command) or None, env=self.env,
            hostname=self.hostname, labels=self.labels, mounts=list(self.mounts),
            configs=references or None, secrets=secrets or None, init=self.init or None,
            stop_grace_period=STOP_GRACE_NS)
        resources = types.Resources(cpu_limit=self.nano_cpus, mem_limit=self.mem_limit)
        if self.pids_limit:  # Engine API 1.41's Limits.Pids, which the SDK does not name
            resources["Limits"]["Pids"] = self.pids_limit
        task = types.TaskTemplate(
            container, resources=resources,
            restart_policy=types.RestartPolicy(condition="none"),
            placement=types.Placement(constraints=list(self.constraints)) if self.constraints
            else None,
            log_driver=types.DriverConfig("json-file", LOG_OPTIONS),
            networks=[types.NetworkAttachmentConfig(network, aliases=list(aliases))
                      for network, aliases in self.networks])
        ports = {port: (port, "tcp", "host") for port in self.published}
        return {"task_template": task, "name": self.name, "labels": self.labels,
                "mode": types.ServiceMode("replicated", 1),
                "endpoint_spec": types.EndpointSpec(mode="dnsrr", ports=ports or None)}


def constraints(segment: str, node_sites: Sequence[str]) -> tuple[str, ...]:
    """Pin a service to the nodes labelled with its site, when any node carries it."""
    return (f"node.labels.{SITE_LABEL}=={segment}",) if segment in node_sites else ()


def config_name(cluster: str, node: str, path: str, text: str) -> str:
    """A Swarm config's name: unique per cluster, node and file, and short (configs are
    immutable: the content's digest tells two versions apart)."""
    digest = hashlib.sha256(f"{path}\n{text}".encode()).hexdigest()[:10]
    return f"foglab-{cluster}-{node}-{digest}"


def service_spec(plan: ContainerPlan, *, cluster: str, image: str, command: Sequence[str],
                 env: Mapping[str, str], labels: Mapping[str, str], records: str | None,
                 overlay: str, host_network: str,
                 node_sites: Sequence[str] = (), publish: bool = False) -> ServiceSpec:
    """The service standing for one container plan; `labels` already hold the cluster's.
    `records` None: no mount, the task keeps /records in its container (several nodes: the
    engine copies them out, emu.engines.swarm.records); `publish`: a service's port is published in
    host mode on its node, where the host's relays, controller and checks reach it."""
    return ServiceSpec(
        name=plan.name, image=image, command=tuple(command), env=dict(env),
        hostname=plan.node, labels=dict(labels), nano_cpus=plan.nano_cpus,
        mem_limit=plan.mem_limit, pids_limit=plan.pids_limit,
        mounts=(f"{records}:{RECORDS_DIR}:rw",) if records is not None else (),
        networks=((overlay, (plan.node, plan.name)), (host_network, (plan.node,))) if overlay
        else ((host_network, (plan.node, plan.name)),),
        constraints=constraints(plan.segment, node_sites),
        configs=tuple((config_name(cluster, plan.node, path, text), path)
                      for path, text in plan.files),
        # A cloud VM's agent runs Spark jobs as its children: an init reaps what they leave.
        init=plan.kind == "cloud_vm",
        published=(plan.port,) if publish and plan.role != "agent" and plan.port else ())
