"""Dynamic task replication on the emulation (`scenario.replication`; workloads.replication
says what is measured and how the controller decides, for the model too).

The host is the controller, on a thread of its own while the run measures: every `interval`
from the epoch it asks each instance of every operator with an `slo` for the latencies of
the inputs it processed since the last ask (`operator.delays`: emission to the end of its
processing, noted by the agent), takes the 95th percentile of each instance's and the
worst instance's for the operator (workloads.replication.percentile), and lets the operator's
Scaler decide:

- start: the operator's config, with an input session of the new node's own, is installed on
  the candidate nearest its input (workloads.recovery.place; `install`). The operator's
  instances read one shared subscription (emu.cluster.deployment deploys an operator with an slo
  that way, through sessions of their own), so from its SUBACK on the broker shares the
  input with the new one. The replica's session is on the broker holding the operator's
  input (OperatorConfig.broker), over its node's link there when that is another broker.
- retire: the newest replica leaves (`replica.retire`): its session unsubscribes, it
  processes what the broker had sent it, then it goes: nothing it was given is dropped.

A `replicas` row per decision, at the time the agent answered (s from the epoch). Nothing
starts or retires at or after the run's end (`duration`): a reading then is recorded, and
decides nothing.

A saturated node answers late: its requests wait on its scheduler behind the input it has
not processed (4.5 s once in a CI run), and the controller's readings of every operator wait
for it, so the interval stretches while a node is overloaded; the samples in the manifest
(`facts.replication.samples`) carry the times they were taken.

At a dilation K (emu.agent.timebase) the interval, the request timeout and every time recorded
are emulated seconds: the controller asks every `interval` of the run's clock (K times as
long on the host), the agents' delays are on their clock, the rows' times on the run's.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import asdict, replace

from emu.agent.config import AgentConfig, OperatorConfig
from emu.agent.timebase import UNDILATED, TimeBase
from emu.cluster.deployment import session_name
from emu.features.base import Feature
from topologies.model import Topology
from workloads.recovery import candidates, input_devices, path_latency, place
from workloads.replication import ReplicationSpec, Scaler, percentile

REQUEST_TIMEOUT_S = 10.0


class Replication:
    """`start(epoch)` as the run begins, `finish()` at its end, then `columns()`. `timebase`:
    the run's; `epoch` and `clock` (its emulated clock by default) on it."""

    def __init__(self, control, spec: ReplicationSpec, topology: Topology, workload,
                 configs: dict[str, AgentConfig],
                 clock: Callable[[], float] | None = None,
                 timebase: TimeBase = UNDILATED, duration: float = math.inf) -> None:
        self.control = control
        self.duration = duration  # the run's, from the epoch
        self.spec = spec
        self.topology = topology
        self.workload = workload
        self.timebase = timebase
        self.clock = clock or timebase.now
        self.latency = path_latency(topology)
        self.instances: dict[str, list[str]] = {}  # operator -> its nodes, first ones first
        self.configs: dict[str, OperatorConfig] = {}
        for node, config in configs.items():
            for op in config.operators:
                if op.slo is not None:
                    self.instances.setdefault(op.name, []).append(node)
                    self.configs.setdefault(op.name, op)
        self.scalers = {name: Scaler(spec, self.configs[name].slo, first=len(nodes))
                        for name, nodes in self.instances.items()}
        self.rows: list[dict] = []
        # Every reading: [t, operator, instances, latency or None, inputs], for the manifest.
        self.samples: list[list] = []
        self.errors: list[str] = []
        self.unplaced = 0  # replicas decided with no candidate left to run them
        self.epoch = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="foglab-replication",
                                        daemon=True)

    def start(self, epoch: float) -> None:
        self.epoch = epoch
        if self.instances:
            self._thread.start()

    def _run(self) -> None:
        k = 1
        while not self.timebase.wait(
                self._stop, max(0.0, self.epoch + k * self.spec.interval - self.clock())):
            for operator in sorted(self.instances):
                try:
                    self._observe(operator)
                except Exception as error:  # noqa: BLE001 - recorded, the run goes on
                    self.errors.append(f"{operator}: {error}")
            k = max(k + 1, math.floor((self.clock() - self.epoch) / self.spec.interval) + 1)

    def _observe(self, operator: str) -> None:
        nodes = list(self.instances[operator])
        result = self.control.send(nodes, "operator.delays", {"operator": operator},
                                   timeout=REQUEST_TIMEOUT_S)
        delays = [reply.result["delays"] for reply in result.replies.values()
                  if reply.ok and reply.result and reply.result.get("delays")]
        latency = max(map(percentile, delays)) if delays else None
        self.samples.append([round(self.clock() - self.epoch, 3), operator, len(nodes),
                             None if latency is None else round(latency, 4),
                             sum(map(len, delays))])
        decision = self.scalers[operator].observe(latency, len(nodes))
        if self.clock() - self.epoch >= self.duration:
            return  # nothing starts or retires at or after the run's end
        if decision == "start":
            self._start(operator, latency)
        elif decision == "retire":
            self._retire(operator, latency)

    def _start(self, operator: str, latency: float | None) -> None:
        config = self.configs[operator]
        options = candidates(self.spec.to, self.topology, (), self.instances[operator])
        node = place(options, input_devices(config.reads, self.workload, self.topology),
                     self.latency)
        if node is None:  # every candidate runs it already: as at `max`
            self.unplaced += 1
            return
        replica = replace(config, session=session_name(operator, node))
        self._request(operator, node, "install", asdict(replica), "start", latency)

    def _retire(self, operator: str, latency: float | None) -> None:
        node = self.instances[operator][-1]
        self._request(operator, node, "replica.retire", {"operator": operator}, "retire",
                      latency)

    def _request(self, operator: str, node: str, command: str, args: dict, action: str,
                 latency: float | None) -> None:
        result = self.control.send([node], command, args, timeout=REQUEST_TIMEOUT_S)
        if (problem := result.problem(node)) is not None:
            self.errors.append(f"{operator}: {action} on {node}: {problem}")
            return
        if action == "start":
            self.instances[operator].append(node)
        else:
            self.instances[operator].remove(node)
        self.rows.append({"t": self.clock() - self.epoch, "operator": operator,
                          "action": action, "node": node,
                          "instances": len(self.instances[operator]),
                          "latency": latency if latency is not None else math.nan,
                          "slo": self.configs[operator].slo})

    def finish(self, timeout: float = 2 * REQUEST_TIMEOUT_S) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.timebase.host_seconds(timeout))

    def columns(self) -> dict[str, list]:
        names = ("t", "operator", "action", "node", "instances", "latency", "slo")
        return {name: [row[name] for row in self.rows] for name in names}

    def nodes(self) -> dict[str, list[str]]:
        """Operator -> every node a replica of it ran on (its input may arrive there)."""
        started: dict[str, list[str]] = {}
        for row in self.rows:
            if row["action"] == "start":
                started.setdefault(row["operator"], []).append(row["node"])
        return started


class ReplicationFeature(Feature):
    """`scenario.replication` on a run: the instances of an operator with an slo share one
    input subscription through sessions of their own; the controller decides from the epoch;
    the `replicas` table and facts."""

    key = "replication"

    def __init__(self, spec: ReplicationSpec) -> None:
        super().__init__(spec)
        self.replication: Replication | None = None

    def prepare(self, setup) -> None:
        setup.moving |= {op.name for op in setup.pipeline if op.slo is not None}

    def start(self, run, epoch: float) -> None:
        # The planned configs: a replica joins the shared subscription on the broker that
        # holds the operator's input, whatever broker its node has (emu.cluster.plan).
        self.replication = Replication(run.control, self.spec, run.topology, run.workload,
                                       run.plan.agent_configs(), timebase=run.clock,
                                       duration=run.timing.duration)
        self.replication.start(epoch)

    def stop(self) -> None:
        if self.replication is not None:
            self.replication.finish()

    def moves(self) -> dict[str, list[str]]:
        return self.replication.nodes() if self.replication is not None else {}

    def results(self, run, tables: dict, facts: dict) -> None:
        tables["replicas"] = self.replication.columns()
        facts["replication"] = {"errors": self.replication.errors,
                                "samples": self.replication.samples,
                                "unplaced": self.replication.unplaced}
