"""Checks across the parts of an experiment: do names and patterns refer to what exists?"""

from __future__ import annotations

from experiments.spec import ExperimentSpec
from topologies.errors import SpecError
from topologies.model import Topology, expand
from workloads.broadcast import resolve as resolve_broadcasts
from workloads.broker_scaling import resolve as resolve_broker_scaling
from workloads.faults import resolve as resolve_faults
from workloads.pipeline import KIND_WORDS, placement, topic_filter
from workloads.topics import matches, valid_filter

HOST_KINDS = ("gateway", "broker", "cloud_vm", "coordinator")


def check(spec: ExperimentSpec) -> Topology:
    """Expand the topology and check every cross-reference; returns the topology."""
    try:
        topology = expand(spec.topology)
    except SpecError as error:
        raise SpecError(("topology",) + error.path, error.value, error.expected) from None
    _check_streams(spec, topology)
    _check_pipeline(spec, topology)
    _check_migrations(spec, topology)
    _check_mobility(spec, topology)
    if spec.scenario.load:  # devices hybrid publishes from the host; sim and emu run them
        from experiments.hybrid.load import simulated_devices

        simulated_devices(spec.scenario, topology)
    faults = resolve_faults(spec.scenario.faults, topology, spec.run.duration)
    if spec.run.backend != "sim":
        check_emulated_faults(faults, topology, spec.run.backend)
    _check_recovery(spec, topology)
    _check_replication(spec, topology)
    resolve_broadcasts(spec.scenario.broadcasts, topology, spec.run.duration)
    if spec.scenario.broadcasts and spec.run.backend == "hybrid":
        raise SpecError(("scenario", "broadcasts"), len(spec.scenario.broadcasts),
                        "no broadcasts: not yet on hybrid (run them on sim or emu)")
    if spec.scenario.broadcasts and spec.run.backend == "emu":
        from emu.broadcast import check as check_emulated_broadcasts

        check_emulated_broadcasts(spec.scenario.broadcasts, topology, spec.run.duration)
    resolve_broker_scaling(spec.scenario.broker_scaling, topology)
    if spec.scenario.broker_scaling and spec.run.backend not in ("sim", "emu"):
        raise SpecError(("scenario", "broker_scaling"), len(spec.scenario.broker_scaling),
                        f"no broker scaling: not yet on {spec.run.backend} (run it on sim or "
                        "emu)")
    if spec.run.backend == "emu":
        _check_emulation(spec, topology)
    if spec.run.backend == "hybrid":
        from experiments.hybrid.checks import check_hybrid

        check_hybrid(spec, topology)
    return topology


def _check_recovery(spec: ExperimentSpec, topology: Topology) -> None:
    """Checkpoints only where there is state to keep; re-placement only onto nodes that run
    operators (workloads.recovery)."""
    for index, operator in enumerate(spec.pipeline):
        if operator.checkpoint is None:
            continue
        path = ("pipeline", index, "checkpoint")
        if operator.engine != "python" or operator.window is None:
            raise SpecError(path, operator.checkpoint, "a checkpoint keeps a window's state: "
                            f"operator {operator.name!r} has no `window` (or runs on Spark, "
                            "whose checkpoints are its own)")
        if operator.follow is not None:
            raise SpecError(path, operator.checkpoint, "no checkpoint for a follow operator: "
                            "its per-user instances move with their users")
    recovery = spec.scenario.recovery
    if recovery is None:
        return
    if spec.run.backend == "hybrid":
        raise SpecError(("scenario", "recovery"), "...", "no scenario.recovery on hybrid yet "
                        "(run it on sim or emu)")
    _check_nodes(("scenario", "recovery", "to"), recovery.to, topology)


def _check_replication(spec: ExperimentSpec, topology: Topology) -> None:
    """An slo only where replicas can share the input; replication only with an slo, onto
    nodes that run operators (workloads.replication)."""
    for index, operator in enumerate(spec.pipeline):
        if operator.slo is None:
            continue
        path = ("pipeline", index, "slo")
        if operator.window is not None or operator.engine != "python":
            raise SpecError(path, operator.slo, "an slo on a stateless python operator: "
                            f"replicas of {operator.name!r} would share its input, and a "
                            "window's state (or a Spark query's) does not split")
        if operator.follow is not None:
            raise SpecError(path, operator.slo, "no slo for a follow operator: its instances "
                            "are one per user")
    replication = spec.scenario.replication
    if replication is None:
        return
    if not any(operator.slo is not None for operator in spec.pipeline):
        raise SpecError(("scenario", "replication"), "...", "an operator with an `slo`: "
                        "replication watches only those")
    if spec.run.backend == "hybrid":
        raise SpecError(("scenario", "replication"), "...", "no scenario.replication on "
                        "hybrid yet (run it on sim or emu)")
    _check_nodes(("scenario", "replication", "to"), replication.to, topology)


def _check_nodes(path: tuple, where: list[str], topology: Topology) -> None:
    """`where` names gateways or cloud VMs only, at least one; a kind word may name none."""
    for index, item in enumerate(where):
        nodes = placement(topology, [item])
        wrong = [n for n in nodes if topology.nodes[n].kind not in ("gateway", "cloud_vm")]
        if wrong or (not nodes and item not in KIND_WORDS):  # a kind the topology lacks: none
            raise SpecError((*path, index), item, "gateways or cloud VMs of the topology" + (
                f" (not {wrong[0]}, a {topology.nodes[wrong[0]].kind})"
                if wrong else ": it names none"))
    if not placement(topology, where):
        raise SpecError(path, where, "at least one gateway or cloud VM of the topology")


def _check_emulation(spec: ExperimentSpec, topology: Topology) -> None:
    """What the emulation cannot run yet, and what it cannot deploy (emu.deployment)."""
    from emu.deployment import agent_configs

    scenario = spec.scenario
    for name in ("mobility", "policy"):
        if getattr(scenario, name):
            raise SpecError(("scenario", name), "...", f"no scenario.{name} on emu: the "
                            "emulation moves no users (run it on sim, or on hybrid)")
    check_emulated_strategies(spec)
    agent_configs(topology, spec.workload, spec.pipeline, spec.run.seed, 0.0)


def check_emulated_faults(faults: list, topology: Topology, backend: str) -> None:
    """What emu (and hybrid, through it) cannot inject yet (emu.faults): a switch has no
    container to crash, and a device's own link runs inside its gateway's agent, which no
    fault reshapes yet. Refused by name, as the field path of the fault."""
    for fault in faults:
        path = ("scenario", "faults", fault.index, fault.kind)
        switches = [n for n in fault.nodes if topology.nodes[n].kind == "switch"]
        if switches:
            raise SpecError(path, fault.target, f"no {fault.kind} of a switch on {backend}: "
                            f"{switches[0]} is no container in the emulation (crash the nodes "
                            "behind it, or partition them, or run it on sim)")
        ends = [n for link in fault.links for n in link] + [
            n for group in fault.groups for n in group]
        devices = [n for n in ends if topology.nodes[n].kind == "device"]
        if devices:
            raise SpecError(path, fault.target, f"no {fault.kind} of a device's link on "
                            f"{backend}: {devices[0]}'s link is emulated inside its gateway's "
                            "agent, which faults do not reshape yet (fault the gateway's links "
                            "to brokers, or run it on sim)")


def check_emulated_strategies(spec: ExperimentSpec) -> None:
    """Every migration the file asks for (planned, or its policy's) by a strategy the
    emulation runs (emu.migration.STRATEGIES); emu and hybrid check alike."""
    from emu.migration import STRATEGIES

    scenario = spec.scenario
    default = scenario.migration.strategy if scenario.migration else "pause_transfer"
    asked = [(("scenario", "migrations", i, "strategy") if plan.strategy
              else ("scenario", "migration", "strategy"), plan.strategy or default)
             for i, plan in enumerate(scenario.migrations)]
    if scenario.policy is not None:
        asked.append((("scenario", "policy", "strategy") if scenario.policy.strategy
                      else ("scenario", "migration", "strategy"),
                      scenario.policy.strategy or default))
    for path, strategy in asked:
        if strategy not in STRATEGIES:
            raise SpecError(path, strategy, f"a strategy the emulation runs ("
                            f"{', '.join(STRATEGIES)})")


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
            _check_placement(topology, ("pipeline", i, "on", j), where)
        for j, read in enumerate(op.reads):
            path = ("pipeline", i, "reads", j)
            topic_pattern = topic_filter(read)
            if not valid_filter(topic_pattern):
                raise SpecError(path, read, "a stream name or a valid MQTT topic filter")
            if not any(matches(topic_pattern, f"{t}/x") or matches(topic_pattern, f"{t}/x/y")
                       for t in topics):
                raise SpecError(path, read, "a workload stream or an operator's writes ("
                                + ", ".join(sorted(topics)) + ")")
    read_by = {t for op in spec.pipeline for r in op.reads for t in topics
               if matches(topic_filter(r), f"{t}/x") or matches(topic_filter(r), f"{t}/x/y")}
    for s, stream in enumerate(spec.workload.streams):
        if stream.name not in read_by:
            raise SpecError(("workload", "streams", s, "name"), stream.name,
                            "a stream that some pipeline operator reads (nothing would "
                            "measure it)")
    if not any(op.is_sink for op in spec.pipeline):
        raise SpecError(("pipeline",), [op.name for op in spec.pipeline],
                        "at least one sink: an operator without `writes`")


def _check_placement(topology: Topology, path: tuple, where: str) -> list[str]:
    kind = KIND_WORDS.get(where)
    nodes = ([n.name for n in topology.of_kind(kind)] if kind else topology.match(where))
    if not nodes:
        raise SpecError(path, where, "a node name, pattern or kind word ("
                        + ", ".join(KIND_WORDS) + ") that matches nodes")
    for name in nodes:
        if topology.nodes[name].kind not in HOST_KINDS:
            raise SpecError(path, where, f"nodes that run code ({', '.join(HOST_KINDS)}), but "
                            f"{name} is a {topology.nodes[name].kind}")
    return nodes


def _check_migrations(spec: ExperimentSpec, topology: Topology) -> None:
    operators = {op.name: op for op in spec.pipeline}
    settings = spec.scenario.migration
    if settings.store is not None and settings.store not in topology.nodes:
        raise SpecError(("scenario", "migration", "store"), settings.store,
                        "a node of the topology to hold the state store")
    if spec.scenario.migrations and not topology.of_kind("broker"):
        raise SpecError(("scenario", "migrations"), len(spec.scenario.migrations),
                        "a topology with a broker: migrations divert an operator's input there")
    for i, plan in enumerate(spec.scenario.migrations):
        path = ("scenario", "migrations", i)
        op = operators.get(plan.operator)
        if op is None:
            raise SpecError(path + ("operator",), plan.operator,
                            f"an operator of the pipeline ({', '.join(operators)})")
        _check_placement(topology, path + ("to",), plan.target)
        if plan.target not in topology.nodes:
            raise SpecError(path + ("to",), plan.target, "one node's name")
        if plan.source is not None:
            placed = [n for j, w in enumerate(op.on)
                      for n in _check_placement(topology, ("pipeline", j, "on"), w)]
            if plan.source not in placed:
                raise SpecError(path + ("from",), plan.source,
                                f"a node {op.name} runs on ({', '.join(placed)})")
        strategy = plan.strategy or settings.strategy
        if op.engine == "spark":
            _check_spark_move(topology, path, op.name, plan.target, strategy, settings.spark)
            continue
        if strategy == "pause_drain" and op.stateful:
            raise SpecError(path + ("strategy",), strategy,
                            f"pause_transfer or parallel: {op.name} keeps window state, which "
                            "pause_drain would lose")
        if strategy != "pause_drain" and not op.stateful:
            raise SpecError(path + ("strategy",), strategy,
                            f"pause_drain: {op.name} has no window state to transfer or "
                            "synchronise")


def _check_spark_move(topology: Topology, path: tuple, operator: str, target: str,
                      strategy: str, way: str) -> None:
    """A Spark query moves with its per-sensor state (emu.spark_migration; on sim, a pause
    and the target's start-up), from cloud VM to cloud VM."""
    if strategy != "pause_transfer":
        raise SpecError(path + ("strategy",), strategy,
                        f"pause_transfer: {operator} is a Spark query, whose per-sensor state "
                        f"moves with it (by {way}: scenario.migration.spark)")
    if topology.nodes[target].kind != "cloud_vm":
        raise SpecError(path + ("to",), target, f"a cloud VM: {operator} is a Spark query, "
                        f"and Spark runs on cloud VMs, not on a {topology.nodes[target].kind}")


def _check_mobility(spec: ExperimentSpec, topology: Topology) -> None:
    scenario = spec.scenario
    follows = [i for i, op in enumerate(spec.pipeline) if op.follow]
    if scenario.mobility is not None:
        for j, pattern in enumerate(scenario.mobility.devices or []):
            found = topology.match(pattern)
            if not found or any(topology.nodes[n].kind != "device" for n in found):
                raise SpecError(("scenario", "mobility", "devices", j), pattern,
                                "device names or patterns that match only devices")
        if not topology.of_kind("gateway"):
            raise SpecError(("scenario", "mobility"), "no gateways",
                            "a topology with gateways for the users to attach to")
    for i in follows:
        op = spec.pipeline[i]
        if scenario.mobility is None:
            raise SpecError(("pipeline", i, "follow"), op.follow,
                            "a scenario with mobility: a follow operator follows moving users")
        for stream in spec.workload.streams:
            if any(matches(topic_filter(r), f"{stream.name}/x/y") for r in op.reads) and (
                    stream.channel != "exclusive"):
                raise SpecError(("pipeline", i, "reads"), stream.name,
                                "streams on exclusive channels (one topic per device), so a "
                                "user's instance can read its user's messages")
    policy = scenario.policy
    if policy is not None:
        names = {op.name: op for op in spec.pipeline}
        if policy.operator not in names or not names[policy.operator].follow:
            raise SpecError(("scenario", "policy", "operator"), policy.operator,
                            "a pipeline operator with `follow: users`")
        for j, where in enumerate(policy.fallback):
            _check_placement(topology, ("scenario", "policy", "fallback", j), where)
