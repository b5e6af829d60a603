"""What each emulated node's agent runs for an experiment: its whole AgentConfig.

This is the one place that decides an agent's config: its drivers, its operators (and which
instances read through an input session of their own, so that they can move), its seed, its
index (message ids) and whether its drivers wait for the run's epoch. The cluster's plan
(emu.cluster.plan) only fills in the addresses of its broker and ZooKeeper, which depend on
how links are shaped.

Devices are not containers of their own: a gateway's agent emulates the devices linked to it
(seed 001's drivers), sending each message on its device's radio at the device link's
bandwidth, holding it for the link's latency and jitter and dropping it with the link's loss;
devices that link to no gateway run as a group in a container of their own, which the link
layer shapes like any node (`device_hosts`).
Operators run on the nodes that have an agent, gateways and cloud VMs; brokers run Mosquitto
and nothing else. Drivers follow a stream's rate shape from the run's epoch as the
simulator's sources do (`publish.rate` changes the base rate while running).

Every field of a pipeline operator (workloads.pipeline.OperatorSpec) either acts here as on
sim (ON_EMU says how) or, set to anything but its default, is refused before any container
starts, with its field path and value (NOT_ON_EMU says why).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from emu.agent.config import AGENT_KINDS, RECORDS_DIR, AgentConfig, DriverConfig, OperatorConfig
from emu.agent.operators import WindowConfig, make_stage
from emu.agent.protocol import stream_topic
from emu.agent.spark import SparkJob
from emu.agent.timebase import UNDILATED, TimeBase
from topologies.errors import SpecError
from topologies.model import Topology
from topologies.routing import Routes, gateway_of, nearest
from workloads.operator_engines import operator_engine
from workloads.pipeline import OperatorSpec, placement, topic_filter
from workloads.rates import Constant
from workloads.recovery import DEFAULT_SESSION_TIMEOUT
from workloads.spec import WorkloadSpec
from workloads.topics import matches, shared

# The kind of a device group's container (device_hosts): an agent with drivers only.
DEVICE_KIND = "device"


class DeploymentError(SpecError):
    """The experiment asks for something the emulation cannot run: the field, value and why."""


def device_hosts(topology: Topology) -> dict[str, str]:
    """Each device that links to no gateway -> the container its drivers run in.

    Such devices publish to their broker themselves, so they cannot live in a gateway's agent:
    a device group runs in a container of its own (an agent with drivers and no operators),
    placed where its devices are and linked to its broker through the topology like any node
    (emu.cluster.plan). A group is the replicas of one node of the topology file that link to
    the same nodes with the same links and pick the same broker; its container is named after
    the group, or after its first device when the group splits. Its devices publish on
    `<stream>/<container>` (`<stream>/<container>/<device>` on an exclusive channel), as a
    gateway's do, where sim's publish on `<stream>/<device>`: a reader of the stream sees no
    difference."""
    routes = Routes(topology)
    brokers = [b.name for b in topology.of_kind("broker")]
    graph = topology.graph
    groups: dict[tuple, list[str]] = defaultdict(list)
    for device in topology.of_kind("device"):
        if gateway_of(topology, device.name) is not None:
            continue
        links = tuple(sorted(
            (other, hop.latency, hop.jitter, hop.bandwidth or 0.0, hop.loss)
            for other in graph.neighbors(device.name)
            for hop in [graph.edges[device.name, other]["link"]]))
        groups[device.group, links, nearest(routes, device.name, brokers)].append(device.name)
    per_group = Counter(group for group, _, _ in groups)
    hosts = {}
    for (group, _, _), devices in groups.items():
        name = group if per_group[group] == 1 else devices[0]
        if name in topology.nodes and name not in devices:  # another node's name
            name = f"{name}-devices"
        hosts.update(dict.fromkeys(devices, name))
    return hosts


def _drivers(topology: Topology, workload: WorkloadSpec,
             load: Collection[str] = ()) -> dict[str, list[DriverConfig]]:
    """Per gateway (or device group's container, `device_hosts`), a driver per stream and
    device-link shape. A gateway's agent emulates its devices' links itself; a device group's
    container is linked by the link layer, its device link included. The devices in `load`
    (simulated load, the hybrid backend) get drivers of their own with `load` set: the host's
    load generator emits them, and their gateway's agent takes them as its drivers'."""
    drivers: dict[str, list[DriverConfig]] = defaultdict(list)
    hosts = device_hosts(topology)
    load = set(load)
    for stream in workload.streams:
        groups: dict[tuple, list[str]] = defaultdict(list)
        for device in topology.select(stream.sources):
            gateway = gateway_of(topology, device)
            if gateway is None:
                if device in load:
                    raise DeploymentError(("scenario", "load"), device,
                                          "devices linked to a gateway: a simulated device's "
                                          "readings enter the emulation at its gateway, and "
                                          f"{device} links to none")
                groups[hosts[device], 0.0, 0.0, 0.0, None, False].append(device)
                continue
            link = topology.graph.edges[device, gateway]["link"]
            groups[gateway, link.latency, link.jitter, link.loss, link.bandwidth,
                   device in load].append(device)
        for (host, latency, jitter, loss, bandwidth, simulated), devices in groups.items():
            drivers[host].append(DriverConfig(
                stream=stream.name, devices=devices, rate=float(stream.rate),
                arrivals=stream.arrivals, size=int(stream.size), format=stream.format,
                qos=stream.qos, channel=stream.channel, start=float(stream.start),
                access_latency=latency, access_jitter=jitter, access_loss=loss,
                access_bandwidth=bandwidth,
                shape=None if isinstance(stream.shape, Constant) else stream.shape.model_dump(),
                load=simulated))
    return drivers


# How each operator field acts on emu. A test walks OperatorSpec's fields: each is here or in
# NOT_ON_EMU, so a field added to the schema must say how the emulation treats it.
ON_EMU = {
    "name": "the operator's name on every node it runs on",
    "task": "the RIoTBench task (or passthrough) the agent runs on each message",
    "engine": "python runs in the agent; spark runs the app as a PySpark job on a cloud VM",
    "on": "an instance on each node placed, gateways and cloud VMs",
    "among": "nothing here: the experiment's placement policy chose among these nodes before "
             "any backend (experiments.placement) and wrote its choice into `on`",
    "reads": "the MQTT topic filters the instances read, locally or through the broker",
    "writes": "the topic the outputs go to (<writes>/<node>); none: a sink",
    "params": "the task's parameters (sim runs no task and ignores them)",
    "selectivity": "from 0 to 1: a running credit per instance decides which inputs go on, as "
                   "on sim; what it drops is noted and counted as filtered, not lost",
    "cost": "measured, not imposed: the node runs the task itself, and its CPU time there is "
            "what sim's cost stands for (sim takes an unset cost from the task's measured one)",
    "window": "a tumbling count of `size` seconds of processing time on the run's clock "
              "(workloads.windows in the agent, holding its open window's events): window k "
              "is [k * size, (k + 1) * size) from the epoch, each closed window one output "
              "downstream and one row of the windows table; `jitter` is measured, not "
              "imposed: sim draws it for how instances' timers and arrival times differ, "
              "which on emu they do by themselves",
    "follow": "hybrid only: an instance per moving device (`<name>@<device>`) on the node the "
              "policy starts it on, reading the device's own topics through a session of its "
              "own, moved by the policy's decisions (emu.features.moves.dispatch); emu alone "
              "moves no users",
    "checkpoint": "the instance writes its state to ZooKeeper this often "
                  "(emu.agent.checkpoint), from which scenario.recovery restores it elsewhere",
    "slo": "the instance notes each input's latency for scenario.replication's controller "
           "(emu.features.replication) and reads through a shared subscription replicas may join",
}
# Fields the emulation does not run yet: field -> (its default, why it is refused otherwise).
NOT_ON_EMU = {
    "out_size": (None, "an output's size on emu is what its task writes"),
}


def _refuse_what_emu_cannot_run(index: int, spec: OperatorSpec) -> None:
    for name, (default, why) in NOT_ON_EMU.items():
        value = getattr(spec, name)
        if value != default:
            raise DeploymentError(("pipeline", index, name), _shown(value),
                                  f"not yet on emu: {why}")
    if spec.selectivity > 1.0:
        raise DeploymentError(("pipeline", index, "selectivity"), spec.selectivity,
                              "not yet on emu above 1: the copies of an input would share its "
                              "id, which the tables count as duplicates (run it on sim)")
    in_agent = operator_engine(spec.engine).in_agent  # the agent applies windows, selectivity
    if spec.window is not None and not in_agent:
        raise DeploymentError(("pipeline", index, "window"), _shown(spec.window),
                              "not yet on emu for engine spark: the agent runs windows on "
                              "engine python (leave it out, or use engine python)")
    if spec.window is not None and spec.selectivity != 1.0:
        raise DeploymentError(("pipeline", index, "selectivity"), spec.selectivity,
                              "1 with a window on emu: a window counts every input")
    if spec.selectivity != 1.0 and not in_agent:
        raise DeploymentError(("pipeline", index, "selectivity"), spec.selectivity,
                              "not yet on emu for engine spark: the Spark app runs on every "
                              "message (leave it 1, or use engine python)")


def _shown(value: object) -> object:
    """A field's value as the experiment file writes it (a model as its fields)."""
    dump = getattr(value, "model_dump", None)
    return dump() if dump is not None else value


def operator_config(spec: OperatorSpec) -> OperatorConfig:
    return OperatorConfig(name=spec.name, task=spec.task, params=dict(spec.params),
                          reads=[topic_filter(r) for r in spec.reads], writes=spec.writes,
                          window=spec.window.size if spec.window else None, engine=spec.engine,
                          selectivity=spec.selectivity, records=RECORDS_DIR,
                          checkpoint=spec.checkpoint, slo=spec.slo)


def _check_task(index: int, spec: OperatorSpec, config: OperatorConfig) -> None:
    """Build the task (or the Spark job's command) once here, so a bad one fails before any
    container starts."""
    try:
        if operator_engine(spec.engine).in_agent:
            make_stage(config.task, config.params)
            if config.window is not None:
                WindowConfig.of(config.window)
        else:
            SparkJob(config, "check", "localhost:1883", "/records")
    except ValueError as error:
        raise DeploymentError(("pipeline", index, "task"), spec.task,
                              f"a task the emulation can run: {error}") from None


def shared_reads(config: OperatorConfig) -> OperatorConfig:
    """An operator's instances reading through a broker form one shared subscription, as in
    the model (sim.pubsub): each message reaches one of them. Local reads are unchanged (the
    agent matches a shared filter as its plain one). Not for Spark: the node's agent records
    what reaches the job on the same filter, and would share the messages with it."""
    if not operator_engine(config.engine).shares_reads:
        return config
    return replace(config, reads=[f if shared(f)[0] else f"$share/{config.name}/{f}"
                                  for f in config.reads])


def _operators(topology: Topology, pipeline: list[OperatorSpec],
               follow: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, list]:
    operators: dict[str, list[OperatorConfig]] = defaultdict(list)
    for index, spec in enumerate(pipeline):
        _refuse_what_emu_cannot_run(index, spec)
        config = operator_config(spec)
        _check_task(index, spec, config)
        if spec.follow:
            users = (follow or {}).get(spec.name)
            if users is None:
                raise DeploymentError(("pipeline", index, "follow"), spec.follow,
                                      "no follow operator without moving users: the "
                                      "emulation alone moves none (run the file on sim or "
                                      "hybrid)")
            for device, node in users.items():
                operators[node].append(movable(follow_instance(config, spec.reads, device),
                                               node))
            continue
        nodes = placement(topology, spec.on)
        if len(nodes) > 1 or spec.slo is not None:  # with an slo, replicas may join it
            config = shared_reads(config)
        for node in nodes:
            kind = topology.nodes[node].kind
            if kind not in AGENT_KINDS:
                raise DeploymentError(("pipeline", index, "on"), node,
                                      f"gateways or cloud VMs: in the emulation operators run "
                                      f"there, and {node} is a {kind}")
            # A JVM's job runs on the cloud VMs' image, the one with a JRE (emu.images.CLOUD).
            if operator_engine(spec.engine).jvm and kind != "cloud_vm":
                raise DeploymentError(("pipeline", index, "engine"), spec.engine,
                                      f"python on {node}: Spark runs on cloud VMs, and {node} "
                                      f"is a {kind}")
            operators[node].append(config)
    return operators


def follow_instance(config: OperatorConfig, streams: Sequence[str],
                    device: str) -> OperatorConfig:
    """A follow operator's instance for one moving device, as sim names and feeds it
    (sim.assembly.follow_groups): it reads the device's own topics of `streams`
    (`<stream>/<gateway>/<device>`, exclusive channels), on the broker of whichever node
    runs it (OperatorConfig.broker ""): the device's readings enter at the gateway it is
    attached to, not at one broker."""
    return replace(config, name=f"{config.name}@{device}",
                   reads=[f"{stream}/+/{device}" for stream in streams], broker="")


def _forwarding(driver: DriverConfig, node: str,
                placed: Mapping[str, list[OperatorConfig]]) -> DriverConfig:
    """The driver publishes to the broker also when an operator on this node takes its
    messages in-process (the agent then publishes nothing by default), if another operator
    reads them through the broker: one with no instance here taking them in-process (an
    instance reading through a session of its own may move, so it reads through the broker
    wherever it is). As sim's publish: each operator gets the messages once, locally where it
    has an instance on the node, else through the broker."""
    topics = {stream_topic(driver.stream, node, device, driver.channel)
              for device in driver.devices}
    local = {op.name for op in placed.get(node, []) if not op.session}
    for configs in placed.values():
        for op in configs:
            if op.name in local:
                continue
            if any(matches(shared(f)[1], topic) for f in op.reads for topic in topics):
                return replace(driver, forward=True)
    return driver


def session_name(operator: str, node: str) -> str:
    """The client id of an operator instance's own input session (emu.agent.migration): the
    broker holds its input while it moves, and the target takes the session over, on that
    broker whatever broker the target has (emu.cluster.plan names it, OperatorConfig.broker)."""
    return f"foglab-op-{operator}-{node}"


def movable(config: OperatorConfig, node: str) -> OperatorConfig:
    """The instance reading through a session of its own, so that emu.features.moves.dispatch can
    move it (a Spark operator: the node's recorder of its arrivals, which moves along with the
    query)."""
    return replace(config, session=session_name(config.name, node))


def agent_configs(topology: Topology, workload: WorkloadSpec | None = None,
                  pipeline: Sequence[OperatorSpec] = (), seed: int = 0, epoch: float = 0.0, *,
                  moving: Collection[str] = (), hold: bool = False,
                  follow: Mapping[str, Mapping[str, str]] | None = None,
                  load: Collection[str] = (),
                  session_timeout: float = DEFAULT_SESSION_TIMEOUT, fence: bool = False,
                  clock: TimeBase = UNDILATED) -> dict[str, AgentConfig]:
    """An AgentConfig per gateway and cloud VM, and per device group that links to no gateway
    (`device_hosts`, kind device), without broker and ZooKeeper addresses (the cluster's plan
    fills them in: they depend on how links are shaped).

    Without a workload and pipeline the agents idle (`foglab emu up TOPOLOGY`). Indexes count
    from 1 in declaration order. The instances of the operators named in `moving` read
    through a session of their own (`movable`). `hold`: drivers wait for a `set run.epoch`
    request, so every node of a run starts at one epoch. `follow`: for each follow operator,
    the node each moving device's instance starts on (the hybrid backend's policy decides).
    `load`: devices the host's load generator emits (the hybrid backend's simulated load):
    their gateways' agents take their readings from it (DriverConfig.load).
    `session_timeout`: the agents' ZooKeeper sessions (scenario.recovery's detector);
    `fence`: an agent whose session expired stops its movable instances (AgentConfig.fence).
    `clock`: the run's time base (emu.agent.timebase), every agent's clock.
    """
    drivers = _drivers(topology, workload, load) if workload is not None else {}
    operators = _operators(topology, list(pipeline), follow)
    hosts = [(n.name, n.kind) for n in topology.nodes.values() if n.kind in AGENT_KINDS]
    # Device groups' containers (device_hosts) that have drivers to run, after the agents.
    hosts += [(name, DEVICE_KIND) for name in drivers
              if name not in topology.nodes or topology.nodes[name].kind == DEVICE_KIND]
    placed = {name: [movable(op, name) if op.name in moving else op
                     for op in operators.get(name, [])] for name, _ in hosts}
    return {name: AgentConfig(
                node=name, mqtt="", kind=kind,
                drivers=[_forwarding(driver, name, placed) for driver in drivers.get(name, [])],
                operators=placed[name],
                seed=seed, epoch=epoch, index=index, hold=hold,
                session_timeout=session_timeout, fence=fence, dilation=clock.dilation,
                time_anchor=clock.anchor)
            for index, (name, kind) in enumerate(hosts, start=1)}
