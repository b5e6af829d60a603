"""The scenario's scheduled migrations (`scenario.migrations`) started on the model's
coordinator (sim.migration.Coordinator), each at its planned time
(workloads.migration.schedule.migration_starts: `at`, or the next window boundary)."""

from __future__ import annotations

from sim.features.base import Feature
from workloads.migration.schedule import migration_starts
from workloads.scenario import ScheduledMigration


class ScheduledMigrations(Feature):
    """Schedules each planned migration; the coordinator records them (the `migrations`
    and `windows` tables are the model's: a policy's migrations are in them too)."""

    dynamic = True  # operators move while the run goes on

    def __init__(self, model, plans: list[ScheduledMigration]):
        super().__init__(model, plans)
        for plan, start in migration_starts(plans, model.window_size, model.settings.seed):
            model.coordinator.schedule(plan, start)
