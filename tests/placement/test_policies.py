"""The shipped placement heuristics, decide() and the registry: edge-ward against a worked
example of iFogSim's algorithm, cloud-only, pins, candidates, Unplaceable, determinism, and
loading a user's `module:Class`."""

from __future__ import annotations

import pytest

from tests.placement.helpers import node, problem
from workloads.placement.evaluate import load
from workloads.placement.policy import Policy, PolicyError, decide, make_policy, policy_class
from workloads.placement.problem import Decision, Flow, Operator, Unplaceable


def worked_example():
    """Two gateways under one cloud VM; a light filter (three device flows, two at g1), a
    heavy operator reading it and a sink. Loads in reference-vCPU s/s; one path per flow.

    Nodes: g1, g2 capacity 1 (speed 1 x 1 core), cloud 8 (speed 2 x 4 cores).
    filter: cost 0.01 s, selectivity 0.5, flows 20/s at g1, 20/s at g1, 20/s at g2.
    heavy:  cost 0.04 s, reads filter.     sink: cost 0.01 s, reads heavy.
    Per path of one 20/s flow: filter 20 x 0.01 = 0.2, heavy 10 x 0.04 = 0.4, sink 0.1.

    Path 1 (g1, cloud). On g1: filter 0.2 fits, heavy 0.2 + 0.4 fits, sink 0.7 fits.
    Path 2 (g1, cloud). On g1: filter is there, 0.7 + 0.2 = 0.9 fits. heavy is there,
      0.9 + 0.4 = 1.3 > 1: shiftModuleNorth(heavy): findModulesToShift gives heavy and sink
      (downstream of it on g1); they leave g1 (left with filter's 0.4) and take 0.4 + 0.4 +
      0.1 = 0.9 to the parent, cloud (0.9 <= 8). Sink, now on the cloud, is skipped on g1;
      on the cloud it takes this path's 0.1: cloud 1.0.
    Path 3 (g2, cloud). On g2: filter is on no device of this path: 0.2 on g2. heavy is on
      the cloud: skipped on g2 (sink then waits for it). On the cloud: heavy +0.4, sink +0.1.
    Answer: filter on g1 and g2, heavy and sink on the cloud; loads g1 0.4, g2 0.2, cloud 1.5.
    (iFogSim's own books would show g1 0.2 and cloud 0.9: it adds no load to a module it
    finds on the device and keeps only the moved load after a shift; the placement is the
    same.)"""
    nodes = [node("g1", parent="cloud"), node("g2", parent="cloud"),
             node("cloud", "cloud_vm", speed=2.0, cores=4)]
    everywhere = ("g1", "g2", "cloud")
    ops = [Operator("filter", cost=0.01, selectivity=0.5, candidates=everywhere,
                    flows=(Flow("g1", 20.0, 100), Flow("g1", 20.0, 100), Flow("g2", 20.0, 100))),
           Operator("heavy", cost=0.04, upstream=("filter",), candidates=everywhere),
           Operator("sink", cost=0.01, upstream=("heavy",), candidates=everywhere)]
    return problem(ops, nodes, {("g1", "cloud"): 0.01, ("g2", "cloud"): 0.01})


def test_edge_ward_keeps_the_light_operator_on_the_gateways_and_shifts_the_heavy_north():
    p = worked_example()
    decision = decide(make_policy("edge-ward"), p)
    assert dict(decision.nodes) == {"filter": ("g1", "g2"), "heavy": ("cloud",),
                                    "sink": ("cloud",)}
    assert load(p, decision) == pytest.approx({"g1": 0.4, "g2": 0.2, "cloud": 1.5})
    assert decision.reasons["heavy"] == "moved north from g1 to cloud, g1 full"
    assert decision.reasons["sink"] == "moved north from g1 to cloud, g1 full"
    assert decision.reasons["filter"] == "the lowest node with room on each flow's path north"


def test_edge_ward_keeps_everything_low_when_the_gateway_holds_it():
    p = worked_example()
    light = Operator("heavy", cost=0.001, upstream=("filter",),
                     candidates=("g1", "g2", "cloud"))
    p = problem([p.operators[0], light, p.operators[2]], p.nodes,
                {("g1", "cloud"): 0.01, ("g2", "cloud"): 0.01})
    decision = decide(make_policy("edge-ward"), p)
    assert dict(decision.nodes) == {"filter": ("g1", "g2"), "heavy": ("g1", "g2"),
                                    "sink": ("g1", "g2")}


def test_edge_ward_skips_nodes_that_are_not_candidates():
    p = worked_example()
    ops = list(p.operators)
    ops[0] = Operator("filter", cost=0.01, selectivity=0.5, candidates=("g2", "cloud"),
                      flows=ops[0].flows)
    p = problem(ops, p.nodes, {("g1", "cloud"): 0.01, ("g2", "cloud"): 0.01})
    decision = decide(make_policy("edge-ward"), p)
    # g1 is no device for the filter: the paths from g1 put it on the cloud; the path from
    # g2 finds it there, on the path (iFogSim's isPlacedUpstream), and adds to it rather than
    # placing it on g2.
    assert dict(decision.nodes) == {"filter": ("cloud",), "heavy": ("cloud",),
                                    "sink": ("cloud",)}
    assert load(p, decision) == pytest.approx({"g1": 0.0, "g2": 0.0, "cloud": 0.6 + 1.2 + 0.3})


def test_edge_ward_says_cpu_when_the_top_is_full_too():
    nodes = [node("g1", parent="cloud"), node("cloud", "cloud_vm", cores=2)]
    ops = [Operator("a", cost=0.01, flows=(Flow("g1", 60.0, 100), Flow("g1", 60.0, 100)),
                    candidates=("g1", "cloud")),
           Operator("b", cost=0.02, upstream=("a",), candidates=("g1", "cloud"))]
    with pytest.raises(Unplaceable) as caught:
        make_policy("edge-ward").place(problem(ops, nodes, {("g1", "cloud"): 0.01}))
    assert caught.value.what == "cpu"
    assert "no node above has room" in caught.value.detail


def test_cloud_only_puts_every_operator_on_a_cloud_vm_the_first_with_room():
    nodes = [node("g1", parent="c1"), node("c1", "cloud_vm", cores=1),
             node("c2", "cloud_vm", cores=4)]
    ops = [Operator("a", cost=0.01, flows=(Flow("g1", 60.0, 100),), candidates=("g1", "c1",
                                                                                "c2")),
           Operator("b", cost=0.01, upstream=("a",), candidates=("g1", "c1", "c2")),
           Operator("c", cost=0.01, upstream=("b",), candidates=("g1",))]
    decision = decide(make_policy("cloud-only"),
                      problem(ops, nodes, {("g1", "c1"): 0.01, ("c1", "c2"): 0.001}))
    # a takes 0.6 of c1's 1.0; b (0.6 more) goes to c2; c has no cloud VM: its northmost.
    assert dict(decision.nodes) == {"a": ("c1",), "b": ("c2",), "c": ("g1",)}
    assert decision.reasons["c"].startswith("no cloud VM among its candidates")


class Elsewhere(Policy):
    """Every operator on its last candidate, pinned or not."""

    def place(self, problem):
        return Decision({op.name: op.candidates[-1:] for op in problem.operators})


class Outside(Policy):
    """Every operator on the problem's first node, a candidate or not."""

    def place(self, problem):
        return Decision({op.name: (problem.nodes[0].name,) for op in problem.operators})


def test_decide_keeps_the_pins_whatever_the_policy_says(heuristics):
    p = worked_example()
    pinned = Operator("filter", cost=0.01, selectivity=0.5, candidates=("g1", "g2", "cloud"),
                      flows=p.operators[0].flows, pinned=("g1", "g2"))
    p = problem([pinned, *p.operators[1:]], p.nodes,
                {("g1", "cloud"): 0.01, ("g2", "cloud"): 0.01})
    assert decide(Elsewhere(), p).nodes["filter"] == ("g1", "g2")
    assert decide(Elsewhere(), p).reasons["filter"] == "pinned by `on`"
    for name in [*heuristics, "optimal"]:
        assert decide(make_policy(name), p).nodes["filter"] == ("g1", "g2"), name


def test_decide_refuses_a_node_outside_the_candidates():
    p = worked_example()
    ops = [p.operators[0], Operator("heavy", cost=0.04, upstream=("filter",),
                                    candidates=("cloud",)), p.operators[2]]
    p = problem(ops, p.nodes, {("g1", "cloud"): 0.01, ("g2", "cloud"): 0.01})
    with pytest.raises(PolicyError, match=r"put operator heavy on g1, outside its candidates "
                                          r"\(cloud\)"):
        decide(Outside(), p)


def test_an_operator_too_heavy_for_every_node_is_unplaceable_for_cpu(heuristics):
    p = worked_example()
    ops = [p.operators[0], Operator("heavy", cost=2.0, upstream=("filter",),
                                    candidates=("g1", "g2", "cloud")), p.operators[2]]
    p = problem(ops, p.nodes, {("g1", "cloud"): 0.01, ("g2", "cloud"): 0.01})
    for name in [*heuristics, "optimal"]:
        with pytest.raises(Unplaceable) as caught:
            decide(make_policy(name), p)
        assert caught.value.operator == "heavy", name
        assert caught.value.what == "cpu", name
        if name not in ("optimal", "edge-ward"):
            # heavy reads 0.5 x 60/s: it needs 30 x 2 s = 60, more than any node has.
            assert caught.value.detail.startswith("needs 60 reference-vCPU s/s"), name


def test_the_same_problem_gives_the_same_decision(heuristics, random_small):
    for name in heuristics:
        first = decide(make_policy(name), random_small)
        again = decide(make_policy(name), random_small)
        assert first.nodes == again.nodes and first.reasons == again.reasons, name


@pytest.mark.parametrize("name", ["latency-aware", "network-aware", "energy-aware",
                                  "round-robin", "cloud-only"])
def test_ties_go_to_the_first_node_in_the_problem_order(name):
    """Two identical cloud VMs, equally far from the gateway: the first listed wins, in
    either order."""
    for first, second in (("c1", "c2"), ("c2", "c1")):
        nodes = [node("g", parent=first, cores=0), node(first, "cloud_vm", cores=4),
                 node(second, "cloud_vm", cores=4)]
        ops = [Operator("a", cost=0.01, flows=(Flow("g", 10.0, 100),),
                        candidates=("c1", "c2"))]
        p = problem(ops, nodes, {("g", "c1"): 0.01, ("g", "c2"): 0.01})
        assert decide(make_policy(name), p).nodes["a"] == (first,), (name, first)


def test_energy_aware_avoids_battery_nodes_while_another_has_room():
    nodes = [node("g1", cores=2, battery=1000.0, power_idle=1.0, power_busy=2.0),
             node("g2", cores=2, power_idle=5.0, power_busy=10.0)]
    ops = [Operator("a", cost=0.01, flows=(Flow("g1", 10.0, 100),), candidates=("g1", "g2"))]
    p = problem(ops, nodes, {("g1", "g2"): 0.01})
    assert decide(make_policy("energy-aware"), p).nodes["a"] == ("g2",)
    full = [nodes[0], node("g2", cores=0, power_idle=5.0, power_busy=10.0)]
    assert decide(make_policy("energy-aware"), problem(ops, full, {("g1", "g2"): 0.01})) \
        .nodes["a"] == ("g1",)


def test_latency_aware_follows_its_writer_and_the_faster_node():
    nodes = [node("g1", parent="c"), node("g2", parent="c"),
             node("c", "cloud_vm", speed=4.0, cores=4)]
    ops = [Operator("a", cost=0.001, flows=(Flow("g1", 10.0, 100),), pinned=("g2",),
                    candidates=("g1", "g2", "c")),
           Operator("b", cost=0.001, upstream=("a",), candidates=("g1", "c")),
           Operator("c", cost=0.1, upstream=("b",), candidates=("g1", "c"))]
    p = problem(ops, nodes, {("g1", "c"): 0.01, ("g2", "c"): 0.01})
    decision = decide(make_policy("latency-aware"), p)
    # b: on g1 20 ms from a (g2) + 1 ms, on c 10 ms + 0.25 ms. c: on c 0 + 25 ms, on g1
    # 10 ms + 100 ms.
    assert dict(decision.nodes) == {"a": ("g2",), "b": ("c",), "c": ("c",)}


def test_a_user_policy_loads_from_module_and_class():
    cls = policy_class("tests.placement.example_policy:FirstCandidate")
    assert decide(cls(), worked_example()).nodes["heavy"] == ("g1",)


@pytest.mark.parametrize(("name", "said"), [
    ("no-such-policy", r"unknown placement policy 'no-such-policy'; known: .*cloud-only"),
    ("tests.placement.no_such_module:X",
     r"module tests.placement.no_such_module does not import \(ModuleNotFoundError"),
    ("tests.placement.broken_policy:X",
     r"module tests.placement.broken_policy does not import \(RuntimeError: this module is "
     r"broken on purpose\)"),
    ("tests.placement.example_policy:NotAPolicy",
     r"tests.placement.example_policy has no Policy subclass named NotAPolicy"),
])
def test_a_policy_that_cannot_be_had_is_named_in_the_error(name, said):
    with pytest.raises(PolicyError, match=said):
        policy_class(name)


def test_settings_a_policy_refuses_are_named():
    with pytest.raises(PolicyError, match=r"takes no settings, given speed"):
        make_policy("edge-ward", {"speed": 1})
    with pytest.raises(PolicyError, match=r"time_limit must be a positive number"):
        make_policy("optimal", {"time_limit": -1})


@pytest.mark.parametrize("name", ["latency-aware", "network-aware"])
def test_the_greedy_costs_route_through_the_broker_as_the_backends_do(name):
    """g1 and g2 1 ms apart, each 10 ms from the broker node b, b 1 ms from the cloud VM c:
    a message from g1 to an instance on g2 goes g1 -> b -> g2 (20 ms), to one on c 11 ms."""
    def nodes(broker):
        return [node("g1", cores=2, broker=broker), node("g2", cores=2, broker=broker),
                node("b", "broker", cores=0, broker=broker),
                node("c", "cloud_vm", cores=2, broker=broker)]
    ops = [Operator("a", cost=0.001, flows=(Flow("g1", 10.0, 100),), pinned=("g1",),
                    candidates=("g1",)),
           Operator("r", cost=0.001, upstream=("a",), candidates=("g2", "c"))]
    links = {("g1", "g2"): 0.001, ("g1", "b"): 0.01, ("g2", "b"): 0.01, ("b", "c"): 0.001}
    assert decide(make_policy(name), problem(ops, nodes("b"), links)).nodes["r"] == ("c",)
    # With no broker the messages take the direct 1 ms link to g2.
    assert decide(make_policy(name), problem(ops, nodes(None), links)).nodes["r"] == ("g2",)
