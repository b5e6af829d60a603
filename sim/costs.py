"""What each job costs the model: nodes' cores and speed, operators, drivers, brokers and the
link layer's delay per leg; from the description and reference figures, or a calibration.

The one place where the model decides a cost, so that a calibration (workloads.calibration,
`run.calibration: NAME`) changes all of them at once and nothing else. Costs are reference-vCPU
seconds, which a node's Cpu divides by its speed. With a calibration, measured on the
emulation, the model stands for the emulation of the topology rather than its hardware:

- arm64 gateways (the emulation runs them under QEMU) take the calibration's gateway profile
  (`rpi4-qemu`: its measured speed, and one core: the agent is one Python interpreter); an
  operator that names a task there costs what the agent was measured to spend on it (its
  `operators` figure), whatever `cost` says, since the emulation runs the task and ignores
  `cost`; other operators keep their written cost, at the calibrated speed; a gateway's driver
  costs the measured CPU per reading instead of `run.driver_cost`;
- brokers serve each message in Mosquitto's measured service time, on one core (Mosquitto
  is single-threaded), in place of the topology's `broker.service_time`; a broker of kind
  rabbitmq in RabbitMQ's (the profile's `rabbitmq`), where the profile has it;
- a Spark operator's node pays the job's fixed CPU per micro-batch (`spark.batch`) once per
  trigger interval that had input (the JVM plans every batch whatever the hardware); per
  message, a calibration that measured Spark (`spark.measured`) charges its measured figure
  with each batch, in place of the written `cost`; otherwise (no calibration, or one measured
  before Spark was) the written `cost` is charged per message on the operator's node, as for
  any operator, and only an operator without one takes the default profile's per-message
  figure with its batches (workloads.calibration.DEFAULT_SPARK). `foglab validate` names a
  written cost that is not charged; a run's facts (`costs`) say which figure applied where;
- each leg a node that runs a container sends (a publish, a broker's delivery) pays the link
  layer's measured `hop_overhead` on top of its path's latency: the emulation shapes a
  node's connection to its broker as one relay (or one netem interface), whatever the hops;
- a node's `cpu` (the nodes table) is a share of the CPU limit the emulation gives its
  container, as emu.host.metrics measures it, not of the cores the model queues on: a gateway's
  agent runs on one core of the model, but its container may use min(4, host cores) of
  them, so a model share of one core read against the emulation's share of two was twice
  its CPU (issue 27, 3c: 0.13 against 0.064 on the links configuration, 0.13 cores both).
With a calibration and a time dilation K (`run.dilation`; emu.agent.timebase), the model stands
for the emulation dilated: every node that runs a container gets K times the host's CPU per
emulated second, so its CPU is K times faster (a measured service time, a Spark batch, a task's
cost all take 1/K of the time), its `cpu` share is of the same container limit (K times
smaller for the same work, as emu.host.metrics measures it over host seconds), and the link layer's
own delay, the host's time, is 1/K. Without a calibration K changes nothing: the model is of
the hardware itself, which a dilated emulation approaches (at `real-speed`, emulated QEMU
gateways run at their profile's speed).
Other nodes and costs are as without a calibration.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.stations import Cpu
from topologies.model import Node, Topology
from topologies.spec import BrokerSpec
from workloads.calibration import DEFAULT_SPARK, Calibration, Spark
from workloads.operator_engines import operator_engine
from workloads.pipeline import OperatorSpec, placement
from workloads.riot.costs import task_cost

# Node kinds that run a container on the emulation, so their legs cross its link layer.
CONTAINERS = ("gateway", "broker", "cloud_vm", "coordinator")


@dataclass(frozen=True)
class SparkBatch:
    """A Spark job's micro-batches (sim.operators.spark_batches): the fixed cost of each, its
    trigger interval, the threads a batch spreads over, the batch's cost per message it read,
    and where the figures came from."""

    cost: float
    trigger: float
    threads: int
    per_message: float
    source: str


@dataclass(frozen=True)
class OperatorCost:
    """What an operator's instance on a node costs: `message` per message it takes (its
    node's CPU queues it, as any operator's), and a Spark job's batches."""

    message: float
    source: str  # where `message` came from: written, task reference, calibration, ...
    batch: SparkBatch | None = None

    def key(self) -> tuple:
        """The figures as the run's facts give them (`Costs.applied`)."""
        figures = [("per_message_s", self.message), ("from", self.source)]
        if self.batch is not None:
            figures += [("per_batch_s", self.batch.cost), ("batch_per_message_s",
                        self.batch.per_message), ("trigger_s", self.batch.trigger),
                        ("batch_from", self.batch.source)]
        return tuple(figures)


def _few(nodes: list[str]) -> str:
    return ", ".join(nodes[:3]) + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")


class Costs:
    """The costs of one model's jobs (see the module's docstring)."""

    def __init__(self, topology: Topology, driver_cost: float,
                 calibration: Calibration | None = None, dilation: float = 1.0):
        self.topology = topology
        self.driver_cost = driver_cost
        self.calibration = calibration
        # Only a calibrated model stands for the emulation, and so for its dilation.
        self.dilation = dilation if calibration is not None else 1.0
        self._applied: dict[tuple[str, str], OperatorCost] = {}  # (operator, node) -> cost

    def qemu(self, node: str) -> bool:
        """Whether the node stands for an arm64 container under QEMU, as calibrated: the
        emulation runs the arm64 gateway image for gateways of an arm64 profile only (every
        other node runs an amd64 image; emu.cluster.plan)."""
        if self.calibration is None:
            return False
        found = self.topology.nodes[node]
        return found.kind == "gateway" and found.profile.arch == "arm64"

    def cpu(self, node: Node) -> Cpu:
        """The node's cores as a queue, at its speed."""
        cores, speed = node.profile.cores, node.profile.speed
        if self.calibration is None:
            return Cpu(node.name, cores, speed)
        qemu = self.qemu(node.name)
        if qemu:
            gateway = self.calibration.gateway
            cores, speed = gateway.cores, gateway.speed
        elif node.kind == "broker":
            cores = 1
        capacity = self.capacity(node, qemu, speed)
        if node.kind in CONTAINERS:  # K times the host's CPU per emulated second
            speed *= self.dilation
        return Cpu(node.name, cores, speed, capacity)

    def capacity(self, node: Node, qemu: bool, speed: float) -> float | None:
        """The cores of the node's model CPU that the emulation's container limit stands for
        (None: its own cores, for a node that runs no container). The limit is
        emu.cluster.plan's: the profile's cores, times its speed where the image runs natively
        (under QEMU the measured speed already is the host's), at most the measuring host's
        cores. A measured node's model second is a host second (the gateway's speed is a host
        core's under QEMU; the broker's service time is the host's); a native node's model
        core of speed s is s host cores, as the limit counts them."""
        if node.kind not in CONTAINERS:
            return None
        profile = node.profile
        limit = profile.cores * (1.0 if qemu else profile.speed)
        limit = max(0.01, min(limit, float(self.calibration.host.cores)))
        measured = qemu or node.kind == "broker"
        return limit if measured else limit / speed

    def operator(self, spec: OperatorSpec, node: str) -> OperatorCost:
        """What an instance of `spec` on `node` costs, and where each figure came from (the
        rule in the module's docstring, for every engine): remembered per operator and node
        for the run's facts (`applied`)."""
        key = (spec.name, node)
        found = self._applied.get(key)
        if found is None:
            found = self._applied[key] = self._operator(spec, node)
        return found

    def _operator(self, spec: OperatorSpec, node: str) -> OperatorCost:
        if self.qemu(node):
            measured = self.calibration.gateway.operators.get(spec.task)
            if measured is not None:
                return OperatorCost(measured * self.calibration.gateway.speed,
                                    "calibration (the task measured on the gateway)")
        if not operator_engine(spec.engine).micro_batches:
            return self._written(spec)
        profile = self.topology.nodes[node].profile
        spark = self._spark()
        if self.calibration is None:  # reference seconds over the node's own cores
            cost, threads = spark.batch, max(1, profile.cores)
            per_message, speed = spark.message, 1.0
        else:  # host seconds, over the cores the job sees (local[N]: the host's)
            threads = max(1, min(profile.cores, self.calibration.host.cores))
            cost, per_message, speed = spark.batch * profile.speed, spark.message, profile.speed
        batch_from = "calibration (Spark measured)" if spark.measured else "default Spark profile"
        if spark.measured or spec.cost is None:
            # The job's batches charge the measured (or default) part per message.
            return OperatorCost(0.0, f"{batch_from}, per message", SparkBatch(
                cost, spark.trigger, threads, per_message * speed, batch_from))
        # Nothing measured the job: the written cost per message, as for any operator.
        return OperatorCost(spec.cost, "written",
                            SparkBatch(cost, spark.trigger, threads, 0.0, batch_from))

    @staticmethod
    def _written(spec: OperatorSpec) -> OperatorCost:
        """The written cost, else the task's reference cost (workloads.riot.costs), else 0."""
        if spec.cost is not None:
            return OperatorCost(spec.cost, "written")
        reference = task_cost(spec.task)
        if reference is not None:
            return OperatorCost(reference, "task reference")
        return OperatorCost(0.0, "none")

    def _spark(self) -> Spark:
        """The Spark job's costs: the calibration's (measured, or its default), else the
        default profile's."""
        return self.calibration.spark if self.calibration is not None else DEFAULT_SPARK

    def applied(self) -> dict[str, list[dict]]:
        """The run's facts `costs`: each operator's cost as the model charged it, by node
        (nodes charged alike together), with where each figure came from."""
        grouped: dict[str, dict[tuple, list[str]]] = {}
        for (operator, node), cost in self._applied.items():
            grouped.setdefault(operator, {}).setdefault(cost.key(), []).append(node)
        return {operator: [{**dict(key), "nodes": nodes} for key, nodes in rules.items()]
                for operator, rules in grouped.items()}

    def unused_written(self, pipeline: list[OperatorSpec]) -> list[str]:
        """The written `cost`s the model does not charge, each with where and why (what
        `foglab validate` says): a calibration's measure stands in their place."""
        notes = []
        for index, spec in enumerate(pipeline):
            if spec.cost is None:
                continue
            nodes = [node for node in placement(self.topology, spec.on)
                     if self._operator(spec, node).source != "written"]
            if nodes:
                why = self._operator(spec, nodes[0]).source
                notes.append(f"pipeline[{index}] ({spec.name}): cost {spec.cost * 1e6:g}us is "
                             f"not charged on {_few(nodes)}: the {why} stands in its place")
        return notes

    def driver(self, gateway: str) -> float:
        """A gateway's driver's cost per reading."""
        if self.qemu(gateway):
            return self.calibration.gateway.driver * self.calibration.gateway.speed
        return self.driver_cost

    def broker(self, node: Node) -> BrokerSpec:
        """How a broker serves: the topology's settings, with the measured service time."""
        spec = node.broker or BrokerSpec()
        if self.calibration is None:
            return spec
        # The service time is the host's seconds; the broker's Cpu divides by its speed. A
        # RabbitMQ broker takes RabbitMQ's, where the profile measured it.
        measured = self.calibration.broker_of(node.broker_kind)
        return spec.model_copy(update={
            "service_time": measured.service_time * node.profile.speed})

    def lead(self, node: str) -> float:
        """The link layer's own delay on each leg `node` sends (0 without a calibration)."""
        if self.calibration is None or self.topology.nodes[node].kind not in CONTAINERS:
            return 0.0
        return self.calibration.links.hop_overhead / self.dilation

