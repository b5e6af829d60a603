"""The objective every placement is scored by, against numbers computed by hand: where flows
go (nearest instance, ties by node order), each node's load, latency, network usage, watts,
and overload scoring above any feasible answer."""

from __future__ import annotations

import pytest

from tests.placement.helpers import node, problem
from workloads.placement.evaluate import assign, ceiling, load, metrics, objective
from workloads.placement.problem import Decision, Flow, Operator, Weights
from workloads.placement.tables import Tables


def two_nodes(g_cost: float = 0.02):
    """a: a gateway (capacity 1, 2 W idle, 6 W busy); b: a cloud VM (speed 2 x 2 cores,
    10 W idle, 30 W busy); 10 ms and 1 uJ per bit between them. f (0.01 s per message,
    selectivity 0.5, 100 B out) reads 10/s of 200 B at a; g reads f."""
    nodes = [node("a", power_idle=2.0, power_busy=6.0),
             node("b", "cloud_vm", speed=2.0, cores=2, power_idle=10.0, power_busy=30.0)]
    ops = [Operator("f", cost=0.01, selectivity=0.5, out_size=100,
                    flows=(Flow("a", 10.0, 200),), candidates=("a", "b")),
           Operator("g", cost=g_cost, upstream=("f",), candidates=("a", "b"))]
    return problem(ops, nodes, {("a", "b"): 0.01}, {("a", "b"): 1e-6},
                   weights=Weights(latency=1.0, network=0.01, energy=0.001))


def test_the_metrics_of_a_two_node_placement_are_the_hand_computed_ones():
    p = two_nodes()
    decision = Decision({"f": ("a",), "g": ("b",)})
    figures = metrics(p, decision)
    # A message: f on a (0 s away, 0.01 s / speed 1), 10 ms to b, g there (0.02 s / 2).
    assert figures.latency == pytest.approx(0.0 + 0.01 + 0.01 + 0.01)
    # 2000 B/s travel 0 s; f's output, 5/s x 100 B = 500 B/s, 10 ms.
    assert figures.network == pytest.approx(500 * 0.01)
    # a: 10/s x 0.01 = 0.1 of 1; b: 5/s x 0.02 = 0.1 of 4.
    assert load(p, decision) == pytest.approx({"a": 0.1, "b": 0.1})
    # a 2 + 4 x 0.1, b 10 + 20 x 0.1 / 4, the transfer 500 x 8 bit x 1e-6 J.
    assert figures.power == pytest.approx(2.4 + 10.5 + 0.004)
    assert figures.overload == 0.0
    assert objective(p, decision) == pytest.approx(0.03 + 0.01 * 5.0 + 0.001 * 12.904)


def test_a_node_hosting_nothing_draws_no_power_and_a_local_hop_costs_nothing():
    p = two_nodes()
    figures = metrics(p, Decision({"f": ("a",), "g": ("a",)}))
    assert figures.latency == pytest.approx(0.01 + 0.02)
    assert figures.network == 0.0
    assert figures.power == pytest.approx(2.0 + 4.0 * 0.2)


def test_overload_scores_above_every_feasible_answer():
    p = two_nodes(g_cost=0.2)          # g needs 5/s x 0.2 = 1.0: on a with f, 1.1 of 1
    over = Decision({"f": ("a",), "g": ("a",)})
    assert metrics(p, over).overload == pytest.approx(0.1)
    feasible = [Decision({"f": (x,), "g": (y,)}) for x in "ab" for y in "ab" if (x, y) !=
                ("a", "a")]
    bound = ceiling(Tables.of(p))
    assert all(objective(p, d) < bound for d in feasible)
    assert objective(p, over) > bound + 1e5


def test_flows_go_to_the_instance_on_their_node_else_the_nearest_ties_by_node_order():
    nodes = [node("x"), node("y"), node("z"), node("w")]
    ops = [Operator("f", cost=0.001, selectivity=2.0, out_size=50,
                    flows=(Flow("x", 1.0, 100), Flow("z", 2.0, 100), Flow("w", 4.0, 100)),
                    candidates=("x", "y", "z", "w")),
           Operator("g", cost=0.001, upstream=("f",), candidates=("x", "y", "z", "w"))]
    # z is 10 ms from x and from y, w 5 ms from y: z's flow goes to x (first), w's to y.
    p = problem(ops, nodes, {("z", "x"): 0.01, ("z", "y"): 0.01, ("w", "y"): 0.005})
    served = assign(p, Decision({"f": ("x", "y"), "g": ("y",)}))
    assert served["f"] == {"x": (Flow("x", 1.0, 100), Flow("z", 2.0, 100)),
                           "y": (Flow("w", 4.0, 100),)}
    assert served["g"] == {"y": (Flow("x", 6.0, 50), Flow("y", 8.0, 50))}
    assert load(p, Decision({"f": ("x", "y"), "g": ("y",)})) == pytest.approx(
        {"x": 0.003, "y": 0.004 + 0.014, "z": 0.0, "w": 0.0})
