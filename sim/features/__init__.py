"""The model's scenario features: one class per scenario key, one registration line each.

sim.model.Model attaches the features present in a run's `Settings.scenario` in this order
and finishes them in the reverse one, as a stack unwinds, so one registered earlier has the
last word: faults record as lost what is still being sent again once broadcasts have taken
their control messages back; broker scaling adds its joins to the replicas table after
replication has written its rows. The order also decides which feature's events come first
at one instant (SimPy's order): a new feature goes at the end.

A new feature: its class (sim.features.base.Feature) in a module here and its line below;
its spec and checks are workloads' (workloads.features), and
experiments.model_settings.sim_settings passes every key registered here that the scenario
writes.
"""

from __future__ import annotations

from sim.features.base import Feature
from sim.features.broadcasts import Broadcasts
from sim.features.broker_scaling import BrokerScaling
from sim.features.energy import Energy
from sim.features.faults import FaultSchedule
from sim.features.migrations import ScheduledMigrations
from sim.features.recovery import Recovery
from sim.features.replacement import Replacement
from sim.features.replication import Replication

FEATURES: dict[str, type[Feature]] = {
    "energy": Energy,  # first, so it finishes last: it adds battery deaths to the faults table
    "migrations": ScheduledMigrations,
    "faults": FaultSchedule,
    "broadcasts": Broadcasts,
    "recovery": Recovery,
    "broker_scaling": BrokerScaling,
    "replication": Replication,
}
# Features that are not a scenario key: placement.replace's planner, which experiments.backends
# gives the model (experiments.placement builds it before the run).
FROM_PLACEMENT: dict[str, type[Feature]] = {"replacement": Replacement}
FEATURES.update(FROM_PLACEMENT)

__all__ = ["FEATURES", "FROM_PLACEMENT", "Feature"]
