"""The nemesis's scenarios: each an emu experiment with a promise and a fault envelope.

A scenario is one of the emulation's promise-bearing features on a small cluster (a few
devices, two or three gateways, a broker, ZooKeeper where the feature needs it), its
`Promise` (what the checker must find in every run's history) and its envelope: the
`Draw`s a schedule may take for it (experiments.nemesis.schedule), the scenario's own
`scenario.faults` kinds (workloads.faults) and the host-level actions the nemesis performs
itself (experiments.nemesis.actions). `essential` draws are the feature's own fault (one of
them is in every schedule: the broker restart of `broker_restart`, the crash of
`recovery`); `extras` are what the promise claims to survive besides.

The YAML texts copy the shapes of the emu tests that run these features
(tests/emu_run/test_faults.py, test_recovery.py, test_migration_run.py,
test_parallel_run.py, test_replication.py, test_broker_scaling.py); `experiment_document`
fills in the run's topology name, duration, seed and faults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topologies.documents import dump, load_text

# Host-level actions (experiments.nemesis.actions), beside workloads.faults.KINDS.
HOST_KINDS = ("pause", "cpu_hog", "disk_burst", "broker_restart")
SCENARIO_KINDS = ("crash", "restart", "partition", "delay", "loss", "slow")
# Every fault and action ends this long before the run does: with the run's drain, what a
# fault held back (a QoS 1 message a paused broker or a cut link kept) arrives before the
# records are read, so an unheard reading is lost, not in flight.
QUIET_END_S = 6.0
EARLIEST_S = 3.0  # the devices and sessions settle first
MAX_DURATION_S = 60.0


@dataclass(frozen=True)
class Draw:
    """One kind of fault a schedule may draw: `kind` (a workloads.faults kind or a host
    action), its possible `targets` (nodes; a link as "a>b"; a partition as "a|b"), how long
    it lasts (`span`, s, uniform), and when: anywhere in the run, or at the scenario's
    migration (`anchor` "move") plus an `offset` (s, uniform). `forever`: the chance a crash
    lasts to the run's end (no `for`). `params`: the kind's parameter ranges (delay's
    latency, loss's rate, slow's factor: (low, high))."""

    kind: str
    targets: tuple[str, ...] = ()
    span: tuple[float, float] = (1.0, 3.0)
    anchor: str | None = None
    offset: tuple[float, float] = (0.0, 0.0)
    forever: float = 0.0
    params: tuple[tuple[str, tuple[float, float]], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in SCENARIO_KINDS + HOST_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}")
        if self.kind not in ("cpu_hog", "disk_burst") and not self.targets:
            raise ValueError(f"a {self.kind} needs targets")


@dataclass(frozen=True)
class Promise:
    """What every run of a scenario must show (experiments.nemesis.checker checks it).

    `streams`: the QoS 1 streams whose readings must each reach the pipeline's sink (every
    reading sent within the run's duration, not dropped by its device's radio) - none
    lost; `duplicated`: and none twice; `ordered`: each device's readings received in the
    order sent; `windows`: operators whose window outputs must cover every input once
    (serial numbers without gap, overlap or step back); `migrations`: the statuses each
    scheduled migration may end with, its lost, duplicates and reordered 0; `recovered`:
    each crashed node's operator re-placed (a recoveries row with a target) with lost 0."""

    streams: tuple[str, ...]
    duplicated: bool = True
    ordered: bool = False
    windows: tuple[str, ...] = ()
    migrations: tuple[str, ...] = ()
    recovered: bool = False

    def describe(self) -> str:
        parts = ["lost 0 at QoS 1"]
        if self.duplicated:
            parts.append("duplicated 0")
        if self.ordered:
            parts.append("in order per device while a move goes on")
        if self.windows:
            parts.append(f"windows of {', '.join(self.windows)} cover every input once")
        if self.migrations:
            parts.append(f"each migration {' or '.join(self.migrations)}, nothing lost, "
                         "doubled or reordered")
        if self.recovered:
            parts.append("every crashed operator recovered, recoveries lost 0")
        return "; ".join(parts)


@dataclass(frozen=True)
class Scenario:
    """A promise-bearing feature on a small emu cluster: `text` the experiment (its topology
    named TOPOLOGY, filled in per run), `promise`, the envelope (`essential`: one of them in
    every schedule; `extras`: what else it may draw), the default `duration` (s), the least
    duration its schedule fits in, and `move_at`, the scheduled migration's time (s)."""

    name: str
    feature: str
    text: str
    promise: Promise
    essential: tuple[Draw, ...] = ()
    extras: tuple[Draw, ...] = ()
    duration: float = 22.0
    min_duration: float = 18.0
    move_at: float | None = None
    first_reading: float = 0.0  # s from the epoch to the devices' first reading (a `start`)
    outside: tuple[str, ...] = field(default=())  # what the envelope leaves out, and why

    def draws(self) -> tuple[Draw, ...]:
        return self.essential + self.extras


SCENARIOS: dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    if scenario.name in SCENARIOS:
        raise ValueError(f"scenario {scenario.name!r} is registered already")
    SCENARIOS[scenario.name] = scenario
    return scenario


def scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; scenarios: {', '.join(SCENARIOS)}") from None


def experiment_text(scenario: Scenario, topology: str, duration: float, seed: int,
                    faults: list[dict]) -> str:
    """`experiment_document` as the YAML text experiments.loader.parse_text reads."""
    return dump(experiment_document(scenario, topology, duration, seed, faults),
                sort_keys=False)


def experiment_document(scenario: Scenario, topology: str, duration: float, seed: int,
                        faults: list[dict]) -> dict:
    """The scenario's experiment as a mapping, for one run: its topology's name (unique per
    run, so the nemesis finds its containers by label), duration, seed and `scenario.faults`."""
    document = load_text(scenario.text)
    document["topology"]["name"] = topology
    document["run"].update({"backend": "emu", "duration": f"{duration:g}s", "seed": seed})
    if faults:
        document.setdefault("scenario", {})["faults"] = faults
    return document


# -- the scenarios ---------------------------------------------------------------------------

# Shared host-level and link draws (every scenario's extras name their own targets).
HOST_LOAD = (Draw("cpu_hog", span=(2.0, 5.0)), Draw("disk_burst", span=(2.0, 5.0)))
LINK_DELAY = (("latency", (0.02, 0.15)), ("jitter", (0.0, 0.02)))
LINK_LOSS = (("rate", (0.02, 0.15)),)
SLOWER = (("factor", (2.0, 6.0)),)

register(Scenario(
    name="broker_restart",
    feature="a broker restart at QoS 1 (persistent sessions)",
    text="""
name: nemesis-broker-restart
topology:
  name: TOPOLOGY
  nodes:
    - {name: a, kind: device, replicas: 3}
    - {name: b, kind: device, replicas: 3}
    - {name: gw, kind: gateway, replicas: 2, profile: rpi4}
    - {name: broker-1, kind: broker}
    - {name: cloud-1, kind: cloud_vm, profile: vm.small}
  links:
    - {from: a-*, to: gw-1, latency: 2ms}
    - {from: b-*, to: gw-2, latency: 2ms}
    - {from: gw-*, to: broker-1, latency: 5ms}
    - {from: broker-1, to: cloud-1, latency: 1ms}
workload:
  name: w
  streams: [{name: city, sources: [a-*, b-*], rate: 10/s, arrivals: periodic, size: 100B,
             qos: 1}]
pipeline:
  - {name: relay, task: passthrough, on: gateways, reads: city, writes: clean}
  - {name: sink, task: passthrough, on: cloud-1, reads: clean}
run: {backend: emu, duration: 20s, seed: 1, drain: 4s}
""",
    promise=Promise(streams=("city",), duplicated=False),
    essential=(Draw("restart", ("broker-1",), span=(0.5, 3.0)),
               Draw("broker_restart", ("broker-1",), span=(1.5, 1.5))),
    extras=(Draw("pause", ("broker-1", "cloud-1", "gw-1", "gw-2"), span=(0.5, 3.0)),
            Draw("delay", ("gw-1>broker-1", "gw-2>broker-1"), params=LINK_DELAY),
            Draw("loss", ("gw-1>broker-1", "gw-2>broker-1"), params=LINK_LOSS),
            Draw("slow", ("gw-1", "gw-2", "cloud-1"), params=SLOWER),
            Draw("partition", ("gw-2|broker-1", "cloud-1|broker-1"), span=(1.0, 4.0)),
            *HOST_LOAD),
    duration=20.0,
    outside=("a broker killed (SIGKILL, a `crash`): Mosquitto writes its persistence file "
             "only on SIGTERM (autosave every 1800 s), so the sessions and the QoS 1 messages "
             "it held die with it",
             "a crash of a gateway: its devices run in its agent and die with it",
             "duplicates: QoS 1 is at least once; a publisher sends again what the broker had "
             "not acknowledged before it went, and no sink drops a second copy"),
))

register(Scenario(
    name="recovery",
    feature="a crashed gateway's window operator recovered from its checkpoint",
    text="""
name: nemesis-recovery
topology:
  name: TOPOLOGY
  nodes:
    - {name: sensor, kind: device, replicas: 4}
    - {name: gw, kind: gateway, replicas: 3}
    - {name: broker, kind: broker}
  links:
    - {from: sensor-*, to: gw-2, latency: 2ms}
    - {from: gw-1, to: broker, latency: 5ms}
    - {from: gw-2, to: broker, latency: 2ms}
    - {from: gw-3, to: broker, latency: 8ms}
workload:
  name: w
  streams: [{name: s, sources: sensor-*, rate: 10/s, arrivals: periodic, size: 100B, qos: 1}]
pipeline:
  - {name: count, on: gw-1, reads: s, window: {size: 2s}, checkpoint: 2s}
scenario:
  recovery: {session_timeout: 2s}
run: {backend: emu, duration: 22s, seed: 1, drain: 4s}
""",
    promise=Promise(streams=("s",), recovered=True),
    essential=(Draw("crash", ("gw-1",), span=(3.0, 8.0), forever=0.5),),
    extras=(Draw("restart", ("broker",), span=(0.5, 2.0)),
            Draw("delay", ("gw-2>broker", "gw-3>broker"), params=LINK_DELAY),
            Draw("slow", ("gw-2", "gw-3"), params=SLOWER),
            Draw("pause", ("gw-3",), span=(0.5, 1.0)),
            *HOST_LOAD),
    duration=22.0,
    outside=("a crash of gw-2: the sensors run in its agent",
             "ZooKeeper paused or cut longer than a session (2 s): every agent looks dead",
             "a pause of an agent's container longer than its session: it is taken for "
             "crashed and its operator re-placed while it lives"),
))

register(Scenario(
    name="replication",
    feature="an operator replicated over its latency bound (a shared subscription)",
    text="""
name: nemesis-replication
topology:
  name: TOPOLOGY
  nodes:
    - {name: sensor, kind: device, replicas: 4}
    - {name: gw, kind: gateway, replicas: 3}
    - {name: broker, kind: broker}
  links:
    - {from: sensor-*, to: gw-1, latency: 2ms}
    - {from: gw-1, to: broker, latency: 2ms}
    - {from: gw-2, to: broker, latency: 3ms}
    - {from: gw-3, to: broker, latency: 9ms}
workload:
  name: w
  streams:
    - {name: s, sources: sensor-*, rate: 60/s, arrivals: periodic, size: 200B, qos: 1,
       start: 2s, shape: {kind: bursty, on: 6s, off: 60s, high: 1, low: 0.1}}
pipeline:
  - {name: work, task: kalman_filter, on: gw-1, reads: s, slo: 100ms}
scenario:
  replication: {interval: 1s, up: 2, down: 3, max: 2}
run: {backend: emu, duration: 22s, seed: 1, drain: 4s}
""",
    promise=Promise(streams=("s",)),
    first_reading=2.0,
    extras=(Draw("restart", ("broker",), span=(0.5, 2.0)),
            Draw("pause", ("gw-2", "broker"), span=(0.5, 2.0)),
            Draw("delay", ("gw-1>broker", "gw-2>broker"), params=LINK_DELAY),
            Draw("slow", ("gw-1", "gw-2"), params=SLOWER),
            *HOST_LOAD),
    duration=22.0,
    outside=("a crash of gw-1: the sensors run in its agent",
             "a crash of a replica without scenario.recovery: what it took and had not "
             "recorded dies with it"),
))

MOVE = """
name: nemesis-STRATEGY
topology:
  name: TOPOLOGY
  nodes:
    - {name: sensor, kind: device, replicas: 4}
    - {name: gw, kind: gateway, replicas: 2}
    - {name: broker, kind: broker}
  links:
    - {from: sensor-*, to: gw-1, latency: 2ms}
    - {from: gw-*, to: broker, latency: 5ms}
workload:
  name: w
  streams: [{name: s, sources: sensor-*, rate: 10/s, arrivals: periodic, size: 100B, qos: 1}]
pipeline:
  - {name: count, task: passthrough, on: gw-1, reads: s, WINDOW}
scenario:
  migration: {strategy: STRATEGY, SETTINGS}
  migrations: [{at: ATs, operator: count, to: gw-2}]
run: {backend: emu, duration: 22s, seed: 1, drain: 4s}
"""


def _move(strategy: str, at: float, window: bool, settings: str = "") -> str:
    text = (MOVE.replace("STRATEGY", strategy).replace("AT", f"{at:g}")
            .replace(", SETTINGS", f", {settings}" if settings else ""))
    return text.replace(", WINDOW", ", window: {size: 2s}" if window else "")


# What a move survives: the broker restarted while it goes on (the nemesis's own, at the
# move), the target or source frozen briefly, slow links and CPUs, a loaded host.
MOVE_EXTRAS = (
    Draw("broker_restart", ("broker",), span=(1.5, 1.5), anchor="move", offset=(0.0, 1.5)),
    Draw("restart", ("broker",), span=(0.5, 2.0)),
    Draw("pause", ("gw-2", "gw-1"), span=(0.3, 1.5), anchor="move", offset=(-0.5, 1.0)),
    Draw("delay", ("gw-1>broker", "gw-2>broker"), params=LINK_DELAY),
    Draw("slow", ("gw-1", "gw-2"), params=SLOWER),
    *HOST_LOAD,
)
MOVE_OUTSIDE = ("a crash of gw-1: the sensors run in its agent (and without "
                "scenario.recovery the operator with it)",
                "a crash of the target after the move: no recovery is scheduled")

register(Scenario(
    name="pause_drain",
    feature="a stateless operator moved by pause and drain",
    text=_move("pause_drain", 8.0, window=False),
    promise=Promise(streams=("s",), ordered=True, migrations=("done",)),
    extras=MOVE_EXTRAS, move_at=8.0, outside=MOVE_OUTSIDE,
))

register(Scenario(
    name="pause_transfer",
    feature="a window count moved with its state through ZooKeeper",
    text=_move("pause_transfer", 8.0, window=True),
    promise=Promise(streams=("s",), ordered=True, windows=("count",), migrations=("done",)),
    extras=MOVE_EXTRAS, move_at=8.0, outside=MOVE_OUTSIDE,
))

register(Scenario(
    name="parallel",
    feature="a window count moved by parallel migration (S = 2)",
    text=_move("parallel", 6.0, window=True, settings="sync: 2"),
    promise=Promise(streams=("s",), windows=("count",), migrations=("done",)),
    extras=MOVE_EXTRAS, move_at=6.0, duration=26.0, min_duration=24.0,
    outside=MOVE_OUTSIDE + ("a checker that does not synchronise within its windows: the "
                            "move rolls back (failed), which the promise does not allow here",),
))

register(Scenario(
    name="rollback",
    feature="a move whose target crashes rolls back to its source",
    text=_move("pause_transfer", 8.0, window=True).replace("nemesis-pause_transfer",
                                                           "nemesis-rollback"),
    # A target frozen for less than a step's timeout (30 s) is waited for: the move may end
    # done. Either way nothing may be lost or doubled (a crash that lands after a done move
    # kills the operator with the target: its readings are lost, which the checker sees).
    promise=Promise(streams=("s",), ordered=True, windows=("count",),
                    migrations=("failed", "done")),
    # A crash may not begin before the move (validation wants its target up at its time):
    # the kill lands 0.2-0.4 s after it is asked, amid the move's steps. Or the target
    # frozen (SIGSTOP) from before the move until after its steps would have ended.
    essential=(Draw("crash", ("gw-2",), span=(3.0, 6.0), anchor="move", offset=(0.05, 0.4)),
               Draw("pause", ("gw-2",), span=(3.0, 6.0), anchor="move", offset=(-1.0, 0.0))),
    extras=(Draw("delay", ("gw-1>broker",), params=LINK_DELAY),
            Draw("slow", ("gw-1",), params=SLOWER),
            *HOST_LOAD),
    move_at=8.0,
    outside=("a crash that lands after the move is done: the operator dies with the target "
             "(no recovery here)",),
))

register(Scenario(
    name="broker_join",
    feature="a spare broker joins a saturated one (broker scaling)",
    text="""
name: nemesis-broker-join
topology:
  name: TOPOLOGY
  profiles:
    weak: {arch: amd64, cores: 1, clock: 2.4GHz, memory: 256MiB, speed: 0.02}
  nodes:
    - {name: a, kind: device, replicas: 3}
    - {name: b, kind: device, replicas: 3}
    - {name: gw, kind: gateway, replicas: 2, profile: vm.small}
    - {name: broker, kind: broker, replicas: 2, profile: weak}
    - {name: cloud, kind: cloud_vm, profile: vm.small}
  links:
    - {from: a-*, to: gw-1, latency: 1ms}
    - {from: b-*, to: gw-2, latency: 1ms}
    - {from: gw-*, to: broker-1, latency: 2ms}
    - {from: gw-1, to: broker-2, latency: 5ms}
    - {from: gw-2, to: broker-2, latency: 2ms}
    - {from: broker-1, to: broker-2, latency: 1ms}
    - {from: broker-*, to: cloud, latency: 2ms}
workload:
  name: w
  streams: [{name: s, sources: [a-*, b-*], rate: 50/s, arrivals: periodic, size: 64B, qos: 1}]
pipeline:
  - {name: count, on: cloud, reads: s}
scenario:
  broker_scaling:
    - {broker: broker-1, spare: broker-2, bound: 20ms, interval: 1s, probe: 100ms, up: 2,
       share: 0.5}
run: {backend: emu, duration: 20s, seed: 1, drain: 5s}
""",
    promise=Promise(streams=("s",)),
    extras=(Draw("pause", ("cloud", "broker-2"), span=(0.5, 2.0)),
            Draw("delay", ("gw-1>broker-1", "gw-2>broker-2"), params=LINK_DELAY),
            Draw("slow", ("cloud",), params=SLOWER),
            *HOST_LOAD),
    duration=20.0,
    outside=("order: a device moved to the spare overtakes what broker-1 still holds",
             "a restart of a broker at 2 % of a core: its persistence file is written on "
             "SIGTERM within the engine's 10 s grace or not at all"),
))
