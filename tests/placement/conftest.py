"""Fixtures of the placement tests: the shipped heuristics' names and the seeded random small
instances (builders in tests/placement/helpers.py)."""

from __future__ import annotations

import pytest

from tests.placement.helpers import small_random
from workloads.placement.policy import POLICIES, policy_class

policy_class("optimal")    # the shipped policies register when first asked for


@pytest.fixture(scope="session")
def heuristics() -> list[str]:
    return sorted(name for name in POLICIES if name != "optimal")


@pytest.fixture(scope="session", params=range(5), ids=lambda seed: f"seed{seed}")
def random_small(request):
    return small_random(request.param)
