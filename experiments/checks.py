"""Checks across the parts of an experiment: do names and patterns refer to what exists?"""

from __future__ import annotations

from experiments.spec import ExperimentSpec
from topologies.brokers import DEFAULT_BROKER_KIND
from topologies.errors import SpecError
from topologies.model import Topology, expand
from workloads.features import FEATURES
from workloads.operator_engines import operator_engine
from workloads.pipeline import HOST_KINDS, check_placement, placement, reads_from, topic_filter
from workloads.topics import valid_filter

__all__ = ["HOST_KINDS", "check"]


def check(spec: ExperimentSpec, topology: Topology | None = None) -> Topology:
    """Expand the topology (unless given, expanded already: `topology_of`) and check every
    cross-reference; returns the topology."""
    if topology is None:
        topology = topology_of(spec)
    _check_run(spec)
    _check_streams(spec, topology)
    _check_pipeline(spec, topology)
    backend = spec.run.backend
    for feature in FEATURES:
        value = getattr(spec.scenario, feature.key)
        if backend not in feature.backends and feature.written(value):
            raise SpecError(("scenario", feature.key), backend,
                            f"a backend that runs scenario.{feature.key} "
                            f"({' or '.join(feature.backends)}): it is not yet on {backend}")
        if feature.check is not None:
            feature.check(spec, topology)
    if spec.scenario.load:  # devices hybrid publishes from the host; sim and emu run them
        from experiments.hybrid.load import simulated_devices

        simulated_devices(spec.scenario, topology)
    if backend in ("sim", "hybrid"):
        _check_trace(spec, topology)
    if backend != "sim":  # what each feature cannot do on the containers (emu.features)
        from emu.features import FEATURES as ON_CONTAINERS

        for emulated in ON_CONTAINERS.values():
            emulated.validate(spec, topology, backend)
        _check_broker_kinds(spec, topology)
    if backend == "emu":
        _check_emulation(spec, topology)
    if backend == "hybrid":
        from experiments.hybrid.checks import check_hybrid

        check_hybrid(spec, topology)
    return topology


def topology_of(spec: ExperimentSpec) -> Topology:
    """The spec's topology expanded; an error in it at its path under `topology`."""
    try:
        return expand(spec.topology)
    except SpecError as error:
        raise SpecError(("topology",) + error.path, error.value, error.expected) from None


def _check_trace(spec: ExperimentSpec, topology: Topology) -> None:
    """A mobility trace the model can replay: readable by its reader (sim.mobility), one
    track per moving device. Here, not in workloads.mobility, because the reader is sim's."""
    from workloads.mobility import TraceSpec

    mobility = spec.scenario.mobility
    if mobility is None or not isinstance(mobility.model, TraceSpec):
        return
    from sim.mobility import load_trace

    path = ("scenario", "mobility", "model", "path")
    try:
        tracks = load_trace(mobility.model.path)
    except (OSError, ValueError) as error:
        raise SpecError(path, str(mobility.model.path), f"a readable trace ({error})") from None
    users = topology.select(mobility.devices or [n.name for n in topology.of_kind("device")])
    if len(tracks) != len(users):
        raise SpecError(path, str(mobility.model.path), f"a trace with one track per moving "
                        f"device: it has {len(tracks)} for {len(users)} (scenario.mobility."
                        "devices)")


def _check_run(spec: ExperimentSpec) -> None:
    """The run's own periods inside its duration: a sample period written longer than the
    run would leave the nodes and links tables empty (the default's is no one's mistake)."""
    if "sample" in spec.run.model_fields_set and spec.run.sample > spec.run.duration:
        raise SpecError(("run", "sample"), spec.run.sample, f"a sample period no longer than "
                        f"the run (run.duration: {spec.run.duration:g} s)")
    if "latency" in spec.plots and spec.record.messages == "none":
        raise SpecError(("plots",), spec.plots, "no latency plot with record.messages: none "
                        "(it is drawn from the messages table): record all or a fraction "
                        "such as 10%, or drop latency from plots")
    for i, op in enumerate(spec.pipeline):
        if op.window is not None and op.window.size > spec.run.duration:
            raise SpecError(("pipeline", i, "window", "size"), op.window.size,
                            f"a window no longer than the run (run.duration: "
                            f"{spec.run.duration:g} s): none would close")


def _check_broker_kinds(spec: ExperimentSpec, topology: Topology) -> None:
    """A broker of a kind the containers cannot run with the run's settings (a RabbitMQ one,
    `broker.kind: rabbitmq`, where they only know Mosquitto's ways: a dilation, a swarm, a
    spare; emu.cluster.broker_kinds.check_broker_kinds), or without shared subscriptions
    where the pipeline needs them."""
    from emu.cluster.broker_kinds import check_broker_kinds
    from workloads.broker_scaling import resolve

    spares = resolve(spec.scenario.broker_scaling, topology).spares
    check_broker_kinds(topology, dilation=spec.run.dilation,
                       closed=spec.run.access == "closed", engine=spec.run.engine,
                       spares=spares)
    unshared = [n for n in topology.of_kind("broker")
                if not n.broker_kind.shared_subscriptions]
    if not unshared:
        return
    # Several instances read through one MQTT shared subscription (emu.cluster.deployment.
    # shared_reads), which RabbitMQ 3.10's MQTT plugin does not have: it delivers them
    # nothing, silently. Instances on gateways read their own devices' streams in-process.
    broker, kind = unshared[0].name, unshared[0].broker_kind
    for i, op in enumerate(spec.pipeline):
        nodes = placement(topology, op.on)
        shares = operator_engine(op.engine).shares_reads
        if shares and (len(nodes) > 1 or op.slo is not None) and any(
                topology.nodes[n].kind != "gateway" for n in nodes):
            raise SpecError(("pipeline", i, "on"), op.on,
                            f"one node for operator {op.name}: with a {kind.title} broker "
                            f"({broker}) its instances cannot share a subscription "
                            f"({kind.mqtt} has no $share), so they would "
                            f"receive nothing; or the brokers' kind {DEFAULT_BROKER_KIND.name}")


def _check_emulation(spec: ExperimentSpec, topology: Topology) -> None:
    """What the emulation cannot deploy (emu.cluster.deployment)."""
    from emu.cluster.deployment import agent_configs

    agent_configs(topology, spec.workload, spec.pipeline, spec.run.seed, 0.0)


def _check_streams(spec: ExperimentSpec, topology: Topology) -> None:
    for s, stream in enumerate(spec.workload.streams):
        for p, pattern in enumerate(stream.sources):
            path = ("workload", "streams", s, "sources", p)
            found = topology.match(pattern)
            if not found:
                raise SpecError(path, pattern, "a device name or pattern that matches devices "
                                f"of topology {topology.name}")
            others = [n for n in found if topology.nodes[n].kind != "device"]
            if others:
                raise SpecError(path, pattern, f"only devices emit streams, but {others[0]} is "
                                f"a {topology.nodes[others[0]].kind}")


def _check_pipeline(spec: ExperimentSpec, topology: Topology) -> None:
    streams = {stream.name for stream in spec.workload.streams}
    outputs: dict[str, int] = {}
    for i, op in enumerate(spec.pipeline):
        if op.writes is not None:
            if op.writes in streams:
                raise SpecError(("pipeline", i, "writes"), op.writes,
                                "a name that is not also a workload stream")
            outputs[op.writes] = i
    names: set[str] = set()
    topics = streams | set(outputs)
    for i, op in enumerate(spec.pipeline):
        if op.name in names:
            raise SpecError(("pipeline", i, "name"), op.name, "a unique operator name")
        names.add(op.name)
        for j, where in enumerate(op.on):
            check_placement(topology, ("pipeline", i, "on", j), where)
        if op.among is not None:  # resolved away (experiments.placement) where on is auto
            raise SpecError(("pipeline", i, "among"), op.among,
                            "no among: it is for on: auto, where a placement policy decides")
        for j, read in enumerate(op.reads):
            path = ("pipeline", i, "reads", j)
            topic_pattern = topic_filter(read)
            if not valid_filter(topic_pattern):
                raise SpecError(path, read, "a stream name or a valid MQTT topic filter")
            if not any(reads_from(topic_pattern, t) for t in topics):
                raise SpecError(path, read, "a workload stream or an operator's writes ("
                                + ", ".join(sorted(topics)) + ")")
    read_by = {t for op in spec.pipeline for r in op.reads for t in topics
               if reads_from(topic_filter(r), t)}
    for s, stream in enumerate(spec.workload.streams):
        if stream.name not in read_by:
            raise SpecError(("workload", "streams", s, "name"), stream.name,
                            "a stream that some pipeline operator reads (nothing would "
                            "measure it)")
    if not any(op.is_sink for op in spec.pipeline):
        raise SpecError(("pipeline",), [op.name for op in spec.pipeline],
                        "at least one sink: an operator without `writes`")
