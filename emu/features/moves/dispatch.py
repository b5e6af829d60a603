"""Moving an operator instance between two nodes of a running cluster: migrate() -> record.

A move goes the way its operator's engine moves (workloads.operator_engines: `moves_by`),
through MOVERS, one mover a way: an instance the agents run, by their protocol
(emu.features.moves.by_agents: pause, state through ZooKeeper, resume; or parallel), or a Spark
query, into a warm standby on the target (emu.features.moves.spark_query). Only this module imports
both; neither imports it, and the agents' mover nothing of Spark's (Spark's takes its error, its
clock and the move of the node's arrival recorder from it). An engine that moves an existing
way is one entry in the registry, a new way one line here. The record is
workloads.migration.record's (the model's too); each mover's docstring says what its columns
measure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emu.agent.timebase import TimeBase
from emu.features.moves.by_agents import (  # noqa: F401 - re-exported: callers import them from here
    STATE_ROOT,
    STRATEGIES,
    SYNC_WINDOWS,
    MigrationError,
    clock_of,
    migrate_instance,
)
from emu.features.moves.spark_query import migrate_query
from workloads.migration.record import MigrationRecord
from workloads.operator_engines import DEFAULT_ENGINE, Move, operator_engine

# How an instance moves, by its engine's way; each takes migrate's arguments.
MOVERS: dict[Move, Callable[..., MigrationRecord]] = {
    Move.AGENTS: migrate_instance,
    Move.STANDBY: migrate_query,
}


def migrate(control, operator: str, source: str, target: str,
            strategy: str = "pause_transfer", settings: Any = None, *, record_id: int = 0,
            timeout: float = 30.0, sync_timeout: float | None = None,
            progress: Callable[[str], None] = lambda phase: None,
            engine: str = DEFAULT_ENGINE, records: Callable[[str], Any] | None = None,
            clock: TimeBase | None = None) -> MigrationRecord:
    """Move `operator`'s instance from agent `source` to agent `target`.

    `control`: a connected emu.control.commands.Controller, or a broker's "host:port" (a controller
    is connected for the migration). `settings`: a workloads.scenario.MigrationSettings (its
    `chunk`, and `sync` for parallel), or None. `timeout`: how long one step, or one chunk,
    may take; `sync_timeout` how long a parallel migration may wait for synchronisation
    (default: `timeout` plus SYNC_WINDOWS of the operator's windows). `progress(phase)`
    hears each phase as it begins. A failed migration is a record with status `failed`;
    a MigrationError only for a migration refused before anything happened. `engine`: the
    operator's, which says how it moves: "spark", a Spark query moved between cloud VMs by
    emu.features.moves.spark_query.migrate_query (`records(node)`: the node's records folder on the
    host). The record's times are on `clock`, the run's time base (emu.agent.timebase; by default
    the controller's `clock`).
    """
    try:
        mover = MOVERS[operator_engine(engine).moves_by]
    except ValueError as unknown:
        raise MigrationError(str(unknown)) from None
    return mover(control, operator, source, target, strategy, settings, record_id=record_id,
                 timeout=timeout, sync_timeout=sync_timeout, progress=progress,
                 records=records, clock=clock or clock_of(control))


def attempt(control, operator: str, source: str, target: str, strategy: str,
            settings: Any = None, **options) -> MigrationRecord:
    """`migrate`, with a move refused before it began (a MigrationError, an agent that
    is gone) recorded as failed too, at the clock's time: what a run that moves operators
    while it measures records and goes on with. `options`: migrate's."""
    clock = options.get("clock") or clock_of(control)
    try:
        return migrate(control, operator, source, target, strategy, settings, **options)
    except Exception as error:  # noqa: BLE001 - recorded, the run goes on
        now = clock.now()
        return MigrationRecord(options.get("record_id", 0), operator, strategy, source,
                               target, now, now, status="failed", error=str(error))
