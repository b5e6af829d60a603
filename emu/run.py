"""An experiment run on real containers, in real time, into the simulator's tables.

One run: plan the cluster from the topology with each agent's drivers and operators
(`emu.deployment`), bring it up, wait until every agent has registered in ZooKeeper, then
start every driver at one common epoch (a `set run.epoch` request to all agents, so no device
speaks before every sink listens), run for the experiment's duration while sampling CPU and
memory (cgroups) and link counters (relays), wait `run.drain` for messages in flight, stop the
agents with SIGTERM (they flush their records), read the records back (`emu.tables`) and take
the cluster down. Whatever fails, the cluster is removed.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from emu.agent.config import AgentConfig
from emu.deployment import agent_configs
from emu.metrics import NodeSampler
from emu.tables import messages_table, read_records
from topologies.model import Topology
from workloads.pipeline import OperatorSpec
from workloads.spec import WorkloadSpec

REGISTER_TIMEOUT_S = 180.0
# A Spark job's JVM and first query plan take tens of seconds, minutes on a busy host.
SPARK_START_TIMEOUT_S = 300.0
SPARK_DRAIN_TIMEOUT_S = 300.0
COMMAND_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20
# Between the start request and the epoch: every agent hears it before its first message.
EPOCH_LEAD_S = 1.0


class EmuError(RuntimeError):
    """The emulated run could not go on; says which step and node."""


def _links_rows(counters_then: dict, counters_now: dict, plan, t: float,
                interval: float, rows: dict) -> None:
    for key, now in counters_now.items():
        then = counters_then.get(key)
        if then is None:
            continue
        link = plan.link(*key)
        sent = (now.bytes_up - then.bytes_up) + (now.bytes_down - then.bytes_down)
        capacity = link.shape.bandwidth_bps
        rows["t"].append(t)
        rows["link"].append(f"{key[0]}~{key[1]}")
        rows["src"].append(key[0])
        rows["dst"].append(key[1])
        rows["bytes"].append(sent)
        rows["utilisation"].append(sent * 8 / (capacity * interval) if capacity else 0.0)
        rows["latency"].append(link.shape.latency_s)


@dataclass
class Timing:
    """How long a run lasts (s), how often it samples, how long it waits for stragglers."""

    duration: float
    sample: float = 1.0
    drain: float = 1.0


@dataclass
class Emulation:
    """Columns per result table (see experiments.schema) and facts for the manifest."""

    tables: dict[str, dict]
    facts: dict


def emulate(topology: Topology, workload: WorkloadSpec, pipeline: list[OperatorSpec],
            timing: Timing, seed: int, progress=lambda seconds: None,
            records: Path | None = None) -> Emulation:
    """Run the experiment on a cluster made for it, and remove the cluster whatever happens.

    `records`: where nodes' records are kept (default: a scratch folder removed at the end).
    """
    from emu.cluster.engine import Cluster
    from emu.cluster.hold import stop_on_signals
    from emu.cluster.plan import plan_cluster

    configs = agent_configs(topology, workload, pipeline, seed, 0.0)

    def configure(node, config: AgentConfig) -> AgentConfig:
        mine = configs[node.name]
        return replace(config, drivers=mine.drivers, operators=mine.operators,
                       seed=mine.seed, index=mine.index, hold=True)

    name = f"run-{int(time.time() * 1000) % 10**10:010d}"
    cluster = Cluster(plan_cluster(topology, name, configure=configure), records=records,
                      seed=seed)
    # SIGTERM and SIGHUP stop a run as Ctrl-C does, so its containers go with it.
    signals = (stop_on_signals() if threading.current_thread() is threading.main_thread()
               else contextlib.nullcontext())
    with signals:
        try:
            cluster.up()
            return _run(cluster, timing, progress)
        finally:
            cluster.down()


def _run(cluster, run: Timing, progress) -> Emulation:
    from emu.control import Controller, wait_registered

    status = {s.node: s for s in cluster.status()}
    agents = [a.node for a in cluster.plan.agents()]
    zookeeper = ",".join(f"{status[z].ip}:2181" for z in cluster.plan.zookeeper)
    try:
        wait_registered(zookeeper, agents, timeout=REGISTER_TIMEOUT_S)
    except TimeoutError as error:
        raise EmuError(f"agents did not register: {error}") from None
    _wait_spark_jobs(cluster)
    brokers = sorted(set(cluster.plan.brokers.values()))
    control = Controller(f"{status[brokers[0]].ip}:1883").connect()
    try:
        epoch = time.time() + EPOCH_LEAD_S
        started = control.send(agents, "set", {"key": "run.epoch", "value": epoch},
                               timeout=COMMAND_TIMEOUT_S, broadcast=True)
        if not started.ok:
            raise EmuError(f"starting the drivers failed: {started.summary()}")
        tables = _measure(cluster, status, run, epoch, progress)
        # Devices fall silent at the end, as the simulator's sources do; what is under way
        # still arrives during the drain.
        stopped = control.set_rate(agents, 0.0, timeout=COMMAND_TIMEOUT_S)
        if not stopped.ok:
            raise EmuError(f"stopping the drivers failed: {stopped.summary()}")
    finally:
        control.close()
    time.sleep(run.drain)
    caught_up = _drain_spark_jobs(cluster, epoch + run.duration)
    _stop_agents(cluster.client.api, {a: status[a].container for a in agents})

    sent, received = read_records(cluster.records_root)
    messages, counts = messages_table(sent, received, epoch, run.duration)
    facts = {**cluster.facts, "messages": counts, "epoch": epoch,
             "spark": _spark_progress(cluster.records_root), "spark_caught_up": caught_up}
    return Emulation({"messages": messages, **tables}, facts)


def _measure(cluster, status: dict, run: Timing, epoch: float, progress) -> dict[str, dict]:
    """Sample nodes and links until the run's end: the `nodes` and `links` columns."""
    cores = {s.node: cluster.plan.containers[s.node].nano_cpus / 1e9 for s in status.values()}
    sampler = NodeSampler({s.node: s.container for s in status.values()}, cores, epoch)
    links = {k: [] for k in ("t", "link", "src", "dst", "bytes", "utilisation", "latency")}
    counters = cluster.links.counters()
    end = epoch + run.duration
    while (now := time.time()) < end:
        time.sleep(min(run.sample, end - now))
        now = time.time()
        sampler.sample(now)
        fresh = cluster.links.counters()
        _links_rows(counters, fresh, cluster.plan, now - epoch, run.sample, links)
        counters = fresh
        progress(min(now - epoch, run.duration))
    return {"nodes": sampler.rows, "links": links}


def _wait_spark_jobs(cluster) -> None:
    """Wait until each Spark operator's query runs (its job touches `started`)."""
    jobs = [cluster.records_dir(node) / operator / "started"
            for node, operator in _spark_jobs(cluster)]
    deadline = time.monotonic() + SPARK_START_TIMEOUT_S
    while not all(path.exists() for path in jobs):
        if time.monotonic() > deadline:
            late = [p for p in jobs if not p.exists()]
            log = late[0].parent / "job.log"
            tail = log.read_text(errors="replace").splitlines()[-10:] if log.exists() else []
            raise EmuError("Spark operators " + ", ".join(
                f"{p.parent.parent.name}/{p.parent.name}" for p in late) + " did not start "
                f"within {SPARK_START_TIMEOUT_S:.0f} s; the first one's log ends:\n"
                + "\n".join(tail))
        time.sleep(0.5)


def _spark_jobs(cluster) -> list[tuple[str, str]]:
    return [(c.node, op.name) for c in cluster.plan.agents() for op in c.agent.operators
            if op.engine == "spark"]


def _drain_spark_jobs(cluster, end: float) -> dict[str, float | None]:
    """Wait until each Spark operator's source has handed Spark every message that reached
    its node (its micro-batches' `read` offset); per operator, the seconds after the run's
    end that took, or None if it did not catch up within SPARK_DRAIN_TIMEOUT_S. The
    messages table measures delivery to the node; this measures Spark's lag behind it."""
    pending = dict.fromkeys(_spark_jobs(cluster))
    caught_up: dict[str, float | None] = {f"{n}/{o}": None for n, o in pending}
    deadline = time.monotonic() + SPARK_DRAIN_TIMEOUT_S
    while pending and time.monotonic() < deadline:
        for node, operator in list(pending):
            records = cluster.records_dir(node)
            if _last_read(records / operator / "progress.jsonl") >= _rows(
                    records / "received.csv"):
                caught_up[f"{node}/{operator}"] = round(time.time() - end, 2)
                del pending[node, operator]
        time.sleep(0.5)
    return caught_up


def _last_read(path: Path) -> int:
    lines = path.read_text().splitlines() if path.exists() else []
    reads = [json.loads(line).get("read") for line in lines if line.strip()]
    return max((r for r in reads if r is not None), default=0)


def _rows(path: Path) -> int:
    """Data rows of a CSV with a header (the agent flushes it every second)."""
    if not path.exists():
        return 0
    with path.open("rb") as rows:
        return max(sum(1 for _ in rows) - 1, 0)


def _stop_agents(api, containers: dict[str, str]) -> None:
    """SIGTERM every agent at once, then wait for each: they flush records on the way out."""
    for container in containers.values():
        api.kill(container, signal="SIGTERM")
    for agent, container in containers.items():
        try:
            api.wait(container, timeout=STOP_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - the SDK raises the transport's errors
            raise EmuError(f"agent {agent} did not stop within {STOP_TIMEOUT_S} s "
                           f"of SIGTERM: {error}") from None


def _spark_progress(root: Path) -> dict[str, list]:
    """Each Spark operator's micro-batch progress, by node and operator."""
    found = {}
    for path in sorted(root.glob("*/*/progress.jsonl")):
        lines = path.read_text().splitlines()
        found[f"{path.parent.parent.name}/{path.parent.name}"] = [
            json.loads(line) for line in lines if line.strip()]
    return found
