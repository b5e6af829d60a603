"""What each emulated node's agent runs for an experiment: its drivers and its operators.

Devices are not containers: a gateway's agent emulates the devices linked to it (seed 001's
drivers), holding each message for the device link's latency and jitter and dropping it with
the link's loss. Operators run on the nodes that have an agent, gateways and cloud VMs;
brokers run Mosquitto and nothing else. Drivers follow a stream's rate shape from the run's
epoch as the simulator's sources do (`publish.rate` changes the base rate while running).
"""

from __future__ import annotations

from collections import defaultdict

from emu.agent.config import AgentConfig, DriverConfig, OperatorConfig
from emu.agent.operators import make_stage
from emu.agent.spark import SparkJob
from topologies.errors import SpecError
from topologies.model import Topology
from workloads.pipeline import KIND_WORDS, OperatorSpec, topic_filter
from workloads.rates import Constant
from workloads.spec import WorkloadSpec

AGENT_KINDS = ("gateway", "cloud_vm")


class DeploymentError(SpecError):
    """The experiment asks for something the emulation cannot run: the field, value and why."""


def placement(topology: Topology, on: list[str]) -> list[str]:
    """The nodes that names, patterns or kind words (`gateways`) pick, each once."""
    names: dict[str, None] = {}
    for where in on:
        kind = KIND_WORDS.get(where)
        names.update(dict.fromkeys([n.name for n in topology.of_kind(kind)] if kind
                                   else topology.match(where)))
    return list(names)


def gateway_of(topology: Topology, device: str) -> str | None:
    """The gateway a device is linked to directly (the lowest-latency one if several), as the
    simulator picks it."""
    graph = topology.graph
    linked = [(graph.edges[device, n]["latency"], n) for n in graph.adj[device]
              if topology.nodes[n].kind == "gateway"]
    return min(linked)[1] if linked else None


def _drivers(topology: Topology, workload: WorkloadSpec) -> dict[str, list[DriverConfig]]:
    """Per gateway, a driver per stream and device-link shape."""
    drivers: dict[str, list[DriverConfig]] = defaultdict(list)
    for index, stream in enumerate(workload.streams):
        groups: dict[tuple, list[str]] = defaultdict(list)
        for device in topology.select(stream.sources):
            gateway = gateway_of(topology, device)
            if gateway is None:
                raise DeploymentError(
                    ("workload", "streams", index, "sources"), device,
                    f"devices linked to a gateway: the emulation runs device {device} of stream "
                    f"{stream.name} inside its gateway's agent, and it has no gateway")
            link = topology.graph.edges[device, gateway]["link"]
            groups[gateway, link.latency, link.jitter, link.loss].append(device)
        for (gateway, latency, jitter, loss), devices in groups.items():
            drivers[gateway].append(DriverConfig(
                stream=stream.name, devices=devices, rate=float(stream.rate),
                arrivals=stream.arrivals, size=int(stream.size), format=stream.format,
                qos=stream.qos, channel=stream.channel, start=float(stream.start),
                access_latency=latency, access_jitter=jitter, access_loss=loss,
                shape=None if isinstance(stream.shape, Constant) else stream.shape.model_dump()))
    return drivers


def operator_config(spec: OperatorSpec) -> OperatorConfig:
    return OperatorConfig(name=spec.name, task=spec.task, params=dict(spec.params),
                          reads=[topic_filter(r) for r in spec.reads], writes=spec.writes,
                          window=spec.window.size if spec.window else None, engine=spec.engine)


def _check_task(index: int, spec: OperatorSpec, config: OperatorConfig) -> None:
    """Build the task (or the Spark job's command) once here, so a bad one fails before any
    container starts."""
    try:
        if spec.engine == "spark":
            SparkJob(config, "check", "localhost:1883", "/records")
        else:
            make_stage(config.task, config.params)
    except ValueError as error:
        raise DeploymentError(("pipeline", index, "task"), spec.task,
                              f"a task the emulation can run: {error}") from None


def _operators(topology: Topology, pipeline: list[OperatorSpec]) -> dict[str, list]:
    operators: dict[str, list[OperatorConfig]] = defaultdict(list)
    for index, spec in enumerate(pipeline):
        if spec.follow:
            raise DeploymentError(("pipeline", index, "follow"), spec.follow,
                                  "no follow operators on emu: they move with mobile users, "
                                  "which the emulation does not model yet (run it on sim)")
        config = operator_config(spec)
        _check_task(index, spec, config)
        for node in placement(topology, spec.on):
            kind = topology.nodes[node].kind
            if kind not in AGENT_KINDS:
                raise DeploymentError(("pipeline", index, "on"), node,
                                      f"gateways or cloud VMs: in the emulation operators run "
                                      f"there, and {node} is a {kind}")
            if spec.engine == "spark" and kind != "cloud_vm":
                raise DeploymentError(("pipeline", index, "engine"), spec.engine,
                                      f"python on {node}: Spark runs on cloud VMs, and {node} "
                                      f"is a {kind}")
            operators[node].append(config)
    return operators


def agent_configs(topology: Topology, workload: WorkloadSpec, pipeline: list[OperatorSpec],
                  seed: int, epoch: float) -> dict[str, AgentConfig]:
    """An AgentConfig per gateway and cloud VM, without broker and ZooKeeper addresses (the
    cluster fills them in: they depend on how links are shaped)."""
    drivers = _drivers(topology, workload)
    operators = _operators(topology, pipeline)
    hosts = [n for n in topology.nodes.values() if n.kind in AGENT_KINDS]
    return {node.name: AgentConfig(node=node.name, mqtt="", kind=node.kind,
                                   drivers=drivers.get(node.name, []),
                                   operators=operators.get(node.name, []),
                                   seed=seed, epoch=epoch, index=index + 1)
            for index, node in enumerate(hosts)}
