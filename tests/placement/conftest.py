"""Fixtures of the placement tests: the shipped heuristics' names and the seeded random small
instances, with and without brokers (builders in tests/placement/helpers.py)."""

from __future__ import annotations

import pytest

from tests.placement.helpers import small_random
from workloads.placement.policy import POLICIES, policy_class

policy_class("optimal")    # the shipped policies register when first asked for


@pytest.fixture(scope="session")
def heuristics() -> list[str]:
    return sorted(name for name in POLICIES if name != "optimal")


@pytest.fixture(scope="session",
                params=[(seed, False) for seed in range(5)] + [(seed, True) for seed in range(3)],
                ids=lambda p: f"seed{p[0]}" + ("-brokers" if p[1] else ""))
def random_small(request):
    """Five seeds with no broker (straight paths) and three through the cloud VM's broker."""
    seed, brokers = request.param
    return small_random(seed, brokers=brokers)
