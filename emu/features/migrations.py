"""The scenario's scheduled migrations on an emulated run (`scenario.migrations`, with the
settings of `scenario.migration`): each at its time after the epoch, on a thread of its own
while the run measures (emu.features.moves.dispatch; a Spark query's by
emu.features.moves.spark_query, its target's standby warmed before the epoch); the `migrations`
table and facts from every feature's migrations (a hybrid run's policy moves operators too), with
each windowed operator's output gap and its lost, duplicated and reordered events. A target behind
another broker than the operator's input session takes the session over on that broker, over the
link the cluster's plan gives it; a move that cannot (a parallel migration, a Spark query's) is
refused before the run (`check_targets`)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path

from emu.agent.config import AgentConfig
from emu.agent.timebase import TimeBase
from emu.errors import EmuError
from emu.features.base import Feature
from workloads.operator_engines import DEFAULT_ENGINE, Move, operator_engine


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


def migration_columns(records: list, epoch: float) -> dict[str, list]:
    columns: dict[str, list] = {}
    for record in records:
        for name, value in record.row(epoch).items():
            columns.setdefault(name, []).append(value)
    return columns


class MigrationSchedule:
    """The scenario's migrations, each at its time after the epoch, on a thread of its own
    while the run measures; `finish` waits for one under way and gives the table's columns.
    `clock`: the run's time base (emu.agent.timebase; the controller's by default): `epoch`,
    `at` and the records' times are emulated, a wait of s lasts K*s host seconds. Nothing
    starts at or after `duration` (s after the epoch, the run's): a move whose turn comes
    then (the one before it ran late) is recorded refused, its start when it was due."""

    def __init__(self, control, migrations: list, settings, configs: dict[str, AgentConfig],
                 epoch: float, seed: int = 0,
                 records_dir: Callable[[str], Path] | None = None,
                 clock: TimeBase | None = None, duration: float = math.inf) -> None:
        from emu.features.moves.dispatch import clock_of
        from workloads.migration.schedule import migration_starts

        self.control = control
        self.clock = clock or clock_of(control)
        # `within_window` adds a phase in [0, window) to `at`, drawn as the model draws it.
        starts = migration_starts(list(migrations),
                                  lambda operator: _window_period(configs, operator), seed)
        self.plans = sorted(((start, plan) for plan, start in starts),
                            key=lambda timed: timed[0])
        self.settings = settings
        self.configs = configs
        # Operator -> its engine, by which emu.features.moves.dispatch moves it (a Spark query by
        # emu.features.moves.spark_query, copying between nodes' records folders).
        self.engines = {op.name: op.engine for config in configs.values()
                        for op in config.operators}
        self.records_dir = records_dir
        self.epoch = epoch
        self.duration = duration
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
        from emu.features.moves.dispatch import MigrationRecord, migrate

        where: dict[str, str] = {}  # operator -> its node now
        stopped = False
        for number, (at, plan) in enumerate(self.plans):
            due = self.epoch + at
            if not stopped and self.clock.now() < due:
                stopped = self.clock.wait(self._stop, due - self.clock.now())
            strategy = plan.strategy or getattr(self.settings, "strategy", "pause_transfer")
            now = self.clock.now()
            if stopped or now >= self.epoch + self.duration:
                # Its turn came at or after the run's end (the one before ran late: a Spark
                # query's move takes minutes on a busy host), or the run stopped first: it
                # never begins.
                self.records.append(MigrationRecord.refused(
                    number, plan.operator, strategy, plan.source or where.get(plan.operator)
                    or "", plan.target, due, max(now, due)))
                continue
            try:
                source = plan.source or where.get(plan.operator) or self._source(plan.operator)
                record = migrate(self.control, plan.operator, source, plan.target, strategy,
                                 self.settings, record_id=number, records=self.records_dir,
                                 engine=self.engines.get(plan.operator, DEFAULT_ENGINE),
                                 clock=self.clock)
            except Exception as error:  # noqa: BLE001 - recorded, the run goes on
                now = self.clock.now()
                record = MigrationRecord(number, plan.operator, strategy, plan.source or "",
                                         plan.target, now, now, status="failed",
                                         error=str(error))
            if record.status == "done":
                where[plan.operator] = plan.target
            self.records.append(record)

    def finish(self) -> list:
        """Wait for a migration under way; the records of all (emu.features.moves.dispatch)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.records


def spark_standbys(control, plans: list, configs: dict[str, AgentConfig],
                    records_dir: Callable[[str], Path]) -> list[Path]:
    """Ask the targets of the Spark queries' scheduled moves for their standbys (a minute or
    more to warm: from before the epoch, a move finds its standby warm); the files that say
    each is warm (emu.features.moves.spark_query.standbys_ahead)."""
    spark = {op.name for config in configs.values() for op in config.operators
             if operator_engine(op.engine).moves_by is Move.STANDBY}
    if not any(plan.operator in spark for plan in plans):
        return []
    from emu.features.moves.spark_query import standbys_ahead

    return standbys_ahead(control, plans, configs, records_dir)


def check_targets(plans: list, settings, cluster, configs: dict[str, AgentConfig]) -> None:
    """Refuse, before anything starts, a scheduled migration whose target sits behind another
    broker than the one holding the operator's input session (emu.cluster.plan) when the
    move cannot reach it there: a parallel migration (its mirror and the source's diverted
    outputs go through each node's own broker, emu.agent.parallel), a Spark query's move
    (emu.features.moves.spark_query starts the target's query on the target's broker), or a target
    the plan gave no link to that broker. A SpecError naming the migration's field."""
    from topologies.errors import SpecError

    planned = {name: container.agent for name, container in cluster.containers.items()
               if container.agent is not None}
    for i, plan in enumerate(plans):
        there = cluster.brokers.get(plan.target)
        homes = {op.broker or cluster.brokers[node] for node, config in planned.items()
                 for op in config.operators
                 if op.name == plan.operator and (plan.source in (None, node))}
        if there is None or not homes or homes == {there}:
            continue  # an unknown target or operator is the schedule's error, said later
        home = sorted(homes - {there})[0]
        strategy = plan.strategy or getattr(settings, "strategy", "pause_transfer")
        spark = any(op.name == plan.operator
                    and operator_engine(op.engine).moves_by is Move.STANDBY
                    for config in configs.values() for op in config.operators)
        why = ("a Spark query's move starts the target's query on the target's broker"
               if spark else
               "a parallel migration's mirror and the source's diverted outputs go through "
               "each node's own broker (use pause_transfer or pause_drain)"
               if strategy == "parallel" else
               None if home in planned[plan.target].other_brokers else
               "the cluster's plan gives it no link there")
        if why is not None:
            raise SpecError(("scenario", "migrations", i, "to"), plan.target, (
                f"a target {plan.operator!r} can move to on emu: its input session is on "
                f"broker {home}, {plan.target} is behind {there}, and {why}"))


class Migrations(Feature):
    """The feature: its operators read through sessions of their own (which targets take)."""

    key = "migrations"
    always = True  # a hybrid run's policy migrates without a schedule: its table is written

    @classmethod
    def validate(cls, experiment, topology, backend: str) -> None:
        """Every migration the file asks for (planned, or a hybrid policy's) by a strategy the
        containers run (emu.features.moves.dispatch.STRATEGIES)."""
        from emu.features.moves.dispatch import STRATEGIES
        from topologies.errors import SpecError

        scenario = experiment.scenario
        default = scenario.migration.strategy if scenario.migration else "pause_transfer"
        asked = [(("scenario", "migrations", i, "strategy") if plan.strategy
                  else ("scenario", "migration", "strategy"), plan.strategy or default)
                 for i, plan in enumerate(scenario.migrations)]
        if scenario.policy is not None:
            asked.append((("scenario", "policy", "strategy") if scenario.policy.strategy
                          else ("scenario", "migration", "strategy"),
                          scenario.policy.strategy or default))
        for path, strategy in asked:
            if strategy not in STRATEGIES:
                raise SpecError(path, strategy, f"a strategy the emulation runs ("
                                f"{', '.join(STRATEGIES)})")

    def __init__(self, spec) -> None:
        super().__init__(list(spec or []))
        self.settings = None
        self.seed = 0
        self.schedule: MigrationSchedule | None = None
        self.records: list = []

    def prepare(self, setup) -> None:
        setup.moving |= {plan.operator for plan in self.spec}
        self.settings = setup.scenario.get("migration")
        self.seed = setup.seed
        if self.spec and len(setup.topology.of_kind("broker")) > 1:  # a move across brokers
            setup.checks.append(lambda cluster, configs: check_targets(
                self.spec, self.settings, cluster, configs))

    def warm(self, run) -> list[Path]:
        # The targets of the Spark queries' scheduled moves warm their standbys meanwhile.
        return spark_standbys(run.control, self.spec, run.configs, run.cluster.records_dir)

    def start(self, run, epoch: float) -> None:
        self.schedule = MigrationSchedule(run.control, self.spec, self.settings, run.configs,
                                          epoch, run.seed, run.cluster.records_dir,
                                          clock=run.clock, duration=run.timing.duration)
        self.schedule.start()

    def stop(self) -> None:
        if self.schedule is not None:
            self.records = self.schedule.finish()

    def left(self, node: str, incarnation: int) -> set[str]:
        away: set[str] = set()
        records = list(self.schedule.records) if self.schedule is not None else []
        for record in records:  # operators that left the node, in order
            if record.status == "done" and node in (record.source, record.target):
                (away.add if record.source == node else away.discard)(record.operator)
        return away

    def migrations(self) -> list:
        return self.records

    def results(self, run, tables: dict, facts: dict) -> None:
        moved = run.moved  # every feature's, this one's first
        if not moved:
            return
        _measure_outputs(moved, run.windows, run.configs, run.epoch)
        tables["migrations"] = migration_columns(moved, run.epoch)
        facts["migrations"] = [{"id": r.id, "status": r.status, "error": r.error,
                                "phases": {k: round(v - run.epoch, 3)
                                           for k, v in r.phases.items()}}
                               for r in moved]
