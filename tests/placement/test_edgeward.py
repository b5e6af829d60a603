"""Edge-ward's fast walk (operator by operator, workloads.placement.edgeward.Walk.levels)
against iFogSim's device-by-device walk: the same decisions, reasons and books on random
problems, tight ones included, where devices overflow and operators shift north."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.placement.helpers import small_random
from tests.placement.test_policies import worked_example
from workloads.placement import edgeward, synthetic
from workloads.placement.problem import Unplaceable
from workloads.placement.tables import Tables


def walked(problem, fast: bool):
    """(the decision or the Unplaceable's message, each node's CPU load, the loads booked)."""
    t = Tables.of(problem)
    walk = edgeward.Walk(t)
    walk.fast = fast
    try:
        for j, op in enumerate(problem.operators):
            for flow in op.flows:
                walk.path(j, t.index[flow.at], flow.rate)
        walk.leftovers()
    except Unplaceable as error:
        return str(error), None, None
    walk.settle()
    return walk.decision(), walk.cpu, walk.load_on


def problems():
    """Tight trees (45 % of the capacity on 9 nodes: shifts north, Unplaceable), roomier ones
    with brokers, chains reading each other, and some with every fifth operator pinned on
    one or two of its candidates (on the path or off it)."""
    for seed in range(12):
        nodes, latency, joules = synthetic.tree(gateways=6, aggregations=2, clouds=1,
                                                cloud_cores=2)
        yield synthetic.chains(40, nodes, latency, joules, chains=3, seed=seed,
                               utilisation=0.45)
    for seed in range(6):
        yield small_random(seed, operators=30, brokers=bool(seed % 2))
    for seed in range(6):
        problem = small_random(seed, operators=30)
        ops = [replace(op, pinned=op.candidates[:1] if i % 10 == 2 else op.candidates[-2:])
               if i % 5 == 2 else op
               for i, op in enumerate(problem.operators)]
        yield replace(problem, operators=tuple(ops))
    nodes, latency, joules = synthetic.tree(brokers=True)
    yield synthetic.chains(300, nodes, latency, joules, chains=6, seed=3, utilisation=0.1)


def test_the_fast_walk_is_the_device_walk():
    shifted = 0
    for problem in problems():
        fast, slow = walked(problem, True), walked(problem, False)
        if isinstance(slow[0], str):
            assert fast[0] == slow[0]
            continue
        assert fast[0].nodes == slow[0].nodes and fast[0].reasons == slow[0].reasons
        assert fast[1] == slow[1]                       # to the last bit
        assert np.array_equal(fast[2], slow[2])
        shifted += any("moved north" in r for r in slow[0].reasons.values())
    assert shifted >= 3                                 # the fallback was exercised


@pytest.mark.parametrize("fast", [True, False])
def test_a_shift_north_is_booked_alike_by_both_walks(fast, monkeypatch):
    """The worked example of test_policies (heavy and sink move north from g1) either way."""
    monkeypatch.setattr(edgeward.Walk, "fast", fast)
    decision = edgeward.EdgeWard().place(worked_example())
    assert decision.reasons["heavy"] == "moved north from g1 to cloud, g1 full"
