"""When a scenario's planned migrations start: one rule for every backend.

A migration starts at its `at`, or, with `within_window`, at a point of the window after it
drawn uniformly from the run's `migrations` random stream (so the move falls anywhere in a
window, as the thesis's repetitions did), one draw per such migration in file order. `sim`,
`emu` and `hybrid` take their times from here, so one file and seed move at the same moments.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

Plan = TypeVar("Plan")


def migration_starts(plans: Sequence[Plan], window_size: Callable[[str], float],
                     seed: int) -> list[tuple[Plan, float]]:
    """(plan, start in seconds of run time) for each plan, in file order; `window_size(op)`:
    the seconds of an operator's time window, 0 without one (no draw then)."""
    rng = random.Random(f"{seed}:migrations")
    starts = []
    for plan in plans:
        start = plan.at
        if plan.within_window:
            size = window_size(plan.operator)
            if size > 0:
                start += rng.random() * size
        starts.append((plan, start))
    return starts
