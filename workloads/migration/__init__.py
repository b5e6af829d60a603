"""Migration algorithms shared by the simulator and the emulator."""

from workloads.migration.consistency import (
    Forwarded,
    Output,
    Side,
    Synchroniser,
    SyncMode,
    SyncReport,
    alternating,
    synchronise,
)

__all__ = [
    "Forwarded",
    "Output",
    "Side",
    "SyncMode",
    "SyncReport",
    "Synchroniser",
    "alternating",
    "synchronise",
]
