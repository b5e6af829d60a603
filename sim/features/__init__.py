"""The model's scenario features: one class per scenario key, one registration line each.

sim.model.Model attaches the features present in a run's `Settings.scenario` in this order
and finishes them in the reverse one, as a stack unwinds: a feature registered later may rely
on an earlier one's state while it finishes (broadcasts take their control messages back
before faults record what is still being sent again as lost; replication's rows are in the
replicas table before broker scaling adds its joins to it).
"""

from __future__ import annotations

from sim.features.base import Feature
from sim.features.broadcasts import Broadcasts
from sim.features.broker_scaling import BrokerScaling
from sim.features.faults import FaultSchedule
from sim.features.migrations import ScheduledMigrations
from sim.features.recovery import Recovery
from sim.features.replication import Replication

FEATURES: dict[str, type[Feature]] = {
    "migrations": ScheduledMigrations,
    "faults": FaultSchedule,
    "broadcasts": Broadcasts,
    "recovery": Recovery,
    "broker_scaling": BrokerScaling,
    "replication": Replication,
}

__all__ = ["FEATURES", "Feature"]
