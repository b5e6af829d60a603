"""One migration's record, as the model and the emulation both keep it: the columns of the
migrations table (experiments.schema) and the times and outcome behind them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

# The columns of experiments.schema's migrations table, in its order.
COLUMNS = ("id", "operator", "strategy", "source", "target", "start", "end", "downtime",
           "output_gap", "state_bytes", "chunks", "held", "duplicates", "lost", "reordered",
           "synchronised", "spark_way", "status")
# How a migration ended (the table's `status`): done (the target has the operator), unfinished
# (still under way when the run ended: no end), failed (rolled back to the source, or it could
# not begin: `error` says why), refused (its turn came at or after the run's end, so it never
# began: `start` is when it was decided or planned, `end` when it was refused).
STATUSES = ("done", "unfinished", "failed", "refused")
# Why a move whose turn came at or after the run's end was refused (`error`).
AFTER_THE_END = "its turn came after the run ended: nothing starts after the run's end"


@dataclass
class MigrationRecord:
    """Downtime runs from the pause (the broker starts holding the operator's input) until
    the target has processed the first held event (sim.migration, emu.features.moves.by_agents say
    how each measures it); `status` is one of STATUSES (`error` says why one failed or was
    refused)."""

    id: int
    operator: str
    strategy: str
    source: str
    target: str
    start: float
    end: float = math.nan
    state_bytes: int = 0
    chunks: int = 0
    held: int = 0  # input messages the broker held while the operator was paused
    downtime: float = math.nan
    output_gap: float = math.nan
    duplicates: int = 0
    lost: int = 0
    reordered: int = 0
    synchronised: str = ""  # parallel: strong, old_ahead or new_ahead
    spark_way: str = ""  # a Spark query's move (emu): checkpoint or export
    paused: float = math.nan
    resumed: float = math.nan
    status: str = "done"
    error: str = ""
    phases: dict[str, float] = field(default_factory=dict)  # phase -> when it began

    @classmethod
    def refused(cls, id: int, operator: str, strategy: str, source: str, target: str,
                decided: float, now: float, error: str = AFTER_THE_END) -> MigrationRecord:
        """A move that never began: decided (or planned) at `decided`, refused at `now`."""
        return cls(id, operator, strategy, source, target, decided, now, status="refused",
                   error=error)

    def row(self, epoch: float = 0.0) -> dict[str, Any]:
        """The migrations table's columns, times in seconds since `epoch`."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name in COLUMNS}
        for name in ("start", "end"):
            values[name] -= epoch
        return values
