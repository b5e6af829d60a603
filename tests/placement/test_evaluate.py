"""The objective every placement is scored by, against numbers computed by hand: where flows
go (the instance on their node, else equal shares through the node's broker), each node's
load, latency, network usage, watts, and overload scoring above any feasible answer."""

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


def through_broker(**brokers):
    """g1 and g2 10 ms from the broker node b, b 8 ms from c1 (speed 2) and 3 ms from c2, and
    a direct 5 ms link g1-c1 (shorter than through b); 1 uJ/bit a gateway's link to b, 0.1
    uJ/bit b-c1, 0.2 uJ/bit b-c2, 5 uJ/bit g1-c1. Every node's broker is b unless `brokers` says
    otherwise (None: none)."""
    names = ("g1", "g2", "b", "c1", "c2")
    speed = {"c1": 2.0}
    nodes = [node(n, "broker" if n == "b" else "gateway", speed=speed.get(n, 1.0), cores=2,
                  broker=brokers.get(n, "b")) for n in names]
    return nodes, {("g1", "b"): 0.01, ("g2", "b"): 0.01, ("b", "c1"): 0.008,
                   ("b", "c2"): 0.003, ("g1", "c1"): 0.005}, \
        {("g1", "b"): 1e-6, ("g2", "b"): 1e-6, ("b", "c1"): 1e-7, ("b", "c2"): 2e-7,
         ("g1", "c1"): 5e-6}


def test_a_flow_without_a_local_instance_goes_half_to_each_of_two_through_the_broker():
    nodes, links, joules = through_broker()
    ops = [Operator("f", cost=0.01, flows=(Flow("g1", 10.0, 200),), candidates=("c1", "c2"))]
    p = problem(ops, nodes, links, joules, weights=Weights(1.0, 0.01, 0.001))
    decision = Decision({"f": ("c1", "c2")})
    # 5/s each, over g1 -> b -> c1 (10 + 8 ms) and g1 -> b -> c2 (10 + 3 ms), not the
    # direct 5 ms link: half the messages wait 18 ms and 5 ms on c1, half 13 ms and 10 ms.
    assert assign(p, decision)["f"] == {"c1": (Flow("g1", 5.0, 200),),
                                        "c2": (Flow("g1", 5.0, 200),)}
    assert load(p, decision) == pytest.approx({"g1": 0, "g2": 0, "b": 0, "c1": 0.05,
                                               "c2": 0.05})
    figures = metrics(p, decision)
    assert figures.latency == pytest.approx(0.5 * (0.018 + 0.005) + 0.5 * (0.013 + 0.01))
    # 1000 B/s on each route: 1000 x 18 ms + 1000 x 13 ms.
    assert figures.network == pytest.approx(18.0 + 13.0)
    # Idle power 0; 8000 bit/s x (1 + 0.1) uJ and 8000 bit/s x (1 + 0.2) uJ.
    assert figures.power == pytest.approx(8000 * 1.1e-6 + 8000 * 1.2e-6)
    # With no broker at g1 the shares go straight: 5 ms to c1, 13 ms to c2 (g1-b-c2).
    nodes, links, joules = through_broker(g1=None)
    figures = metrics(problem(ops, nodes, links, joules), decision)
    assert figures.latency == pytest.approx(0.5 * (0.005 + 0.005) + 0.5 * (0.013 + 0.01))


def test_a_flow_at_a_node_with_an_instance_stays_there_the_others_split_through_the_broker():
    nodes, links, _ = through_broker()
    ops = [Operator("f", cost=0.01, selectivity=0.5, out_size=100, candidates=("g1", "c1"),
                    flows=(Flow("g1", 10.0, 200), Flow("g2", 20.0, 200))),
           Operator("g", cost=0.02, upstream=("f",), candidates=("c1",))]
    p = problem(ops, nodes, links)
    decision = Decision({"f": ("g1", "c1"), "g": ("c1",)})
    # f: g1's flow on g1 (0 s); g2's 20/s half to g1 (g2 -> b -> g1, 20 ms), half to c1
    # (g2 -> b -> c1, 18 ms). f's output: 20/s served on g1 -> 10/s, to g through b (18 ms,
    # not the direct 5 ms); 10/s on c1 -> 5/s, read there (0 s).
    served = assign(p, decision)
    assert served["f"] == {"g1": (Flow("g1", 10.0, 200), Flow("g2", 10.0, 200)),
                           "c1": (Flow("g2", 10.0, 200),)}
    assert served["g"] == {"c1": (Flow("g1", 10.0, 100), Flow("c1", 5.0, 100))}
    assert load(p, decision) == pytest.approx({"g1": 0.2, "g2": 0.0, "b": 0.0,
                                               "c1": 0.1 + 0.3, "c2": 0.0})
    figures = metrics(p, decision)
    # Latency weights: g1's flow 1/3, g2's 2/3. f: 2/3 x (20 + 18) / 2 ms on the way,
    # 2/3 x 10 ms on g1 and 1/3 x 5 ms on c1; g: 2/3 x 18 ms on the way, 20 / 2 ms on c1.
    assert figures.latency == pytest.approx(2 / 3 * 0.019 + 2 / 3 * 0.01 + 1 / 3 * 0.005
                                            + 2 / 3 * 0.018 + 0.01)
    assert figures.latency == pytest.approx(0.043)
    # 2000 B/s x 20 ms + 2000 B/s x 18 ms (g2's flow), 1000 B/s x 18 ms (f's output on g1).
    assert figures.network == pytest.approx(40.0 + 36.0 + 18.0)


def test_a_node_naming_a_broker_outside_the_problem_is_refused():
    with pytest.raises(ValueError, match="node g1 names broker nowhere, not a node"):
        problem([], [node("g1", broker="nowhere")], {})
