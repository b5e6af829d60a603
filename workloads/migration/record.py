"""One migration's record, as the model and the emulation both keep it: the columns of the
migrations table (experiments.schema) and the times and outcome behind them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

# The columns of experiments.schema's migrations table, in its order.
COLUMNS = ("id", "operator", "strategy", "source", "target", "start", "end", "downtime",
           "output_gap", "state_bytes", "chunks", "held", "duplicates", "lost", "reordered",
           "synchronised", "spark_way")


@dataclass
class MigrationRecord:
    """Downtime runs from the pause (the broker starts holding the operator's input) until
    the target has processed the first held event (sim.migration, emu.migration say how each
    measures it); `status` is done, or failed (rolled back to the source, `error` says why)."""

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

    def row(self, epoch: float = 0.0) -> dict[str, Any]:
        """The migrations table's columns, times in seconds since `epoch`."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name in COLUMNS}
        for name in ("start", "end"):
            values[name] -= epoch
        return values
