"""Control-message broadcasts on the emulation (`scenario.broadcasts`; workloads.broadcast
says what they are, sim.features.broadcasts how the model runs them).

The messages are real MQTT messages from agent to agent through their broker
(emu.agent.broadcast): on emu only gateways and cloud VMs run an agent, so only they can send,
forward or receive one; `check` refuses any other node by its field (a coordinator runs
ZooKeeper there, not code of the experiment's: broadcast from a cloud VM that stands for it,
as experiments/broadcast-tree-emu.yaml does).

As the run begins, the host gives each node that sends (the sender, and in a tree every
worker with children) its part of the plan in one `broadcast.plan` request: the children's
names in order, the size, the cost and, for the sender, `at`; the sender starts at the epoch
plus `at` on its own scheduler, so the request's latency does not count. At the end the host
reads every node's `broadcasts.csv` (flushed row by row: a crashed worker's count) and builds
the `broadcasts` table and the facts' `broadcasts` with workloads.broadcast.results, as sim
does: times in seconds from the epoch, `t_sent` the broadcast's `at`. At a dilation K they are
emulated, as the agents' records are (emu.agent.timebase), and so is the plan's timeout (the
controller waits K times as long on the host).

What the model does not have: sim sends worker to worker over the switch (two links), where
every emulated message crosses the broker (sender -> broker -> worker, four links here, and
Mosquitto's own handling), and each agent's MQTT client thread hands the message to its
scheduler; a forwarding worker's reception so costs more than sim's hop.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from pathlib import Path

from emu.agent.broadcast import RECORDS
from emu.agent.config import AGENT_KINDS
from emu.agent.records import read_record
from emu.features.base import Feature
from topologies.errors import SpecError
from topologies.model import Topology
from workloads.broadcast import BroadcastSpec, Planned, resolve, results

PLAN_TIMEOUT_S = 10.0


def check(broadcasts: list[BroadcastSpec], topology: Topology, duration: float
          ) -> list[Planned]:
    """The broadcasts as emu runs them: every sender and worker a node with an agent, or a
    SpecError naming scenario.broadcasts[i].from (or .to[j]), the value and what is expected."""
    planned = resolve(broadcasts, topology, duration)
    for plan, spec in zip(planned, broadcasts, strict=True):
        kind = topology.nodes[plan.source].kind
        if kind not in AGENT_KINDS:
            raise SpecError(("scenario", "broadcasts", plan.index, "from"), spec.source,
                            f"a gateway or cloud VM on emu, where only they run an agent that "
                            f"sends (a {kind} does not: broadcast from a cloud VM that stands "
                            "for it, or run it on sim)")
        for j, pattern in enumerate(spec.to):
            where = ("scenario", "broadcasts", plan.index, "to") + ((j,) if len(spec.to) > 1
                                                                   else ())
            for name in topology.match(pattern):
                kind = topology.nodes[name].kind
                if kind not in AGENT_KINDS:
                    raise SpecError(where, pattern, f"gateways or cloud VMs on emu, where only "
                                    f"they run an agent that receives, but {name} is a {kind}")
    return planned


def parts(planned: list[Planned]) -> dict[str, list[dict]]:
    """Node -> its parts of the broadcasts (emu.agent.broadcast.Broadcasts.plan): the nodes
    that send only (a leaf needs none: it notes what reaches it)."""
    found: dict[str, list[dict]] = {}
    for plan in planned:
        names = (plan.source, *plan.workers)
        for i, node in enumerate(names):
            children = [names[c] for c in plan.children(i)]
            if children:
                found.setdefault(node, []).append({
                    "index": plan.index, "size": int(plan.size), "cost": float(plan.cost),
                    "children": children, "at": plan.at if i == 0 else None})
    return found


class Broadcaster:
    """`start(epoch)` as the run begins (after the agents have the epoch), `finish(...)` once
    their records are on the host."""

    def __init__(self, control, broadcasts: list[BroadcastSpec], topology: Topology,
                 duration: float) -> None:
        self.control = control
        self.planned = check(broadcasts, topology, duration)
        self.parts = parts(self.planned)
        self.errors: list[str] = []
        self.epoch = 0.0

    def start(self, epoch: float) -> None:
        """Every sending node's part, in one request each (answered before the first
        broadcast's `at`, or the facts say which came late)."""
        self.epoch = epoch
        nodes = sorted(self.parts)
        result = self.control.send(nodes, "broadcast.plan",
                                   {"epoch": epoch, "parts": self.parts},
                                   timeout=PLAN_TIMEOUT_S)
        for node in nodes:
            if (problem := result.problem(node)) is not None:
                self.errors.append(f"{node}: broadcast.plan: {problem}")
                continue
            reply = result.replies[node]
            first = min(part["at"] if part["at"] is not None else math.inf
                        for part in self.parts[node])
            if reply.t_done - epoch > first:
                self.errors.append(f"{node}: its plan came {reply.t_done - epoch - first:.3f} s "
                                   "after its broadcast was due")

    def finish(self, records_dir: Callable[[str], Path], tables: dict, facts: dict) -> None:
        """The `broadcasts` table and facts from the nodes' records; `facts["broadcast"]`:
        what the emulation adds (each sender's start after its `at`, copies QoS 1 delivered
        again, errors)."""
        events: dict[tuple[int, str, str], float] = {}
        duplicates = 0
        nodes = {n for plan in self.planned for n in (plan.source, *plan.workers)}
        for node in sorted(nodes):
            # Never through a link planted in the node's records (emu.agent.records).
            found = read_record(records_dir(node), RECORDS)
            if found is None:
                continue
            with io.TextIOWrapper(found, newline="") as rows:
                for row in csv.DictReader(rows):
                    key = (int(row["broadcast"]), row["node"], row["event"])
                    if key[2] == "duplicate":
                        duplicates += 1
                    elif key[2] in ("start", "received"):
                        events.setdefault(key, float(row["t"]) - self.epoch)
        rows = []
        for plan in self.planned:
            for i, worker in enumerate(plan.workers, start=1):
                t = events.get((plan.index, worker, "received"))
                if t is not None:
                    rows.append((plan.index, plan.mode, plan.fanout, worker, plan.depth(i),
                                 plan.at, t, t - plan.at))
        tables["broadcasts"], facts["broadcasts"] = results(self.planned, rows)
        start_lag = [round(events[plan.index, plan.source, "start"] - plan.at, 4)
                     if (plan.index, plan.source, "start") in events else None
                     for plan in self.planned]
        facts["broadcast"] = {"start_lag": start_lag, "duplicates": duplicates,
                              "errors": self.errors}


class Broadcasts(Feature):
    """`scenario.broadcasts` on a run: refused before the cluster starts if a sender or worker
    runs no agent, planned on the senders at the epoch, the `broadcasts` table and facts from
    the nodes' records."""

    key = "broadcasts"

    @classmethod
    def validate(cls, experiment, topology, backend: str) -> None:
        """Senders and workers that run an agent; not yet on hybrid (the registry's backends
        refuse it there first)."""
        if experiment.scenario.broadcasts:
            check(experiment.scenario.broadcasts, topology, experiment.run.duration)

    def __init__(self, spec: list[BroadcastSpec]) -> None:
        super().__init__(spec)
        self.broadcaster: Broadcaster | None = None

    def prepare(self, setup) -> None:
        check(self.spec, setup.topology, setup.timing.duration)

    def start(self, run, epoch: float) -> None:
        # Each sender starts at its `at`, on its own scheduler.
        self.broadcaster = Broadcaster(run.control, self.spec, run.topology,
                                       run.timing.duration)
        self.broadcaster.start(epoch)

    def results(self, run, tables: dict, facts: dict) -> None:
        self.broadcaster.finish(run.cluster.records_dir, tables, facts)
