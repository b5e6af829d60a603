"""The registry of scenario features: each `scenario` key's schema, default, backends and check.

One entry per key, in the order the schema lists them: experiments.spec composes
`ScenarioSpec` from it, and experiments.checks refuses a feature written for a backend it does
not run on (one message, from `backends`) and then runs each feature's own `check`. A new
feature is its own module (its pydantic spec and its `check`) and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import Field

from workloads import (
    broadcast,
    broker_scaling,
    energy,
    energy_report,
    faults,
    figures,
    mobility,
    recovery,
    replication,
    scenario,
)
from workloads.reports import CompareRows, FeatureTable

BACKENDS = ("sim", "emu", "hybrid")
_NONE = object()  # no default given: the field's default is its factory's


@dataclass(frozen=True)
class Feature:
    """One scenario key: its schema (a pydantic annotation), its default (a value, or a
    factory), what it is, the backends that run it, and its check against the whole
    experiment (`check(spec, topology)` raises topologies.errors.SpecError with the field
    path; it runs whether or not the file writes the key, so it may check the operator
    fields it owns too). `files`: where inside the key's value a file is named (a path of
    keys), resolved against the experiment file's folder and checked to exist."""

    key: str
    spec: object
    default: object = _NONE
    default_factory: Callable[[], object] | None = None
    description: str | None = None
    backends: tuple[str, ...] = BACKENDS
    check: Callable[[object, object], None] | None = None
    files: tuple[tuple[str, ...], ...] = field(default=())
    # The feature's own figures for the run's summary (workloads.figures), from the tables
    # and facts every backend writes alike: `summary(tables, facts) -> dict` (empty: the
    # feature did not run).
    summary: Callable[[dict, dict], dict] | None = None
    # What it reports beside the core tables (workloads.reports): its tables, by name (every
    # run writes them, empty where the feature did not run), and its rows in `foglab compare`.
    tables: Mapping[str, FeatureTable] = field(default_factory=dict)
    compare: CompareRows | None = None

    def field(self):
        """The pydantic field of `ScenarioSpec` for this key."""
        if self.default_factory is not None:
            return Field(default_factory=self.default_factory, description=self.description)
        default = None if self.default is _NONE else self.default
        return Field(default=default, description=self.description)

    def written(self, value: object) -> bool:
        """Whether an experiment asks for the feature: its value differs from the default
        (a key written with its default asks for nothing a backend could lack)."""
        default = self.default_factory() if self.default_factory else (
            None if self.default is _NONE else self.default)
        return value != default


FEATURES: tuple[Feature, ...] = (
    Feature("migration", scenario.MigrationSettings,
            default_factory=scenario.MigrationSettings, check=scenario.check_settings),
    Feature("migrations", list[scenario.ScheduledMigration], default_factory=list,
            check=scenario.check_migrations, summary=figures.migrations),
    Feature("mobility", mobility.MobilitySpec | None, backends=("sim", "hybrid"),
            check=mobility.check, files=(("model", "path"),)),
    Feature("policy", scenario.PolicySpec | None, backends=("sim", "hybrid"),
            check=scenario.check_policy),
    Feature("load", list[str], default_factory=list, description=(
        "devices (topology names or patterns, e.g. sensor-*) that hybrid runs as "
        "simulated load: a generator on the host publishes their readings into their gateways "
        "on sim's schedule instead of emulating them (experiments.hybrid.load); sim and emu "
        "run them as ordinary devices")),
    Feature("faults", list[faults.FaultSpec], default_factory=list, check=faults.check,
            summary=figures.faults, tables=faults.TABLES),
    Feature("recovery", recovery.RecoverySpec | None, description=(
        "detect crashed gateways through their ZooKeeper sessions "
        "and re-place their operators, restored from their checkpoints (workloads.recovery)"),
        backends=("sim", "emu"), check=recovery.check, summary=figures.recovery,
        tables=recovery.TABLES),
    Feature("replication", replication.ReplicationSpec | None, description=(
        "start replicas of operators over their `slo`, retire them "
        "when the load falls (workloads.replication)"),
        backends=("sim", "emu"), check=replication.check, summary=figures.replication,
        tables=replication.TABLES),
    Feature("broadcasts", list[broadcast.BroadcastSpec], default_factory=list, description=(
        "control messages from a coordinator to workers, "
        "naive or over a tree (workloads.broadcast); sim and emu (from a gateway or cloud VM)"),
        backends=("sim", "emu"), check=broadcast.check, summary=figures.broadcasts,
        tables=broadcast.TABLES),
    Feature("broker_scaling", list[broker_scaling.BrokerScalingSpec], default_factory=list,
            description="spare brokers that join a broker whose delay stays "
            "over a bound, a share of its publishers moving to them (workloads.broker_scaling)",
            backends=("sim", "emu"), check=broker_scaling.check,
            summary=figures.broker_scaling),
    Feature("energy", energy.EnergySpec | None, description=(
        "each node's and link's energy, devices' batteries, and the run's cost "
        "(workloads.energy)"), backends=("sim", "emu", "hybrid"), check=energy.check,
        files=(("prices",),), summary=energy_report.summary, tables=energy_report.TABLES,
        compare=energy_report.compare_rows),
)

BY_KEY = {feature.key: feature for feature in FEATURES}
