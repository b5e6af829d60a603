"""An experiment run on real containers, in real time, into the simulator's tables.

One run: plan the cluster from the topology with each agent's drivers and operators
(`emu.cluster.deployment`), bring it up, wait until every agent has registered in ZooKeeper, then
start every driver at one common epoch (a `set run.epoch` request to all agents, so no device
speaks before every sink listens), run for the experiment's duration while sampling CPU and
memory (cgroups), link counters (relays) and what could distort the figures (the host's CPU
pressure, the relays' timer lag, CPU throttling: emu.host.fidelity, judged in `facts.fidelity`),
wait `run.drain` for messages in flight, stop the agents with SIGTERM (they flush their
records), read the records back (`emu.run.tables`) and take the cluster down. Whatever fails, the
cluster is removed.

Faults. A run keeps what it measured through a node that dies: the containers' states (one
engine call a second: emu.run.health) tell which agents are dead; a command stops waiting for them
and they go into `Emulation.failed` (node -> what happened), as does an agent that stops
answering; the run goes on with the others, and their tables hold everything received. A
dead node's records are on the host (its records folder is bind-mounted), so what it had
flushed counts: the loss at a kill is at most the agent's last flush interval
(`emu.agent.records.FLUSH_INTERVAL`, 1 s). A broker or ZooKeeper server that goes away and
comes back (a restart) is an outage in the facts, not a failure: agents and the controller
keep persistent sessions and reconnect (emu.agent.mqtt), so a restart loses only the QoS 0
messages of its outage; one still down at the end is failed.

Time dilation (`Timing.dilation`, K; emu.agent.timebase). A run made for K has one time base:
the agents' clocks, the epoch, every table and every feature's timer are emulated time, which
runs K times slower than the host's; the cluster installs its links and the services' timers
dilated (emu.cluster.plan). The run's duration, samples and drain last K times longer on the
host, and each node gets K times the host CPU per emulated second. The facts keep K
(`dilation`) and, from the caller, how it was chosen (`dilation_choice`).

The scenario's features (faults, recovery, replication, broker scaling, broadcasts,
migrations: emu.features) each go through one life cycle the run drives: prepared before the
cluster is planned, started at the epoch, polled at each sample, stopped when the run's time
is over, asked for their tables and facts once the records are read. A caller adds features
of its own the same way (the hybrid backend couples its model so).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from emu.agent.timebase import UNDILATED, TimeBase
from emu.cluster.deployment import agent_configs
from emu.engines.base import NodeGone
from emu.errors import EmuError
from emu.features import FEATURES
from emu.features.base import Feature, Run, Setup, wanted
from emu.host.accounting import account
from emu.host.accounting import begin as begin_accounting
from emu.host.fidelity import assess
from emu.host.metrics import NodeSampler
from emu.live.agents import next_epoch, wait_agents_registered
from emu.run.health import Health, cluster_states
from emu.run.records_watch import RecordsWatch
from emu.run.spark_jobs import drain_spark_jobs, spark_jobs, spark_progress, wait_spark_jobs
from emu.run.tables import run_messages, windows_table
from topologies.model import Topology
from topologies.terminal import stop_on_signals
from workloads.pipeline import OperatorSpec
from workloads.spec import WorkloadSpec

COMMAND_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20


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
    """How long a run lasts (s), how often it samples, how long it waits for stragglers, all
    in emulated seconds, and its time dilation K (emu.agent.timebase): each of those seconds
    lasts K seconds of the host's clock."""

    duration: float
    sample: float = 1.0
    drain: float = 1.0
    dilation: float = 1.0


@dataclass
class Emulation:
    """Columns per result table (see experiments.schema), facts for the manifest, and the
    nodes that failed during the run (node -> what happened)."""

    tables: dict[str, dict]
    facts: dict
    failed: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    """What to emulate: the experiment's topology, workload, pipeline, timing and seed, and its
    scenario (key -> spec, the keys it sets: emu.features runs them). `follow`: where follow
    operators' instances start; `load`: devices whose readings the caller publishes from the
    host, which their gateways' agents take from their load topics (both as
    emu.cluster.deployment.agent_configs takes them); `facts`: the caller's, added to the run's (how
    the dilation was chosen). `closed`: run.access closed (emu.cluster.access)."""

    topology: Topology
    workload: WorkloadSpec
    pipeline: list[OperatorSpec]
    timing: Timing
    seed: int
    scenario: Mapping[str, object] = field(default_factory=dict)
    follow: dict | None = None
    load: Sequence = ()
    facts: dict = field(default_factory=dict)  # the caller's, for the run's facts
    engine: str = "docker"  # run.engine: emu.engines.ENGINES
    closed: bool = False  # the brokers and ZooKeeper take only the run's own clients
    # The most the nodes' records may take on the host (bytes; None: emu.run.records_watch's
    # default, FOGLAB_RECORDS_LIMIT or half the free disk): past it the run stops.
    records_limit: int | None = None
    swarm_encrypted: bool = False  # run.swarm_encrypted: emu.engines.engine_options
    tls: bool = False  # run.tls: with closed, the brokers and ZooKeeper speak TLS only


def scenario_features(scenario: Mapping[str, object]) -> list[Feature]:
    """The features a scenario asks for, in emu.features' order (those `always` there too)."""
    # Other keys (the migration settings, a hybrid run's policy and mobility) are read by the
    # features that need them, or by the caller.
    return [cls(scenario.get(key)) for key, cls in FEATURES.items()
            if cls.always or wanted(scenario.get(key))]


def emulate(request: Request, progress=lambda seconds: None, records: Path | None = None,
            features: Sequence[Feature] = ()) -> Emulation:
    """Run the experiment on a cluster made for it, and remove the cluster whatever happens.

    `progress(seconds)` hears the run's time; `progress.stage(text)`, if it has one, the step
    (containers, registration, running, drain). `records`: where nodes' records are kept
    (default: a scratch folder removed at the end). `features`: more features (emu.features.
    base.Feature) beside the scenario's, started after them (the hybrid backend's coupling).
    """
    from emu.cluster.plan import plan_cluster
    from emu.engines import engine_class, engine_options

    active = [*scenario_features(request.scenario), *features]
    clock = TimeBase.starting_now(request.timing.dilation)
    setup = Setup(request.topology, request.workload, request.pipeline, request.timing,
                  request.seed, dict(request.scenario), clock=clock)
    for feature in active:
        feature.prepare(setup)
    configs = agent_configs(request.topology, request.workload, request.pipeline, request.seed,
                            0.0, moving=setup.moving, hold=True, follow=request.follow,
                            load=request.load, session_timeout=setup.session_timeout,
                            fence=setup.fence,
                            clock=clock)
    name = f"run-{int(time.time() * 1000) % 10**10:010d}"
    stage = getattr(progress, "stage", lambda text: None)

    def up_progress(step: str, done: int, total: int, detail: str) -> None:
        stage(f"{step} {done}/{total}" if total else step)

    engine = engine_class(request.engine)
    plan = plan_cluster(request.topology, name, agents=configs, spares=setup.spares,
                        dilation=clock.dilation, closed=request.closed,
                        tls=request.tls, live_acl=engine.live_acl)
    for check in setup.checks:
        check(plan, configs)
    cluster = engine(
        plan, records=records, seed=request.seed, progress=up_progress,
        **engine_options(request.engine, swarm_encrypted=request.swarm_encrypted))
    # SIGTERM and SIGHUP stop a run as Ctrl-C does, so its containers go with it.
    with stop_on_signals():
        try:
            cluster.up()
            return _run(cluster, request, configs, active, progress, clock)
        finally:
            cluster.down()


def controller(cluster, status: dict, clock: TimeBase = UNDILATED):
    """The run's controller (emu.control.commands): a session on every broker, each agent's requests
    through the broker the plan gives it (brokers are not bridged); its timeouts and reply
    times on the run's clock."""
    from emu.control.commands import Controller

    # One id for the run: a reconnection resumes the sessions, with their queued replies.
    return Controller.of_plan(cluster.plan, status, clock=clock, grants=cluster.grants(),
                              client_id=f"foglab-controller-{cluster.name}").connect()


def _register(cluster, status: dict, agents: list[str], stage) -> None:
    stage(f"{len(agents)} agents registering")
    try:
        # As `foglab emu up --experiment` does (emu.live.agents), an exited agent giving up early.
        wait_agents_registered(cluster, status, agents,
                               check=lambda: _agents_alive(cluster, agents))
    except TimeoutError as error:
        raise EmuError(f"agents did not register: {error}") from None


def _run(cluster, request: Request, configs: dict, active: list[Feature],
         progress, clock: TimeBase) -> Emulation:
    stage = getattr(progress, "stage", lambda text: None)
    status = {s.node: s for s in cluster.status()}
    agents = [a.node for a in cluster.plan.agents()]
    services = [s.node for s in cluster.plan.services() if s.role != "idle"]
    health = Health(lambda: cluster_states(cluster, services), agents, services,
                    timebase=clock)
    _register(cluster, status, agents, stage)
    control = controller(cluster, status, clock)
    run = Run(cluster, control, status, request.topology, request.workload, configs, health,
              request.timing, request.seed, {f.key: f for f in active}, clock=clock)
    try:
        _begin(run, agents, stage)
        # Where the host's CPU goes from the epoch to the run's end (emu.host.accounting).
        began = begin_accounting(cluster)
        relayed = cluster.links.counters()
        watch = RecordsWatch(cluster.records_root, request.records_limit)
        tables, fidelity = _during(run, progress, watch.poll)
        containers, since = began or (None, None)
        host_cpu = account(cluster, since, containers=containers)
        # Devices fall silent at the end, as the simulator's sources do; what is under way
        # still arrives during the drain.
        live = [a for a in agents if a not in health.failed]
        stopped = control.set_rate(live, 0.0, timeout=COMMAND_TIMEOUT_S, gone=health.dead)
        _settle(stopped, "stopping the drivers (set publish.rate 0)", health.failed)
        health.finish()
        reconnects = control.reconnects
    finally:
        control.close()
    facts = _after(run, agents, stage)
    if stalls := cluster.links.stalls(relayed):  # the drain's included, as on the model
        facts["retransmissions"] = stalls
    facts.update(cluster.links.facts())
    if departed := cluster.departed():  # a swarm's nodes that left: their nodes failed
        facts["hosts_left"] = {host: round(clock.emulated(when) - run.epoch, 2)
                               for host, when in sorted(departed.items())}
    facts.update(request.facts, controller_reconnects=reconnects, dilation=clock.dilation,
                 host_cpu=host_cpu, fidelity=assess(tables["nodes"], request.timing.sample,
                                                    fidelity, host_cpu=host_cpu))
    for feature in run.features.values():
        feature.results(run, tables, facts)
    return Emulation({"messages": run.messages, "windows": run.windows, **tables}, facts,
                     dict(health.failed))


def _begin(run: Run, agents: list[str], stage) -> None:
    """Wait for the Spark queries and what features warm, then start every driver at one
    epoch, then the features."""
    standbys = [path for feature in run.features.values() for path in feature.warm(run)]
    if spark_jobs(run.cluster) or standbys:
        stage("Spark queries starting")
    wait_spark_jobs(run.cluster, standbys)
    run.epoch = run.health.epoch = next_epoch(run.clock)
    started = run.control.send(agents, "set", {"key": "run.epoch", "value": run.epoch},
                               timeout=COMMAND_TIMEOUT_S, broadcast=True, gone=run.health.dead)
    _settle(started, "starting the drivers (set run.epoch)", run.health.failed)
    if len(started.replies) == 0:
        raise EmuError(f"starting the drivers failed on every node: {started.summary()}")
    stage("running")
    for feature in run.features.values():
        feature.start(run, run.epoch)


def _during(run: Run, progress, watch=lambda: None) -> tuple[dict[str, dict], dict]:
    """Measure until the run's end, polling the features and the records' size (`watch`:
    emu.run.records_watch, records past their limit stop the run); stop the features whatever
    happens (then poll once more: a fault that failed while stopping stops the run)."""
    features = list(run.features.values())

    def poll() -> None:
        watch()
        for feature in features:
            feature.poll()

    try:
        measured = _measure(run.cluster, run.status, run.timing, run.epoch, progress,
                            run.health, poll, run.clock)
    finally:
        for feature in features:
            feature.stop()
    poll()
    run.moved = [record for feature in features for record in feature.migrations()]
    return measured


def _after(run: Run, agents: list[str], stage) -> dict:
    """Drain, stop the agents, read their records into `run` (messages, windows); the facts
    every run has."""
    cluster, timing, failed = run.cluster, run.timing, run.health.failed
    stage(f"draining for {timing.drain:g} s")
    run.clock.sleep(timing.drain)
    caught_up = drain_spark_jobs(cluster, run.epoch + timing.duration, set(failed), run.moved,
                                 now=run.clock.now)
    _stop_agents(cluster, agents, failed)
    stage("reading the records")
    _trim_cut_lines(cluster.records_root)
    run.messages, counts = run_messages(cluster.records_root, cluster.plan, run.epoch,
                                        timing.duration, _moves(run), _handovers(run))
    run.windows = windows_table(cluster.records_root, run.epoch, timing.duration)
    return {**cluster.facts, "messages": counts, "emitted": counts["emitted"],
            "emitted_by_device": counts["emitted_by_device"], "epoch": run.epoch,
            "spark": spark_progress(cluster.records_root), "spark_caught_up": caught_up,
            "outages": run.health.facts()}


def _moves(run: Run) -> dict[str, list[str]]:
    """Operator -> the nodes besides its deployment where its input may have arrived."""
    moves: dict[str, list[str]] = {}
    for record in run.moved:
        # Every move's target: one rolled back (or still under way at a hybrid run's end)
        # may have taken some of the operator's input before it gave the session back.
        moves.setdefault(record.operator, []).append(record.target)
    for feature in run.features.values():  # re-placed after a crash, replicas
        for operator, nodes in feature.moves().items():
            moves.setdefault(operator, []).extend(nodes)
    return moves


def _handovers(run: Run) -> dict[str, list[str]]:
    """Device -> the gateways it was handed over to (a hybrid run's), where it entered too."""
    handovers: dict[str, list[str]] = {}
    for feature in run.features.values():
        for device, gateways in feature.handovers().items():
            handovers.setdefault(device, []).extend(gateways)
    return handovers


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
             health: Health, check=lambda: None,
             clock: TimeBase = UNDILATED) -> tuple[dict[str, dict], dict]:
    """Sample nodes and links until the run's end: the `nodes` and `links` columns, and the
    fidelity sampler's facts (what it could measure on this host: emu.host.fidelity). Every time
    here is the run's clock's (`epoch` too); a sample waits K times its span on the host."""
    # A task on another node of a swarm has its cgroup there: sampled through its engine.
    sampler = NodeSampler.of_cluster(cluster.plan, status, epoch, clock=clock,
                                     control=cluster.node)
    shaper = cluster.links
    fidelity = sampler.watch(lag=shaper.lag if shaper is not None and shaper.measures_lag
                             else None)
    links = {k: [] for k in ("t", "link", "src", "dst", "bytes", "utilisation", "latency")}
    counters = cluster.links.counters()
    end = epoch + run.duration
    while (now := clock.now()) < end:
        clock.sleep(min(run.sample, end - now))
        host_now = time.time()
        now = clock.emulated(host_now)
        sampler.sample(host_now)
        fresh = cluster.links.counters()
        _links_rows(counters, fresh, cluster.plan, now - epoch, run.sample, links)
        counters = fresh
        health.poll()
        check()  # a feature's failure stops the run (a fault the engine refused)
        progress(min(now - epoch, run.duration))
    return {"nodes": sampler.rows, "links": links}, fidelity.facts()


def _stop_agents(cluster, agents: list[str], failed: dict[str, str]) -> None:
    """SIGTERM every agent at once, then wait for each: they flush records on the way out.

    A container already dead or removed is no error (its records are what it flushed); one
    that does not stop within STOP_TIMEOUT_S is failed, and `down` kills it."""
    signalled = []
    for agent in agents:
        node = cluster.node(agent)
        try:
            node.kill("SIGTERM")
        except NodeGone:
            failed.setdefault(agent, "its container was removed before the run's end")
            continue
        except Exception as error:  # noqa: BLE001 - NodeNotRunning, or what the engine said
            failed.setdefault(agent, "its container was not running at the run's end: "
                              f"{getattr(error, 'explanation', None) or error}")
            continue
        signalled.append((agent, node))
    for agent, node in signalled:
        try:
            node.wait(STOP_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - the SDK raises the transport's errors
            failed.setdefault(agent, f"did not stop within {STOP_TIMEOUT_S} s of SIGTERM "
                              f"({error}); rows after its last flush are lost")


def _trim_cut_lines(root: Path) -> None:
    """Drop a last line cut short in every node's CSV records (emu.agent.records)."""
    from emu.agent.records import trim_cut_lines

    for directory in root.iterdir():
        if directory.is_dir() and not directory.is_symlink():
            trim_cut_lines(directory)
