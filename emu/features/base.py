"""The life cycle every emulated scenario feature has, and the two objects it is handed.

A feature (faults, recovery, replication, ...) is made from its scenario entry, then:
`prepare(setup)` before the cluster exists (operators that need input sessions of their own,
the ZooKeeper session timeout, spare brokers, checks run once the cluster is planned),
`start(run, epoch)` at the run's epoch, `poll()` at each sample (raise to stop the run),
`stop()` when the run's time is over (its threads joined), and `results(run, tables, facts)`
once the nodes' records are read. The run asks each feature a few questions on the way (the
operators that left a node, the migrations it made, where operators' input may arrive): the
answers of all features together, so that no feature needs to know which others run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from emu.agent.timebase import UNDILATED, TimeBase
from workloads.recovery import DEFAULT_SESSION_TIMEOUT


@dataclass
class Setup:
    """What a run is made of before its cluster starts; features add to the last four fields.
    `checks` are called with the cluster's plan and the agents' configs before it starts."""

    topology: Any
    workload: Any
    pipeline: list
    timing: Any  # emu.run.emulate.Timing
    seed: int
    scenario: dict[str, object]
    moving: set[str] = field(default_factory=set)
    session_timeout: float = DEFAULT_SESSION_TIMEOUT
    # Whether an agent whose ZooKeeper session expired stops its instances that read through
    # a session of their own (AgentConfig.fence): the host re-places them (recovery).
    fence: bool = False
    spares: dict[str, str] = field(default_factory=dict)  # spare broker -> the broker it helps
    checks: list[Callable[[Any, dict], None]] = field(default_factory=list)
    # The run's time dilation: its times and timings above are emulated seconds.
    clock: TimeBase = UNDILATED


@dataclass
class Run:
    """A running emulation as features see it: the cluster (its `plan`, records folders), the
    controller, each node's container status, the agents' configs, health (emu.run.health), the
    epoch, the active features by key; once the records are read, `messages`, `windows` and
    `moved` (every feature's migration records, in the features' order)."""

    cluster: Any
    control: Any
    status: dict
    topology: Any
    workload: Any
    configs: dict
    health: Any
    timing: Any
    seed: int
    features: dict[str, Feature]
    epoch: float = 0.0
    messages: dict | None = None
    windows: dict | None = None
    moved: list = field(default_factory=list)
    # The run's time base (emu.agent.timebase): `epoch` and every time a feature reads or sets
    # are emulated (`clock.now()`, `clock.wait(event, seconds)`, `clock.sleep(seconds)`).
    clock: TimeBase = UNDILATED

    @property
    def plan(self):
        return self.cluster.plan


class Feature:
    """A scenario feature on the emulation; every step does nothing unless overridden."""

    key: ClassVar[str] = ""
    # Made even when the scenario leaves its key out (its table and facts are always there).
    always: ClassVar[bool] = False

    def __init__(self, spec) -> None:
        self.spec = spec

    @classmethod
    def validate(cls, experiment, topology, backend: str) -> None:
        """When the file is loaded, for a run on the containers (emu, or hybrid through it):
        refuse what this feature cannot do there with a topologies.errors.SpecError naming the
        field (`experiment` is the whole validated experiment, `backend` the one it names)."""

    def prepare(self, setup: Setup) -> None:
        """Before the cluster is planned."""

    def warm(self, run: Run) -> list[Path]:
        """Before the epoch: files that say something it started is ready (the drivers wait
        for them, within the Spark start timeout)."""
        return []

    def start(self, run: Run, epoch: float) -> None:
        """At the run's epoch (the agents have it)."""

    def poll(self) -> None:
        """At each sample, and once after `stop`: raise to stop the run."""

    def stop(self) -> None:
        """The run's time is over (or it stops early): end its threads."""

    def left(self, node: str, incarnation: int) -> set[str]:
        """When `node`'s crashed agent is about to start again as its `incarnation`-th
        restart: the operators that left `node`, which it does not start."""
        return set()

    def migrations(self) -> list:
        """The migrations it made (emu.features.moves.dispatch.MigrationRecord), after `stop`."""
        return []

    def moves(self) -> dict[str, list[str]]:
        """Operator -> nodes besides its deployment where its input may arrive, after `stop`."""
        return {}

    def handovers(self) -> dict[str, list[str]]:
        """Device -> the gateways it was handed over to, after `stop`."""
        return {}

    def results(self, run: Run, tables: dict, facts: dict) -> None:
        """Add its tables and facts, once the nodes' records are read."""


def wanted(spec) -> bool:
    """A scenario entry that asks for something (not left empty)."""
    return spec is not None and not (isinstance(spec, list | tuple) and not spec)
