"""Failure detection and recovery on the emulation (`scenario.recovery`; workloads.recovery
says what the detector and the re-placement are, for the model too).

The host is the controller: a kazoo children watch on `/iot/gateways`, where every agent keeps
an ephemeral znode in a session of `session_timeout` (emu.agent.registry). When a znode goes
(ZooKeeper expired the session of an agent that stopped answering), each operator instance
that ran on that node is re-placed, one after the other on a worker thread (the watch's
thread must not block): the live candidate nearest the instance's input
(workloads.recovery.place, over the topology's path latencies), which gets a
`migrate.recover` request (emu.agent.migration): it builds the instance from its config,
restores the last checkpoint from ZooKeeper (emu.agent.checkpoint) and takes the instance's
input session over; the broker hands it what it held since the crash. Every instance that
can be re-placed reads through a session of its own (RecoveryFeature deploys them `movable`),
on the broker of the node it started on: a target behind another broker takes it over there,
over the link the cluster's plan gives it (emu.cluster.plan).

A node whose znode comes back (its agent registered again) is a candidate again. The
controller knows where instances run from the deployment, and from its own re-placements;
a scheduled migration of the same operator during a crash is not followed (a run that
migrates and recovers one operator at once is not supported yet).

One decision, under one lock, says where an instance runs when its node crashes and comes
back, so it never runs twice: the detection takes the node's instances off it at once (they
are the re-placement's, even while their target has not answered yet), and the revival
(`revive`, before the crashed agent starts again) hands the new incarnation what is still
placed on the node, which is everything when it comes back before its loss was detected. The
detector then tells the old incarnation's loss from the new one's by the incarnation each
agent publishes in its znode (a per-node data watch, which also sees an agent that replaced
its own old znode without a gap): the loss of an incarnation older than the node's revival
is stale and re-places nothing. Instances re-placed onto a node that crashed too, which its
revived agent does not know, are re-placed again at its revival.

What the controller measures goes into the `recoveries` table (`rows`): the detection at the
watch's wake-up, and from the target's answer the first held input processed (`t_first`),
the checkpoint's time and bytes, and the held inputs. RecoveryFeature adds the crash's time (from
the fault schedule) and what the messages table says was rolled back and lost (`measure`).

At a dilation K (emu.agent.timebase) every time here is emulated: the detection is stamped on
the run's clock, the agents answer on theirs, and the timeouts are emulated seconds (the
controller's wait for a target's answer lasts K times longer on the host). The detector's own
ZooKeeper session is K times longer on the host's clock too, as the agents' are: ZooKeeper's
tick is scaled by K (emu.cluster.plan), so the session expiry it detects is, in emulated
seconds, the scenario's `session_timeout`.
"""

from __future__ import annotations

import contextlib
import json
import math
import queue
import threading
from collections.abc import Callable
from dataclasses import asdict

from emu.agent.config import AGENT_KINDS, AgentConfig, OperatorConfig
from emu.agent.registry import GATEWAYS, gateway_path
from emu.agent.timebase import UNDILATED, TimeBase
from emu.cluster.access import kazoo_options
from emu.cluster.tls import tls_options
from emu.control.commands import NotAnswered
from emu.features.base import Feature
from topologies.model import Topology
from workloads.operator_engines import operator_engine
from workloads.recovery import (
    RecoverySpec,
    candidates,
    input_devices,
    input_streams,
    path_latency,
    place,
)

# How long a target may take to read the checkpoint, restore and take the held input over.
RECOVER_TIMEOUT_S = 30.0
# The detector's kazoo session (emulated s, as the agents' session timeouts are).
WATCH_SESSION_S = 10.0
WATCH_START_S = 15.0


class Recovery:
    """The run's failure detector and re-placer: `start()` once the agents are registered,
    `finish()` at the run's end, then `rows` (times on the run's clock: `timebase`'s, emulated
    at a dilation; `clock` its emulated clock by default)."""

    def __init__(self, control, zk_hosts: str, spec: RecoverySpec, topology: Topology,
                 workload, configs: dict[str, AgentConfig],
                 clock: Callable[[], float] | None = None,
                 timebase: TimeBase = UNDILATED, kazoo: dict | None = None,
                 zookeeper_acl: Callable[[str], list] | None = None) -> None:
        self.control = control
        self.zk_hosts = zk_hosts
        self.kazoo = kazoo or {}  # a closed cluster's identity (emu.cluster.access)
        # A closed cluster: node -> the ACL of a znode handed to it (Access.zookeeper_acl).
        self.zookeeper_acl = zookeeper_acl
        self.spec = spec
        self.topology = topology
        self.workload = workload
        self.timebase = timebase
        self.clock = clock or timebase.now
        self.latency = path_latency(topology)
        self.nodes = {node for node, config in configs.items() if config.kind in AGENT_KINDS}
        # Where each instance that can be re-placed runs now.
        self.placed: dict[str, list[OperatorConfig]] = {
            node: [op for op in configs[node].operators
                   if op.session and operator_engine(op.engine).in_agent]
            for node in self.nodes}
        # Operator -> the streams it reads (also for one left with no node to go to).
        self.streams = {op.name: input_streams(op.reads, workload)
                        for ops in self.placed.values() for op in ops}
        self.planned = {node: {op.name for op in configs[node].operators}
                        for node in self.nodes}
        self.live = set(self.nodes)
        # node -> (incarnation, sessions lost) its znode names
        self.seen: dict[str, tuple[int, int]] = {}
        self.incarnation: dict[str, int] = {}  # node -> its agent's latest start (revive)
        self.rows: list[dict] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._work: queue.Queue = queue.Queue()
        self._client = None
        self._thread = threading.Thread(target=self._worker, name="foglab-recovery",
                                        daemon=True)

    def start(self) -> None:
        from kazoo.client import KazooClient
        from kazoo.recipe.watchers import DataWatch

        host = self.timebase.host_seconds
        self._client = KazooClient(hosts=self.zk_hosts, timeout=host(WATCH_SESSION_S),
                                   **self.kazoo)
        self._client.start(timeout=host(WATCH_START_S))
        self._client.ensure_path(GATEWAYS)
        self._thread.start()
        for node in sorted(self.nodes):
            DataWatch(self._client, gateway_path(node), self._watch(node))

    def _watch(self, node: str) -> Callable[..., bool]:
        # Three parameters: kazoo calls a watch of two again when it raises a TypeError.
        def changed(data: bytes | None, stat: object, event: object = None) -> bool:
            return self._changed(node, data)
        return changed

    def _changed(self, node: str, data: bytes | None) -> bool:
        """On kazoo's thread: the node's znode changed. Gone: its instances leave it now,
        unless the loss is of an incarnation older than the node's revival."""
        now = self.clock()
        with self._lock:
            incarnation, expired = self.seen.get(node, (0, 0))
            if data is not None:
                seen = self.seen[node] = _identity(data, (incarnation, expired))
                was_live = node in self.live
                self.live.add(node)
                # A session of this start that expired, its znode made again before the
                # watch read it (the agent fenced its instances: AgentConfig.fence).
                if not (was_live and seen[0] == incarnation and seen[1] > expired):
                    return True
            elif node in self.live:
                self.live.discard(node)
            else:
                return True
            if self.incarnation.get(node, 0) > incarnation:
                return True  # the old incarnation's session went: the revived one runs them
            instances = self.placed.pop(node, [])
        if instances:
            self._work.put((node, now, instances))
        return True

    def revive(self, node: str, incarnation: int) -> set[str]:
        """Before the crashed node's agent starts again as `incarnation`: the operators of
        its planned config it must not start (re-placed, or being re-placed, elsewhere).
        What is still placed on the node from its plan stays there; what recovery had
        placed on it from other nodes is re-placed again (the revived agent does not know
        it)."""
        now = self.clock()
        with self._lock:
            self.incarnation[node] = incarnation
            on_node = self.placed.get(node, [])
            own = [op for op in on_node if op.name in self.planned.get(node, set())]
            foreign = [op for op in on_node if op.name not in self.planned.get(node, set())]
            if node in self.nodes:
                self.placed[node] = own
            away = self.planned.get(node, set()) - {op.name for op in own}
        if foreign:
            self._work.put((node, now, foreign))
        return away

    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            node, t_detected, instances = item
            try:
                self._recover(node, t_detected, instances)
            except Exception as error:  # noqa: BLE001 - recorded, the run goes on
                self.errors.append(f"recovering {node}: {error}")

    def _recover(self, node: str, t_detected: float,
                 instances: list[OperatorConfig]) -> None:
        for config in instances:
            with self._lock:
                hosting = {n for n, ops in self.placed.items()
                           if any(op.name == config.name for op in ops)}
                down = self.nodes - self.live
            options = [n for n in candidates(self.spec.to, self.topology, down | {node},
                                             hosting) if n in self.nodes]
            sources = input_devices(config.reads, self.workload, self.topology)
            target = place(options, sources, self.latency)
            row = {"node": node, "operator": config.name, "target": target or "",
                   "t_detected": t_detected, "t_recovered": math.nan,
                   "t_checkpoint": math.nan, "state_bytes": 0, "held": 0, "error": None}
            if target is None:
                row["error"] = f"no live node of {self.spec.to} to take {config.name!r}"
                self.rows.append(row)
                continue
            self._hand_checkpoints(config, target)
            result = self.control.send([target], "migrate.recover",
                                       {"operator": config.name, "config": asdict(config)},
                                       timeout=RECOVER_TIMEOUT_S)
            try:
                answer = result.answer(target) or {}
            except NotAnswered as failure:
                row["error"] = str(failure)
                self.rows.append(row)
                continue
            first = answer.get("t_first") or answer.get("t_connected")
            row.update(t_recovered=first if first is not None else math.nan,
                       t_checkpoint=(answer["t_checkpoint"]
                                     if answer.get("t_checkpoint") is not None else math.nan),
                       state_bytes=int(answer.get("state_bytes", 0)),
                       held=int(answer.get("held", 0)))
            with self._lock:
                self.placed.setdefault(target, []).append(config)
            self.rows.append(row)

    def _hand_checkpoints(self, config: OperatorConfig, target: str) -> None:
        """On a closed cluster, the instance's checkpoint znodes (emu.agent.checkpoint), which
        its crashed node made its own, handed to the target, which writes them from now: the
        host is ZooKeeper's super user (emu.cluster.access). Two calls per takeover."""
        if self.zookeeper_acl is None or not config.checkpoint or self._client is None:
            return
        from kazoo.exceptions import NoNodeError

        from emu.agent.checkpoint import checkpoint_key, checkpoint_path

        acl = self.zookeeper_acl(target)
        path = checkpoint_path(checkpoint_key(config))
        for znode in (path, f"{path}/closed"):
            with contextlib.suppress(NoNodeError):  # none written yet
                self._client.set_acls(znode, acl)

    def finish(self, timeout: float = RECOVER_TIMEOUT_S) -> list[dict]:
        """Stop watching; wait for a re-placement under way; the rows."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.stop()
                self._client.close()
        if self._thread.is_alive():
            self._work.put(None)
            self._thread.join(self.timebase.host_seconds(timeout))
        return self.rows

    def reads(self) -> dict[str, list[str]]:
        """Operator -> the streams it reads."""
        return self.streams

    def targets(self) -> dict[str, list[str]]:
        """Operator -> the nodes it was re-placed on (its input may arrive there)."""
        moved: dict[str, list[str]] = {}
        for row in self.rows:
            if row["target"]:
                moved.setdefault(row["operator"], []).append(row["target"])
        return moved


def _identity(data: bytes, default: tuple[int, int]) -> tuple[int, int]:
    """The start (incarnation) and the sessions it lost (expired) an agent's gateway znode
    names (emu.agent.agent, emu.agent.registry), else `default`."""
    try:
        found = json.loads(data)
        return int(found.get("incarnation", default[0])), int(found.get("expired", default[1]))
    except (ValueError, TypeError, AttributeError):
        return default


def measure(rows: list[dict], crashes: dict[str, list[float]], messages, epoch: float,
            reads: dict[str, list[str]]) -> dict[str, list]:
    """The recoveries table's columns (experiments.schema), times in seconds from `epoch`:
    each row's crash (the last crash of its node before the detection, from `crashes`, node ->
    seconds from the epoch; NaN when its node went without a fault), and from the messages
    table (pandas) what the crashed instance had processed after its checkpoint
    (`rolled_back`: received on the node between the checkpoint and the crash) and its
    input that reached no node (`lost`: sent since the checkpoint, or since the crash
    without one). `reads`: operator -> the streams it reads."""
    columns: dict[str, list] = {name: [] for name in (
        "node", "operator", "target", "t_crash", "t_detected", "t_recovered", "detect",
        "recover", "t_checkpoint", "state_bytes", "held", "rolled_back", "lost")}
    import pandas as pd

    messages = pd.DataFrame(messages)
    for row in rows:
        detected = row["t_detected"] - epoch
        before = [t for t in crashes.get(row["node"], []) if t <= detected]
        t_crash = before[-1] if before else math.nan
        recovered = row["t_recovered"] - epoch
        checkpoint = row["t_checkpoint"] - epoch
        since = checkpoint if not math.isnan(checkpoint) else t_crash
        streams = messages["stream"].isin(reads.get(row["operator"], []))
        rolled = lost = 0
        if not math.isnan(since):
            on_node = (messages["sink"] == row["node"]) & streams
            rolled = int((on_node & (messages["t_received"] > since)
                          & (messages["t_received"] <= t_crash)).sum())
            lost = int((streams & messages["lost"] & (messages["t_sent"] >= since)).sum())
        for name, value in (("node", row["node"]), ("operator", row["operator"]),
                            ("target", row["target"]), ("t_crash", t_crash),
                            ("t_detected", detected), ("t_recovered", recovered),
                            ("detect", detected - t_crash), ("recover", recovered - t_crash),
                            ("t_checkpoint", checkpoint), ("state_bytes", row["state_bytes"]),
                            ("held", row["held"]), ("rolled_back", rolled), ("lost", lost)):
            columns[name].append(value)
    return columns


class RecoveryFeature(Feature):
    """`scenario.recovery` on a run: every Python operator that can be re-placed reads through
    a session of its own, expiring after the spec's session timeout; the detector watches from
    the epoch; the `recoveries` table from its rows, the fault schedule's crashes and the
    messages table."""

    key = "recovery"

    def __init__(self, spec: RecoverySpec) -> None:
        super().__init__(spec)
        self.recovery: Recovery | None = None
        self.rows: list[dict] = []

    def prepare(self, setup) -> None:
        setup.moving |= {op.name for op in setup.pipeline
                         if operator_engine(op.engine).in_agent and not op.follow}
        setup.session_timeout = self.spec.session_timeout
        setup.fence = True

    def start(self, run, epoch: float) -> None:
        zk_hosts = ",".join(f"{run.status[z].ip}:2181" for z in run.plan.zookeeper)
        # The planned configs: each instance's names the broker holding its input session,
        # which a node behind another broker takes it over on (emu.cluster.plan).
        self.recovery = Recovery(run.control, zk_hosts, self.spec, run.topology, run.workload,
                                 run.plan.agent_configs(), timebase=run.clock,
                                 kazoo={**kazoo_options(run.plan), **tls_options(run.plan)},
                                 zookeeper_acl=getattr(run.plan.access, "zookeeper_acl", None))
        self.recovery.start()

    def stop(self) -> None:
        if self.recovery is not None:
            self.rows = self.recovery.finish()

    def left(self, node: str, incarnation: int) -> set[str]:
        return self.recovery.revive(node, incarnation) if self.recovery is not None else set()

    def moves(self) -> dict[str, list[str]]:
        return self.recovery.targets() if self.recovery is not None else {}

    def results(self, run, tables: dict, facts: dict) -> None:
        faults = run.features.get("faults")
        crashes = faults.crashes() if faults is not None else {}
        tables["recoveries"] = measure(self.rows, crashes, run.messages, run.epoch,
                                       self.recovery.reads())
        facts["recovery"] = {"errors": self.recovery.errors + [
            row["error"] for row in self.rows if row["error"]]}
