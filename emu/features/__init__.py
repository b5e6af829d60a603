"""The emulation's scenario features, by scenario key, in the order a run starts, stops and
asks them for results (emu.features.base says their life cycle). A new feature is its module
and one line here."""

from __future__ import annotations

from emu.features.base import Feature
from emu.features.broadcasts import Broadcasts
from emu.features.broker_scaling import BrokerScalingFeature
from emu.features.energy import EnergyFeature
from emu.features.faults import Faults
from emu.features.migrations import Migrations
from emu.features.recovery import RecoveryFeature
from emu.features.replication import ReplicationFeature

FEATURES: dict[str, type[Feature]] = {
    "faults": Faults,
    "recovery": RecoveryFeature,  # after faults: its table takes their crashes
    "replication": ReplicationFeature,
    "broker_scaling": BrokerScalingFeature,  # after replication: it adds to its table
    "broadcasts": Broadcasts,
    "migrations": Migrations,  # last: a migration due at the end is waited for after the rest
    "energy": EnergyFeature,  # its results read only what the run measured
}
