"""An experiment run on real containers, in real time, into the simulator's tables.

One run: plan the cluster from the topology with each agent's drivers and operators
(`emu.deployment`), bring it up, wait until every agent has registered in ZooKeeper, then
start every driver at one common epoch (a `set run.epoch` request to all agents, so no device
speaks before every sink listens), run for the experiment's duration while sampling CPU and
memory (cgroups), link counters (relays) and what could distort the figures (the host's CPU
pressure, the relays' timer lag, CPU throttling: emu.fidelity, judged in `facts.fidelity`),
wait `run.drain` for messages in flight, stop the agents with SIGTERM (they flush their
records), read the records back (`emu.tables`) and take the cluster down. Whatever fails, the
cluster is removed.

Faults. A run keeps what it measured through a node that dies: the containers' states (one
engine call a second, `Health`) tell which agents are dead; a command stops waiting for them
and they go into `Emulation.failed` (node -> what happened), as does an agent that stops
answering; the run goes on with the others, and their tables hold everything received. A
dead node's records are on the host (its records folder is bind-mounted), so what it had
flushed counts: the loss at a kill is at most the agent's last flush interval
(`emu.agent.records.FLUSH_INTERVAL`, 1 s). A broker or ZooKeeper server that goes away and
comes back (a restart) is an outage in the facts, not a failure: agents and the controller
keep persistent sessions and reconnect (emu.agent.mqtt), so a restart loses only the QoS 0
messages of its outage; one still down at the end is failed.

The scenario's fault schedule (`scenario.faults`) is injected on purpose by emu.faults, on a
thread from the epoch on: checked against the cluster's plan before it starts, recorded in
the `faults` table and the facts' `faults`; a fault the engine refuses stops the run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from emu.agent.config import AgentConfig
from emu.deployment import agent_configs
from emu.fidelity import assess
from emu.live import next_epoch, wait_agents_registered
from emu.metrics import NodeSampler
from emu.tables import run_messages, windows_table
from topologies.model import Topology
from topologies.terminal import stop_on_signals
from workloads.broker_scaling import resolve as resolve_scaling
from workloads.pipeline import OperatorSpec
from workloads.recovery import DEFAULT_SESSION_TIMEOUT
from workloads.spec import WorkloadSpec

# A Spark job's JVM and first query plan take tens of seconds, minutes on a busy host.
SPARK_START_TIMEOUT_S = 300.0
SPARK_DRAIN_TIMEOUT_S = 300.0
COMMAND_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20
# The engine is asked for the containers' states at most this often.
HEALTH_POLL_S = 0.5


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
    """Columns per result table (see experiments.schema), facts for the manifest, and the
    nodes that failed during the run (node -> what happened)."""

    tables: dict[str, dict]
    facts: dict
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Seen:
    """A container as the engine reports it: its state, status text, and (services only)
    when it last started and finished (time.time(); None if never or not asked)."""

    state: str
    status: str = ""
    started: float | None = None
    finished: float | None = None


class Health:
    """Which nodes of a running cluster are dead, and when its services were away.

    `states()` gives node -> Seen (the agents from one listing of the cluster's containers,
    the services from their inspection, for their start and finish times); it is asked at
    most every `interval` seconds. An agent whose container is not running is dead until
    the fault schedule starts it again with its agent (`revived`: a crash healed), for the
    rest of the run otherwise.
    A service (broker, ZooKeeper) away is an outage, from its container's finish to its next
    start, so a restart quicker than a poll shows too; `finish` fails a service still down.
    """

    def __init__(self, states: Callable[[], dict[str, Seen]], agents: list[str],
                 services: list[str], clock: Callable[[], float] = time.time,
                 interval: float = HEALTH_POLL_S) -> None:
        self._states = states
        self.agents = list(agents)
        self.services = list(services)
        self.clock = clock
        self.interval = interval
        self.epoch = clock()  # times are said as seconds since this (the run's epoch)
        self.failed: dict[str, str] = {}
        self._down: set[str] = set()  # agents failed for their container (not a request)
        self.outages: dict[str, list[list[float | None]]] = {}
        self._started: dict[str, float] = {}  # service -> its latest start seen
        self._last_poll = -float("inf")

    def observe(self, states: dict[str, Seen], now: float) -> None:
        """Take one report of the containers (a node missing from it was removed)."""
        gone = Seen("removed")
        for node in self.agents:
            seen = states.get(node, gone)
            if seen.state != "running" and node not in self.failed:
                self._down.add(node)
                self.failed[node] = (f"container {seen.state} at t={now - self.epoch:.1f} s"
                                     + (f" ({seen.status})" if seen.status else ""))
        for node in self.services:
            seen = states.get(node, gone)
            spans = self.outages.setdefault(node, [])
            open_span = bool(spans) and spans[-1][1] is None
            last_start = self._started.get(node)
            if seen.started is not None:
                self._started[node] = seen.started
            if seen.state != "running":
                if not open_span:
                    spans.append([self._t(seen.finished or now), None])
            elif open_span:
                spans[-1][1] = self._t(seen.started or now)
            elif last_start is not None and seen.started is not None and (
                    seen.started > last_start):
                # Stopped and started again between two polls.
                spans.append([self._t(seen.finished or seen.started), self._t(seen.started)])

    def revived(self, node: str) -> None:
        """An agent's container started again with its agent: alive from now, unless it
        failed otherwise (a request it did not answer)."""
        if node in self._down:
            self._down.discard(node)
            del self.failed[node]

    def _t(self, when: float) -> float:
        return round(when - self.epoch, 2)

    def poll(self) -> None:
        now = self.clock()
        if now - self._last_poll >= self.interval:
            self._last_poll = now
            self.observe(self._states(), now)

    def dead(self) -> set[str]:
        """The agents known dead, after asking the engine if the last answer is old."""
        self.poll()
        return set(self.failed)

    def finish(self) -> None:
        """Fail the services down now; called once the run's measurements are over."""
        self._last_poll = -float("inf")
        self.poll()
        for node, spans in self.outages.items():
            if spans and spans[-1][1] is None:
                self.failed[node] = f"down since t={spans[-1][0]:.1f} s, not back by the end"

    def facts(self) -> dict[str, list]:
        """Each service's outages, [down, up] in seconds since the epoch (up None: not back)."""
        return {node: spans for node, spans in self.outages.items() if spans}


def engine_time(text: str | None) -> float | None:
    """time.time() of an engine timestamp (RFC 3339, nanoseconds); None for its zero time."""
    if not text or text.startswith("0001-"):
        return None
    from datetime import datetime

    head, _, fraction = text.rstrip("Z").partition(".")
    stamp = datetime.fromisoformat(f"{head}.{(fraction + '000000')[:6]}+00:00")
    return stamp.timestamp()


def _agents_alive(cluster, agents: list[str]) -> None:
    """While agents register: one whose container exited never will; say why, from its log."""
    for status in cluster.status():
        if status.node in agents and status.state in ("exited", "dead"):
            try:
                log = b"".join(cluster.logs(status.node)).decode(errors="replace")
            except Exception:  # noqa: BLE001 - the reason is a help, the exit is the error
                log = ""
            last = [line for line in log.splitlines() if line.strip()][-3:]
            raise EmuError(f"the agent of {status.node} exited while the cluster started"
                           + (": " + " | ".join(last) if last else " (no log)"))


def cluster_states(cluster, services: list[str]) -> dict[str, Seen]:
    """Every node's Seen: one listing for all, an inspection per service for its times."""
    states = {s.node: Seen(s.state, s.status) for s in cluster.status()}
    api = cluster.client.api
    for node in services:
        try:
            state = api.inspect_container(cluster.plan.containers[node].name)["State"]
        except Exception:  # noqa: BLE001 - removed, or the engine busy: the listing stands
            continue
        states[node] = Seen(state.get("Status", ""), "", engine_time(state.get("StartedAt")),
                            engine_time(state.get("FinishedAt")))
    return states


def emulate(topology: Topology, workload: WorkloadSpec, pipeline: list[OperatorSpec],
            timing: Timing, seed: int, progress=lambda seconds: None,
            records: Path | None = None, scenario=None, during=None,
            follow=None, load=()) -> Emulation:
    """Run the experiment on a cluster made for it, and remove the cluster whatever happens.

    `progress(seconds)` hears the run's time; `progress.stage(text)`, if it has one, the step
    (containers, registration, running, drain). `records`: where nodes' records are kept
    (default: a scratch folder removed at the end). `scenario` (workloads.scenario): its
    `migrations` move operators during the run (emu.migration), into the `migrations` table.
    `during(control, epoch, cluster)`, if given, is called as the run begins (the hybrid
    backend starts its model and its load generator there) and returns what is finished
    (`finish()`) as the run's time is over, or when it stops early, and may tell the
    migrations it made (`migrations()`) and the devices it handed over (`handovers()`).
    `follow`: where follow operators' instances start (emu.deployment.agent_configs).
    `load`: devices whose readings the caller publishes from the host (the hybrid backend's
    simulated load): their gateways' agents take them from their load topics
    (emu.deployment.agent_configs).
    """
    from emu.cluster.engine import Cluster
    from emu.cluster.plan import plan_cluster

    # The operators a migration moves read through sessions of their own, which targets take;
    # with recovery, every one that can be re-placed (emu.recovery).
    moving = {plan.operator for plan in getattr(scenario, "migrations", None) or []}
    recovery = getattr(scenario, "recovery", None)
    timeout = DEFAULT_SESSION_TIMEOUT
    if recovery is not None:
        moving |= {op.name for op in pipeline if op.engine == "python" and not op.follow}
        timeout = recovery.session_timeout
    replication = getattr(scenario, "replication", None)
    if replication is not None:  # the replicas of one share its input (emu.replication)
        moving |= {op.name for op in pipeline if op.slo is not None}
    configs = agent_configs(topology, workload, pipeline, seed, 0.0, moving=moving, hold=True,
                            follow=follow, load=load, session_timeout=timeout)
    name = f"run-{int(time.time() * 1000) % 10**10:010d}"
    stage = getattr(progress, "stage", lambda text: None)

    def up_progress(step: str, done: int, total: int, detail: str) -> None:
        stage(f"{step} {done}/{total}" if total else step)

    # Spare brokers idle until publishers move to them (emu.broker_scaling).
    scaling = resolve_scaling(getattr(scenario, "broker_scaling", None) or [], topology)
    plan = plan_cluster(topology, name, agents=configs,
                        spares={entry.spare: entry.broker for entry in scaling.entries})
    if scaling.entries:
        from emu.broker_scaling import check_readers

        check_readers(scaling.entries, plan.brokers, configs)
    faults = _fault_schedule(scenario, topology, timing.duration, plan)
    cluster = Cluster(plan, records=records, seed=seed, progress=up_progress)
    # SIGTERM and SIGHUP stop a run as Ctrl-C does, so its containers go with it.
    with stop_on_signals():
        try:
            cluster.up()
            detector = replicator = None
            if recovery is not None:
                from emu.recovery import Recovery

                def detector(control, zk_hosts: str) -> Recovery:
                    return Recovery(control, zk_hosts, recovery, topology, workload, configs)
            if replication is not None:
                from emu.replication import Replication

                def replicator(control) -> Replication:
                    return Replication(control, replication, topology, workload, configs)
            broadcaster = None
            if getattr(scenario, "broadcasts", None):
                from emu.broadcast import Broadcaster

                def broadcaster(control) -> Broadcaster:
                    return Broadcaster(control, scenario.broadcasts, topology, timing.duration)

            scaler = None
            if scaling.entries:
                from emu.broker_scaling import BrokerScaling

                def scaler(control, status: dict) -> BrokerScaling:
                    return BrokerScaling(
                        control, list(scaling.entries), topology,
                        {b: f"{status[b].ip}:1883" for b in [*plan.spares, *plan.spares.values()]},
                        plan.brokers, [a.node for a in plan.agents() if a.agent.drivers],
                        {a: plan.link(a, b).path[0] for a, b in plan.brokers.items()},
                        readers=[a.node for a in plan.agents() if a.agent.operators])

            return _run(cluster, timing, progress, stage, scenario, configs, seed, during,
                        faults, detector, replicator, broadcaster, scaler)
        finally:
            cluster.down()


def _fault_schedule(scenario, topology: Topology, duration: float, plan) -> list:
    """The scenario's faults as injected (workloads.faults), checked against the cluster's
    plan before it starts (emu.faults.check)."""
    written = getattr(scenario, "faults", None) or []
    if not written:
        return []
    from emu.faults import FaultError, check
    from workloads.faults import resolve

    faults = resolve(written, topology, duration)
    try:
        check(faults, set(plan.containers), {link.key: link.path for link in plan.links})
    except FaultError as error:
        raise EmuError(str(error)) from None
    return faults


def _run(cluster, run: Timing, progress, stage, scenario=None, configs=None,
         seed: int = 0, during=None, faults=(), detector=None,
         replicator=None, broadcaster=None, scaler=None) -> Emulation:
    from emu.control import Controller
    from emu.faults import ClusterEngine, FaultSchedule

    status = {s.node: s for s in cluster.status()}
    agents = [a.node for a in cluster.plan.agents()]
    services = [s.node for s in cluster.plan.services() if s.role != "idle"]
    health = Health(lambda: cluster_states(cluster, services), agents, services)
    stage(f"{len(agents)} agents registering")
    try:
        # As `foglab emu up --experiment` does (emu.live), an exited agent giving up early.
        wait_agents_registered(cluster, status, agents,
                               check=lambda: _agents_alive(cluster, agents))
    except TimeoutError as error:
        raise EmuError(f"agents did not register: {error}") from None
    brokers = sorted(set(cluster.plan.brokers.values()))
    # One id for the run: a reconnection resumes the session, with its queued replies.
    control = Controller(f"{status[brokers[0]].ip}:1883",
                         client_id=f"foglab-controller-{cluster.name}").connect()
    failed = health.failed
    try:
        # The targets of the Spark queries' scheduled moves warm their standbys meanwhile.
        standbys = _spark_standbys(control, scenario, configs or {}, cluster.records_dir)
        if _spark_jobs(cluster) or standbys:
            stage("Spark queries starting")
        _wait_spark_jobs(cluster, standbys)
        epoch = health.epoch = next_epoch()
        started = control.send(agents, "set", {"key": "run.epoch", "value": epoch},
                               timeout=COMMAND_TIMEOUT_S, broadcast=True, gone=health.dead)
        _settle(started, "starting the drivers (set run.epoch)", failed)
        if len(started.replies) == 0:
            raise EmuError(f"starting the drivers failed on every node: {started.summary()}")
        stage("running")
        mover = _Migrations(control, scenario, configs or {}, epoch, seed,
                            cluster.records_dir)
        mover.start()
        recovery = None
        incarnations: dict[str, int] = {}

        def revival(node: str) -> dict:
            """What a crashed agent starts again with (emu.agent.config.revived)."""
            incarnations[node] = incarnations.get(node, 0) + 1
            away: set[str] = set()
            for record in list(mover.records):  # operators that left the node, in order
                if record.status == "done" and node in (record.source, record.target):
                    (away.add if record.source == node else away.discard)(record.operator)
            if recovery is not None:
                away |= {row["operator"] for row in list(recovery.rows)
                         if row["node"] == node and row["target"]}
            return {"epoch": epoch, "incarnation": incarnations[node], "away": sorted(away)}

        engine = ClusterEngine(cluster, revival, health.revived) if faults else None
        injector = FaultSchedule(list(faults), engine, epoch)
        injector.start()
        if detector is not None:
            recovery = detector(control, ",".join(f"{status[z].ip}:2181"
                                                  for z in cluster.plan.zookeeper))
            recovery.start()
        replication = replicator(control) if replicator is not None else None
        if replication is not None:
            replication.start(epoch)
        broadcasts = broadcaster(control) if broadcaster is not None else None
        if broadcasts is not None:  # each sender starts at its `at` (emu.broadcast)
            broadcasts.start(epoch)
        scaling = scaler(control, status) if scaler is not None else None
        if scaling is not None:
            scaling.start(epoch)
        coupled = during(control, epoch, cluster) if during is not None else None
        try:
            tables, fidelity = _measure(cluster, status, run, epoch, progress, health,
                                        injector.check)
        finally:
            injector.finish()
            recovered = recovery.finish() if recovery is not None else []
            if replication is not None:
                replication.finish()
            if scaling is not None:
                scaling.finish()
            if coupled is not None:
                coupled.finish()
        injector.check()
        tables["faults"] = injector.columns()
        moved = mover.finish()
        if coupled is not None and hasattr(coupled, "migrations"):
            moved += coupled.migrations()  # the hybrid backend's policy's
        # Devices fall silent at the end, as the simulator's sources do; what is under way
        # still arrives during the drain.
        live = [a for a in agents if a not in failed]
        stopped = control.set_rate(live, 0.0, timeout=COMMAND_TIMEOUT_S, gone=health.dead)
        _settle(stopped, "stopping the drivers (set publish.rate 0)", failed)
        health.finish()
        reconnects = control.reconnects
    finally:
        control.close()
    stage(f"draining for {run.drain:g} s")
    time.sleep(run.drain)
    caught_up = _drain_spark_jobs(cluster, epoch + run.duration, set(failed), moved)
    _stop_agents(cluster.client.api, {a: status[a].container for a in agents}, failed)

    stage("reading the records")
    _trim_cut_lines(cluster.records_root)
    moves: dict[str, list[str]] = {}
    for record in moved:
        # Every move's target: one rolled back (or still under way at a hybrid run's end)
        # may have taken some of the operator's input before it gave the session back.
        moves.setdefault(record.operator, []).append(record.target)
    for operator, targets in (recovery.targets() if recovery is not None else {}).items():
        moves.setdefault(operator, []).extend(targets)  # re-placed after a crash
    for operator, nodes in (replication.nodes() if replication is not None else {}).items():
        moves.setdefault(operator, []).extend(nodes)  # its replicas'
    # Devices the hybrid backend handed over between gateways enter there too.
    handovers = coupled.handovers() if coupled is not None else None
    messages, counts = run_messages(cluster.records_root, cluster.plan, epoch, run.duration,
                                    moves, handovers)
    facts = {**cluster.facts, "messages": counts, "epoch": epoch,
             "spark": _spark_progress(cluster.records_root), "spark_caught_up": caught_up,
             "outages": health.facts(), "controller_reconnects": reconnects,
             "faults": injector.facts(),
             "fidelity": assess(tables["nodes"], run.sample, fidelity)}
    windows = windows_table(cluster.records_root, epoch, run.duration)
    if recovery is not None:
        from emu.recovery import measure

        tables["recoveries"] = measure(recovered, injector.crashes(), messages, epoch,
                                       recovery.reads())
        facts["recovery"] = {"errors": recovery.errors + [
            row["error"] for row in recovered if row["error"]]}
    if replication is not None:
        tables["replicas"] = replication.columns()
        facts["replication"] = {"errors": replication.errors, "samples": replication.samples,
                                "unplaced": replication.unplaced}
    if scaling is not None:  # joins are replicas' rows too (emu.broker_scaling)
        tables["replicas"] = scaling.columns(tables.get("replicas"))
        facts["broker_scaling"] = scaling.facts()
    if broadcasts is not None:
        broadcasts.finish(cluster.records_dir, tables, facts)
    if moved:
        _measure_outputs(moved, windows, configs or {}, epoch)
        tables["migrations"] = _migration_columns(moved, epoch)
        facts["migrations"] = [{"id": r.id, "status": r.status, "error": r.error,
                                "phases": {k: round(v - epoch, 3) for k, v in r.phases.items()}}
                               for r in moved]
    return Emulation({"messages": messages, "windows": windows, **tables}, facts, dict(failed))


def _window_period(configs: dict[str, AgentConfig], operator: str) -> float:
    """The seconds of an operator's time window (0 without one, or with a count window)."""
    from emu.agent.operators import WindowConfig

    for config in configs.values():
        for op in config.operators:
            if op.name == operator and op.window is not None:
                window = WindowConfig.of(op.window)
                return float(window.size) if window.basis == "time" else 0.0
    return 0.0


def _measure_outputs(records: list, windows: dict[str, list], configs: dict[str, AgentConfig],
                     epoch: float) -> None:
    """A windowed operator's output gap, and its lost, duplicated and reordered events, from
    its window outputs as the model measures them (workloads.migration.measures)."""
    from workloads.migration.measures import coverage, output_gap

    for record in records:
        period = _window_period(configs, record.operator)
        if not period or record.status != "done":
            continue
        rows = sorted((t, sn, n) for t, op, sn, n in zip(
            windows["t"], windows["operator"], windows["last_sn"], windows["count"],
            strict=True) if op == record.operator)
        start, end = record.start - epoch, record.end - epoch
        record.output_gap = output_gap([t for t, _, _ in rows], start, end, period)
        record.lost, record.duplicates, record.reordered = coverage(
            (sn, n) for t, sn, n in rows if start - 2 * period <= t <= end + 2 * period)


def _migration_columns(records: list, epoch: float) -> dict[str, list]:
    columns: dict[str, list] = {}
    for record in records:
        for name, value in record.row(epoch).items():
            columns.setdefault(name, []).append(value)
    return columns


class _Migrations:
    """The scenario's migrations, each at its time after the epoch, on a thread of its own
    while the run measures; `finish` waits for one under way and gives the table's columns."""

    def __init__(self, control, scenario, configs: dict[str, AgentConfig], epoch: float,
                 seed: int = 0, records_dir: Callable[[str], Path] | None = None):
        from workloads.migration.schedule import migration_starts

        self.control = control
        # `within_window` adds a phase in [0, window) to `at`, drawn as the model draws it.
        starts = migration_starts(getattr(scenario, "migrations", None) or [],
                                  lambda operator: _window_period(configs, operator), seed)
        self.plans = sorted(((start, plan) for plan, start in starts),
                            key=lambda timed: timed[0])
        self.settings = getattr(scenario, "migration", None)
        self.configs = configs
        # A Spark query moves by emu.spark_migration, copying between nodes' records folders.
        self.spark = {op.name for config in configs.values() for op in config.operators
                      if op.engine == "spark"}
        self.records_dir = records_dir
        self.epoch = epoch
        self.records: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="foglab-migrations",
                                        daemon=True)

    def start(self) -> None:
        if self.plans:
            self._thread.start()

    def _source(self, operator: str) -> str:
        nodes = [node for node, config in self.configs.items()
                 if any(op.name == operator for op in config.operators)]
        if len(nodes) != 1:
            raise EmuError(f"migration of {operator!r}: it runs on {len(nodes)} nodes "
                           f"({', '.join(nodes) or 'none'}); say which with 'from'")
        return nodes[0]

    def _run(self) -> None:
        from emu.migration import MigrationRecord, migrate

        where: dict[str, str] = {}  # operator -> its node now
        for number, (at, plan) in enumerate(self.plans):
            # One due already (the one before ran late: a Spark query's move takes minutes on
            # a busy host) runs even once the run's time is up; a later one does not.
            due = self.epoch + at
            if time.time() < due and self._stop.wait(due - time.time()):
                return
            strategy = plan.strategy or getattr(self.settings, "strategy", "pause_transfer")
            try:
                source = plan.source or where.get(plan.operator) or self._source(plan.operator)
                record = migrate(self.control, plan.operator, source, plan.target, strategy,
                                 self.settings, record_id=number, records=self.records_dir,
                                 engine="spark" if plan.operator in self.spark else "python")
            except Exception as error:  # noqa: BLE001 - recorded, the run goes on
                record = MigrationRecord(number, plan.operator, strategy, plan.source or "",
                                         plan.target, time.time(), time.time(),
                                         status="failed", error=str(error))
            if record.status == "done":
                where[plan.operator] = plan.target
            self.records.append(record)

    def finish(self) -> list:
        """Wait for a migration under way; the records of all (emu.migration)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.records


def _settle(result, step: str, failed: dict[str, str]) -> None:
    """A command's outcome for the run: a node that refused it stops the run (a bug or a bad
    config, not a fault); one that did not answer is failed, the run goes on without it."""
    if result.failed:
        raise EmuError(f"{step} failed: {result.summary()}")
    for node in result.missing:
        if node not in failed:
            failed[node] = (f"no answer to {step} within {result.duration:.0f} s; its "
                            "container was running")


def _measure(cluster, status: dict, run: Timing, epoch: float, progress,
             health: Health, check=lambda: None) -> tuple[dict[str, dict], dict]:
    """Sample nodes and links until the run's end: the `nodes` and `links` columns, and the
    fidelity sampler's facts (what it could measure on this host: emu.fidelity)."""
    sampler = NodeSampler.of_cluster(cluster.plan, status, epoch)
    relays = getattr(cluster.links, "relays", None)  # a RelaySet; netem runs no relay
    fidelity = sampler.watch(lag=relays.lag if relays is not None else None)
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
        health.poll()
        check()  # a fault of the schedule that failed stops the run (emu.faults)
        progress(min(now - epoch, run.duration))
    return {"nodes": sampler.rows, "links": links}, fidelity.facts()


def _spark_standbys(control, scenario, configs: dict[str, AgentConfig],
                    records_dir: Callable[[str], Path]) -> list[Path]:
    """Ask the targets of the Spark queries' scheduled moves for their standbys (a minute or
    more to warm: from before the epoch, a move finds its standby warm); the files that say
    each is warm (emu.spark_migration.standbys_ahead)."""
    plans = list(getattr(scenario, "migrations", None) or [])
    spark = {op.name for config in configs.values() for op in config.operators
             if op.engine == "spark"}
    if not any(plan.operator in spark for plan in plans):
        return []
    from emu.spark_migration import standbys_ahead

    return standbys_ahead(control, plans, configs, records_dir)


def _wait_spark_jobs(cluster, standbys: list[Path] = ()) -> None:
    """Wait until each Spark operator's query runs (its job touches `started`), and until the
    `standbys` are warm: one that is not by the deadline is left to its move (which waits for
    it, or fails and rolls back)."""
    jobs = [cluster.records_dir(node) / operator / "started"
            for node, operator in _spark_jobs(cluster)]
    deadline = time.monotonic() + SPARK_START_TIMEOUT_S
    while not all(path.exists() for path in [*jobs, *standbys]):
        if time.monotonic() > deadline:
            late = [p for p in jobs if not p.exists()]
            if not late:
                return
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


def _drain_spark_jobs(cluster, end: float, dead: set[str],
                      moved: list = ()) -> dict[str, float | None]:
    """Wait until each Spark operator's source has handed Spark every message that reached
    its node (its micro-batches' `read` offset); per operator, the seconds after the run's
    end that took, or None if it did not catch up within SPARK_DRAIN_TIMEOUT_S or its node
    is dead. The messages table measures delivery to the node; this measures Spark's lag
    behind it. A query `moved` (emu.spark_migration) is followed: its last job's offset
    counts the messages of every node it read on (its journal went with it)."""
    from emu.spark_migration import places

    where = places(list(moved))
    chains = {(n, o): where.get(o, [(n, o)]) for n, o in _spark_jobs(cluster)}
    pending = {job: chain for job, chain in chains.items() if chain[-1][0] not in dead}
    caught_up: dict[str, float | None] = {f"{n}/{o}": None for n, o in chains}
    deadline = time.monotonic() + SPARK_DRAIN_TIMEOUT_S
    while pending and time.monotonic() < deadline:
        for (node, operator), chain in list(pending.items()):
            last, work = chain[-1]
            if _last_read(cluster.records_dir(last) / work / "progress.jsonl") >= _distinct_ids(
                    *{cluster.records_dir(n) / "received.csv" for n, _ in chain}):
                caught_up[f"{node}/{operator}"] = round(time.time() - end, 2)
                del pending[node, operator]
        time.sleep(0.5)
    return caught_up


def _last_read(path: Path) -> int:
    lines = path.read_text().splitlines() if path.exists() else []
    reads = [json.loads(line).get("read") for line in lines if line.strip()]
    return max((r for r in reads if r is not None), default=0)


def _distinct_ids(*paths: Path) -> int:
    """Distinct message ids (the first column) of CSVs with a header (the agent flushes them
    every second). Distinct: QoS 1 is at least once, and the node's session and the Spark
    source's each get their own copies again after a reconnection (the source's journal
    drops most of its own), so rows would count copies Spark never reads."""
    ids: set[bytes] = set()
    for path in paths:
        if path.exists():
            with path.open("rb") as rows:
                next(rows, None)
                ids.update(row.split(b",", 1)[0] for row in rows if row.strip())
    return len(ids)


def _stop_agents(api, containers: dict[str, str], failed: dict[str, str]) -> None:
    """SIGTERM every agent at once, then wait for each: they flush records on the way out.

    A container already dead or removed is no error (its records are what it flushed); one
    that does not stop within STOP_TIMEOUT_S is failed, and `down` kills it."""
    from docker.errors import APIError, NotFound

    signalled = {}
    for agent, container in containers.items():
        try:
            api.kill(container, signal="SIGTERM")
        except NotFound:
            failed.setdefault(agent, "its container was removed before the run's end")
            continue
        except APIError as error:  # 409: the container is not running
            failed.setdefault(agent, "its container was not running at the run's end: "
                              f"{error.explanation or error}")
            continue
        signalled[agent] = container
    for agent, container in signalled.items():
        try:
            api.wait(container, timeout=STOP_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - the SDK raises the transport's errors
            failed.setdefault(agent, f"did not stop within {STOP_TIMEOUT_S} s of SIGTERM "
                              f"({error}); rows after its last flush are lost")


def _trim_cut_lines(root: Path) -> None:
    """Drop a last line cut short in every node's CSV records (emu.agent.records)."""
    from emu.agent.records import trim_cut_lines

    for directory in root.iterdir():
        if directory.is_dir():
            trim_cut_lines(directory)


def _spark_progress(root: Path) -> dict[str, list]:
    """Each Spark operator's micro-batch progress, by node and operator."""
    found = {}
    for path in sorted(root.glob("*/*/progress.jsonl")):
        lines = path.read_text().splitlines()
        found[f"{path.parent.parent.name}/{path.parent.name}"] = [
            json.loads(line) for line in lines if line.strip()]
    return found
