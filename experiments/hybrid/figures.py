"""Figures that are measured, or say why not: percentiles and means over measured values only.

A value that was never measured (an action that never began has no start time: NaN; a
reading never received: None) is not a sample: a percentile taken over it is NaN, which says
nothing about the values that were measured nor why the others were not. `Measured` keeps the
finite values of a sample and counts the others; its percentile, mean and max are over the
measured values, each figure goes with the count it covers (`n`), and with nothing measured
the figure is None and `why` says why. `figure_line` prints a figure as the benchmarks' key=value
(`name=unmeasured reason=...`, never `nan`). The hybrid backend's facts use it
(experiments.hybrid.backend), as do the benchmarks' printed figures; `summary` gives the
hybrid run's figures for its summary (`foglab results show`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


def _finite(value) -> bool:
    try:
        return value is not None and math.isfinite(value)
    except TypeError:
        return False


@dataclass(frozen=True)
class Measured:
    """The measured (finite) values of a sample; `dropped`: how many values were not measured
    (None, NaN); `why`: why nothing was measured, when nothing was."""

    values: np.ndarray
    dropped: int = 0
    why: str = "nothing was measured"

    @classmethod
    def of(cls, values: Iterable, why: str = "nothing was measured") -> Measured:
        if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
            every = values.astype("float64", copy=False).ravel()
        else:
            every = np.asarray([math.nan if v is None else float(v) for v in values],
                               dtype="float64")
        kept = every[np.isfinite(every)]
        return cls(kept, int(every.size - kept.size), why)

    @property
    def n(self) -> int:
        return int(self.values.size)

    @property
    def reason(self) -> str | None:
        """Why the figures are None; None when something was measured."""
        return None if self.n else self.why

    def _round(self, value: float, scale: float, digits: int | None) -> float:
        value = float(value) * scale
        return value if digits is None else round(value, digits)

    def percentile(self, q: float, scale: float = 1.0, digits: int | None = None) -> float | None:
        """The q-th percentile of the measured values (times `scale`), None with none."""
        if not self.n:
            return None
        return self._round(np.percentile(self.values, q), scale, digits)

    def mean(self, scale: float = 1.0, digits: int | None = None) -> float | None:
        return self._round(self.values.mean(), scale, digits) if self.n else None

    def median(self, scale: float = 1.0, digits: int | None = None) -> float | None:
        return self.percentile(50, scale, digits)

    def max(self, scale: float = 1.0, digits: int | None = None) -> float | None:
        return self._round(self.values.max(), scale, digits) if self.n else None


def figure_line(name: str, value, reason: str | None = None, fmt: str = "{:.3f}") -> str:
    """`name=value` for a figure, `name=unmeasured reason=...` for one that is None (or NaN:
    never printed as such)."""
    if _finite(value):
        return f"{name}={fmt.format(value)}"
    return f"{name}=unmeasured reason={reason or 'nothing was measured'}"


def summary(tables: dict, facts: dict) -> dict:
    """A hybrid run's own figures for its summary, from `facts.hybrid` (empty: not a hybrid
    run): the model's lag, the decision-to-action time with the actions it covers, and the
    actions that failed, by cause; a figure not measured is None, with why in `unmeasured`."""
    hybrid = facts.get("hybrid")
    if not isinstance(hybrid, dict):
        return {}
    lag = hybrid.get("lag") or {}
    failures = hybrid.get("action_failures") or {}
    unmeasured = [f"lag: {lag['lag_unmeasured']}"] if lag.get("lag_unmeasured") else []
    unmeasured += [f"{name.replace('_', ' ')}: {hybrid[f'{name}_unmeasured']}"
                   for name in ("decision_to_action", "handover_decision_to_action")
                   if hybrid.get(f"{name}_unmeasured")]
    figures = {
        "lag p99 ms": lag.get("lag_p99_ms"),
        "decision to action p95 ms": hybrid.get("decision_to_action_ms_p95"),
        "over actions": hybrid.get("decision_to_action_n"),
        "handover p95 ms": hybrid.get("handover_decision_to_action_ms_p95"),
        "over handovers": hybrid.get("handover_decision_to_action_n"),
        "actions": hybrid.get("actions"),
        "failed": hybrid.get("actions_failed"),
        "failures": "; ".join(f"{cause} x{found['count']}"
                              for cause, found in failures.items()) or None,
    }
    if unmeasured:
        figures["unmeasured"] = "; ".join(unmeasured)
    return figures
