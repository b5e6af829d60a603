"""The scenario's fault schedule (`scenario.faults`) injected into an emulated run's containers.

`workloads.faults.resolve` turns the schedule as written into what each fault touches and when
(the same function the validation and the model call); `check` makes sure the cluster has what
each fault acts on, before anything starts; `FaultSchedule` then runs on a thread of its own
beside the run's measurements: at each fault's time after the run's epoch it acts, and at the
end of the fault's `for` it heals, in time order, recording the time (s from the epoch) at
which each action had been carried out. Times are the run's (emu.agent.timebase): at dilation
K a fault `at: 10s` acts at the host time clock.host(epoch + 10), a `for` of d lasts K*d host
seconds, and the table's times are emulated, as the agents' records are. What each kind does:

- crash NODE: the container is killed (SIGKILL, `docker kill`); healed, it is started again
  (`docker start`). For good: it stays down. A gateway's or cloud VM's agent comes back with
  it (emu.engines.docker.engine.Cluster.revive, forked by the zygote again where it was): it goes on
  at the run's epoch, its devices emitting on the run's schedule from then on, its messages
  numbered apart from its first incarnation's, its operators started afresh (their state was
  lost with the node; an instance with a persistent session takes what the broker held for
  it) except those that left the node meanwhile (re-placed by recovery, migrated). From the
  kill to its return the run counts it dead (`emu.run.health.Health`); a broker or ZooKeeper server
  comes back whole (its outage is in the manifest's `outages`).
- restart BROKER: the broker is stopped (SIGTERM, as `docker stop`) and started again after
  `for` (its downtime); agents and the controller hold persistent sessions and reconnect
  (emu.agent.mqtt), so QoS 1 messages cross the restart.
- slow NODE: the container's CPU limit (NanoCpus) is divided by `factor`, restored after.
- delay LINK, loss LINK: every emulated path (a client's connection to a service, whose
  topology path crosses the link) is reshaped: latency added, jitters added in variance, loss
  rates combined; restored after. On relays a lost chunk costs a retransmission timeout
  (emu.links.relay), on netem the kernel drops packets.
- partition [A, B]: every path with a node of A and a node of B is cut: netem drops everything
  (loss 1); a relay holds what it reads until the partition heals (its latency is the time left
  plus its own, refreshed every HOLD_STEP_S), so nothing crosses while it lasts and TCP's bytes
  arrive after, as retransmitted; a connection whose peer gives up (MQTT keepalive, ZooKeeper
  session) is closed as on a real cut.

Faults on one link compose (a delay and a partition at once). A fault that the engine refuses
stops the schedule with an error naming the fault (`scenario.faults[i]`) and what the engine
said; the run raises it at its next sample, and its clean-up removes the cluster.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from emu.agent.timebase import UNDILATED, TimeBase
from emu.features.base import Feature
from emu.links.spec import LinkShape
from workloads.faults import Injected

HOLD_STEP_S = 0.1  # a partition's hold on a relay is refreshed this often (emulated s)
HEAL_GRACE_S = 1.0  # stop's SIGTERM grace for a broker restart


class FaultError(RuntimeError):
    """A fault could not be injected or healed: names scenario.faults[i] and the cause."""


def _name(fault: Injected) -> str:
    return f"scenario.faults[{fault.index}] ({fault.describe()})"


# -- what the faults act on --------------------------------------------------------------------

class ClusterEngine:
    """The running cluster as the faults act on it (emu.engines.base.Engine): containers by
    node through the engine's node control (`cluster.node`), link shapes through its links."""

    def __init__(self, cluster, revival: Callable[[str], dict] | None = None,
                 revived: Callable[[str], None] = lambda node: None) -> None:
        self.cluster = cluster
        self.shaper = cluster.links.shaper
        # node -> what its agent starts again with (emu.agent.config.revived), and told once
        # it is back; None: agents do not come back.
        self.revival = revival
        self.revived = revived

    def kill(self, node: str) -> None:
        self.cluster.node(node).kill()

    def start(self, node: str) -> None:
        if self.revival is not None and self.cluster.plan.containers[node].role == "agent":
            self.cluster.revive(node, self.revival(node))
            self.revived(node)
            return
        self.cluster.node(node).start()

    def stop(self, node: str) -> None:
        self.cluster.node(node).stop(grace=HEAL_GRACE_S)

    def cpus(self, node: str) -> int:
        """The container's CPU limit in nano CPUs, as it was made (0: none)."""
        return self.cluster.plan.containers[node].nano_cpus or 0

    def set_cpus(self, node: str, nano_cpus: int) -> None:
        self.cluster.node(node).set_cpus(nano_cpus)

    def paths(self) -> dict[tuple[str, str], tuple[str, ...]]:
        return {link.key: link.path for link in self.cluster.plan.links}

    def shape(self, key: tuple[str, str]) -> LinkShape:
        return self.cluster.links.shapes[key]

    def reshape(self, key: tuple[str, str], shape: LinkShape) -> None:
        self.cluster.links.reshape(key[0], key[1], shape)


def crossing(fault: Injected, paths: dict[tuple[str, str], tuple[str, ...]]) -> list:
    """The emulated paths (client, service) a link fault or a partition acts on."""
    if fault.kind == "partition":
        a, b = (set(group) for group in fault.groups)
        return [key for key, path in paths.items() if a & set(path) and b & set(path)]
    hops = {frozenset(link) for link in fault.links}
    return [key for key, path in paths.items()
            if any(frozenset(hop) in hops for hop in zip(path, path[1:], strict=False))]


def check(faults: list[Injected], containers: set[str],
          paths: dict[tuple[str, str], tuple[str, ...]]) -> None:
    """Before the cluster starts: every node a fault acts on has a container, and every link
    fault crosses an emulated path (else a FaultError naming the fault)."""
    for fault in faults:
        missing = [n for n in fault.nodes if n not in containers]
        if missing:
            raise FaultError(f"{_name(fault)}: {missing[0]} has no container in the emulation "
                             f"(a {fault.kind} acts on a gateway, broker or cloud VM's "
                             "container)")
        if fault.kind in ("delay", "loss") and not crossing(fault, paths):
            raise FaultError(f"{_name(fault)}: no emulated connection crosses "
                             f"{', '.join(f'{a} <> {b}' for a, b in fault.links)} (emu shapes "
                             "the paths from gateways and cloud VMs to brokers and ZooKeeper)")


# -- the schedule ------------------------------------------------------------------------------

@dataclass
class Record:
    """What happened to one fault: seconds from the epoch (the run's clock) at which it was in
    effect and healed (None: not yet, or for good)."""

    fault: Injected
    t_start: float | None = None
    t_end: float | None = None


def _combine(shape: LinkShape, fault: Injected, remaining: float, shaper: str) -> LinkShape:
    if fault.kind == "delay":
        return replace(shape, latency_s=shape.latency_s + fault.params["latency"],
                       jitter_s=math.hypot(shape.jitter_s, fault.params["jitter"]))
    if fault.kind == "loss":
        return replace(shape, loss=1 - (1 - shape.loss) * (1 - fault.params["rate"]))
    # partition
    if shaper == "netem":
        return replace(shape, loss=1.0)
    return replace(shape, latency_s=shape.latency_s + max(0.0, remaining))


class FaultSchedule:
    """Run `faults` (workloads.faults.Injected, times from `epoch`) on `engine` (ClusterEngine,
    or a fake in a unit test) on a thread: `start()`, `check()` at each sample (raises the
    first FaultError), `finish()` at the run's end (heals what is still in effect), then
    `columns()` (the faults table) and `facts()`. `timebase`: the run's (emu.agent.timebase);
    `epoch`, the faults' times and `clock` (its emulated clock by default) are emulated, and
    each wait lasts K times its span on the host."""

    def __init__(self, faults: list[Injected], engine, epoch: float,
                 clock: Callable[[], float] | None = None,
                 timebase: TimeBase = UNDILATED) -> None:
        self.engine = engine
        self.epoch = epoch
        self.timebase = timebase
        self.clock = clock or timebase.now
        self.records = [Record(f) for f in faults]
        # (time, heal before inject at one time, index): a node healed at t may fail again at t.
        self.events = sorted(
            [(f.t_start, 1, i) for i, f in enumerate(faults)]
            + [(f.t_end, 0, i) for i, f in enumerate(faults) if f.t_end is not None])
        self.error: FaultError | None = None
        self._open: dict[int, list] = {}  # fault index -> the paths it reshapes
        self._base: dict[tuple[str, str], LinkShape] = {}
        self._acting: dict[tuple[str, str], list[int]] = {}  # path -> faults on it, in order
        self._nano: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._paths: dict | None = None
        self._thread = threading.Thread(target=self._run, name="foglab-faults", daemon=True)

    # the thread

    def start(self) -> None:
        if self.events:
            self._thread.start()

    def _run(self) -> None:
        for t, inject, index in self.events:
            while True:
                now = self.clock() - self.epoch
                if now >= t:
                    break
                step = t - now
                if self._holding():
                    step = min(step, HOLD_STEP_S)
                if self.timebase.wait(self._stop, step):
                    return
                self._refresh_holds()
            if not self._act(index, bool(inject)):
                return
        # Holds still open (none once every partition has healed) are refreshed until the end.
        while self._holding() and not self.timebase.wait(self._stop, HOLD_STEP_S):
            self._refresh_holds()

    def _act(self, index: int, inject: bool) -> bool:
        record = self.records[index]
        with self._lock:
            if self._stop.is_set() and inject:
                return False
            try:
                (self._inject if inject else self._heal)(record.fault)
            except Exception as error:  # noqa: BLE001 - told to the run, which stops
                cause = getattr(error, "explanation", None) or str(error) or repr(error)
                self.error = FaultError(f"{_name(record.fault)}: "
                                        f"{'injecting' if inject else 'healing'} it failed: "
                                        f"{cause}")
                self._stop.set()
                return False
            when = round(self.clock() - self.epoch, 3)
            if inject:
                record.t_start = when
            else:
                record.t_end = when
        return True

    # the actions

    def _inject(self, fault: Injected) -> None:
        engine = self.engine
        if fault.kind == "crash":
            for node in fault.nodes:
                engine.kill(node)
        elif fault.kind == "restart":
            for node in fault.nodes:
                engine.stop(node)
        elif fault.kind == "slow":
            for node in fault.nodes:
                self._nano[node] = engine.cpus(node)  # restored after; 0: no limit
                cores = self._nano[node] or (os.cpu_count() or 1) * 10**9
                engine.set_cpus(node, max(10**6, int(cores / fault.params["factor"])))
        else:
            if self._paths is None:
                self._paths = engine.paths()
            keys = crossing(fault, self._paths)
            self._open[fault.index] = keys
            for key in keys:
                self._base.setdefault(key, engine.shape(key))
                self._acting.setdefault(key, []).append(fault.index)
                self._apply(key)

    def _heal(self, fault: Injected) -> None:
        engine = self.engine
        if fault.kind in ("crash", "restart"):
            for node in fault.nodes:
                engine.start(node)
        elif fault.kind == "slow":
            for node in fault.nodes:
                engine.set_cpus(node, self._nano.pop(node))
        else:
            for key in self._open.pop(fault.index, []):
                self._acting[key].remove(fault.index)
                self._apply(key)

    def _apply(self, key: tuple[str, str]) -> None:
        shape = self._base[key]
        now = self.clock() - self.epoch
        for index in sorted(self._acting[key]):
            fault = self.records[index].fault
            remaining = (fault.t_end or now) - now
            shape = _combine(shape, fault, remaining, self.engine.shaper)
        self.engine.reshape(key, shape)

    def _holding(self) -> bool:
        return self.engine.shaper != "netem" and any(
            self.records[i].fault.kind == "partition" for i in self._open)

    def _refresh_holds(self) -> None:
        with self._lock:
            if not self._holding() or self._stop.is_set():
                return
            try:
                for index, keys in list(self._open.items()):
                    if self.records[index].fault.kind == "partition":
                        for key in keys:
                            self._apply(key)
            except Exception as error:  # noqa: BLE001 - as an action's
                self.error = FaultError(f"{_name(self.records[index].fault)}: holding it "
                                        f"failed: {error}")
                self._stop.set()

    # the run's side

    def check(self) -> None:
        """Raise the error that stopped the schedule, if one did."""
        if self.error is not None:
            raise self.error

    def finish(self) -> None:
        """Stop the thread and heal what is still in effect (a heal due at the run's very end,
        or a run stopped early), recording when; errors now are kept, not raised."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for record in self.records:
            fault = record.fault
            if record.t_start is not None and record.t_end is None and fault.t_end is not None:
                if self.error is not None:
                    with contextlib.suppress(Exception):  # the cluster is going down anyway
                        self._heal(fault)
                    continue
                self._act(fault.index, False)

    def columns(self) -> dict[str, list]:
        """The faults table (experiments.schema): a row per fault injected, its times as
        carried out (emulated s from the epoch)."""
        from workloads.faults import columns

        done = [replace(r.fault, t_start=r.t_start, t_end=r.t_end)
                for r in self.records if r.t_start is not None]
        return columns(done)

    def crashes(self) -> dict[str, list[float]]:
        """Node -> the seconds from the epoch at which it was crashed, in order."""
        times: dict[str, list[float]] = {}
        for record in sorted((r for r in self.records if r.t_start is not None
                              and r.fault.kind == "crash"), key=lambda r: r.t_start):
            for node in record.fault.nodes:
                times.setdefault(node, []).append(record.t_start)
        return times

    def facts(self) -> dict:
        injected = [r for r in self.records if r.t_start is not None]
        late = [r.t_start - r.fault.t_start for r in injected]
        late += [r.t_end - r.fault.t_end for r in injected
                 if r.t_end is not None and r.fault.t_end is not None]
        return {"scheduled": len(self.records), "injected": len(injected),
                "healed": sum(r.t_end is not None for r in injected),
                "late_max_s": round(max(late), 3) if late else None,
                "error": str(self.error) if self.error else None}


# -- the feature -------------------------------------------------------------------------------

class Faults(Feature):
    """`scenario.faults` on a run: resolved and checked against the plan before the cluster
    starts, injected from the epoch, the `faults` table and facts (empty ones without a
    schedule). A crashed agent comes back without the operators that left its node meanwhile
    (every feature's `left`)."""

    key = "faults"
    always = True

    @classmethod
    def validate(cls, experiment, topology, backend: str) -> None:
        """What the containers cannot inject yet: a switch has no container to crash, and a
        device's own link runs inside its gateway's agent, which no fault reshapes yet.
        Refused by name, as the field path of the fault."""
        from topologies.errors import SpecError
        from workloads.faults import resolve

        for fault in resolve(experiment.scenario.faults, topology, experiment.run.duration):
            path = ("scenario", "faults", fault.index, fault.kind)
            switches = [n for n in fault.nodes if topology.nodes[n].kind == "switch"]
            if switches:
                raise SpecError(path, fault.target, f"no {fault.kind} of a switch on {backend}: "
                                f"{switches[0]} is no container in the emulation (crash the "
                                "nodes behind it, or partition them, or run it on sim)")
            ends = [n for link in fault.links for n in link] + [
                n for group in fault.groups for n in group]
            devices = [n for n in ends if topology.nodes[n].kind == "device"]
            if devices:
                raise SpecError(path, fault.target, f"no {fault.kind} of a device's link on "
                                f"{backend}: {devices[0]}'s link is emulated inside its "
                                "gateway's agent, which faults do not reshape yet (fault the "
                                "gateway's links to brokers, or run it on sim)")

    def __init__(self, spec) -> None:
        super().__init__(spec or [])
        self.faults: list[Injected] = []
        self.schedule: FaultSchedule | None = None
        self._incarnations: dict[str, int] = {}

    def prepare(self, setup) -> None:
        if not self.spec:
            return
        from workloads.faults import resolve

        self.faults = resolve(self.spec, setup.topology, setup.timing.duration)
        setup.checks.append(self._check)

    def _check(self, plan, configs: dict) -> None:
        from emu.errors import EmuError

        try:
            check(self.faults, set(plan.containers), {link.key: link.path for link in plan.links})
        except FaultError as error:
            raise EmuError(str(error)) from None

    def start(self, run, epoch: float) -> None:
        engine = (ClusterEngine(run.cluster, lambda node: self._revival(run, node),
                                run.health.revived) if self.faults else None)
        self.schedule = FaultSchedule(list(self.faults), engine, epoch, timebase=run.clock)
        self.schedule.start()

    def _revival(self, run, node: str) -> dict:
        """What a crashed agent starts again with (emu.agent.config.revived)."""
        self._incarnations[node] = self._incarnations.get(node, 0) + 1
        away = set().union(*(feature.left(node, self._incarnations[node])
                             for feature in run.features.values()))
        return {"epoch": run.epoch, "incarnation": self._incarnations[node],
                "away": sorted(away)}

    def poll(self) -> None:
        if self.schedule is not None:
            self.schedule.check()

    def stop(self) -> None:
        if self.schedule is not None:
            self.schedule.finish()

    def crashes(self) -> dict[str, list[float]]:
        """Node -> the seconds from the epoch at which it was crashed (FaultSchedule.crashes)."""
        return self.schedule.crashes() if self.schedule is not None else {}

    def results(self, run, tables: dict, facts: dict) -> None:
        tables["faults"] = self.schedule.columns()
        facts["faults"] = self.schedule.facts()
