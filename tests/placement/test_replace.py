"""Re-placement at run time (`placement.replace`, workloads.placement.replace and the model's
sim.features.replacement): the policy asked every period with what the run observed, the
hysteresis and headroom that keep a load at a node's capacity from moving an operator back
and forth, the move budget, failed moves undone, the record that replays the run, and the
refusals."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from experiments.loader import parse_text
from experiments.runner import run_experiment
from tests.placement.helpers import node, problem
from topologies.errors import SpecError
from workloads.placement.base import Policy
from workloads.placement.problem import Decision, Flow, Operator
from workloads.placement.replace import Move, Observation, Replanner, observed, replay
from workloads.placement.spec import Replace

# Two districts: gw-1's 20 sensors send 10/s each, then 30/s from t = 10 s to 20 s, 30 s to
# 40 s (bursty, `high` the first phase); gw-2's 20 send 10/s. A filter of 5 ms a reading:
# 200/s on a Pi 4 (1.8 reference vCPUs) is 1.0; the burst's 600/s is 3.0, which only the
# cloud VM (4.0) holds.
EXPERIMENT = """
name: replaced
topology:
  name: two-districts
  nodes:
    - {name: a, kind: device, replicas: 20}
    - {name: b, kind: device, replicas: 20}
    - {name: gw-1, kind: gateway, profile: rpi4}
    - {name: gw-2, kind: gateway, profile: rpi4}
    - {name: broker-1, kind: broker, profile: vm.medium}
    - {name: cloud-1, kind: cloud_vm, profile: vm.large}
  links:
    - {from: a-*, to: gw-1, latency: 5ms}
    - {from: b-*, to: gw-2, latency: 5ms}
    - {from: gw-*, to: broker-1, latency: 20ms, bandwidth: 20Mbit}
    - {from: broker-1, to: cloud-1, latency: 1ms, bandwidth: 1Gbit}
workload:
  name: two
  streams:
    - {name: busy, sources: a-*, rate: 10/s, size: 180B,
       shape: {kind: bursty, on: 10s, off: 10s, high: 1, low: 3}}
    - {name: calm, sources: b-*, rate: 10/s, size: 180B}
pipeline:
  - {name: filter, task: range_filter, on: auto, reads: [busy, calm], writes: kept, cost: 5ms,
     selectivity: 0.2}
  - {name: store, task: passthrough, on: cloud-1, reads: kept, cost: 50us}
placement: {policy: edge-ward, replace: {period: 2s}}
run: {backend: sim, duration: 30s, seed: 7, drain: 2s}
"""


def test_a_burst_sends_the_gateways_filter_north_and_its_end_brings_it_back(tmp_path) -> None:
    experiment = parse_text(EXPERIMENT)
    assert experiment.points[0].placement.nodes["filter"] == ("gw-1", "gw-2")
    (outcome,) = run_experiment(experiment, tmp_path)
    assert outcome.error is None, outcome.error
    moves = pd.read_parquet(outcome.folder / "migrations.parquet")
    # Observed at 12 s (the burst's first period), back at 22 s (the first calm period).
    assert moves[["operator", "source", "target", "start", "status"]].values.tolist() == [
        ["filter", "gw-1", "cloud-1", 12.0, "done"], ["filter", "cloud-1", "gw-1", 22.0, "done"]]
    steps = pd.read_parquet(outcome.folder / "replacements.parquet")
    assert steps["t"].tolist() == [2.0 * k for k in range(1, 15)]  # none at the run's end
    assert steps["taken"].sum() == 2
    assert steps.loc[steps["taken"], "moves"].tolist() == [
        "filter: gw-1 -> cloud-1", "filter: cloud-1 -> gw-1"]
    placements = pd.read_parquet(outcome.folder / "placements.parquet")
    later = placements[placements["t"] > 0]
    assert later[["t", "operator", "nodes"]].values.tolist() == [
        [12.0, "filter", "gw-2,cloud-1"], [22.0, "filter", "gw-1,gw-2"]]
    assert (later["policy"] == "edge-ward").all()
    manifest = json.loads((outcome.folder / "manifest.json").read_text())
    assert manifest["facts"]["replacement"] == {"period": 2.0, "hysteresis": 0.1, "steps": 14,
                                                "taken": 2, "moves": 2, "failed": 0}


def test_the_runs_observations_replay_its_steps_offline(tmp_path) -> None:
    experiment = parse_text(EXPERIMENT)
    (outcome,) = run_experiment(experiment, tmp_path)
    steps = pd.read_parquet(outcome.folder / "replacements.parquet")
    start = experiment.points[0].replanning
    again = replay(start.planner().policy, start.problem, start.decision, start.replace,
                   map(Observation.from_json, steps["observation"]), start.movable)
    assert [s.taken for s in again] == steps["taken"].tolist()
    assert ["; ".join(map(str, s.moves)) for s in again] == steps["moves"].tolist()
    assert [s.reason for s in again] == steps["reason"].tolist()


def test_a_steady_load_moves_nothing(tmp_path) -> None:
    text = EXPERIMENT.replace("low: 3", "low: 1")
    (outcome,) = run_experiment(parse_text(text), tmp_path)
    steps = pd.read_parquet(outcome.folder / "replacements.parquet")
    assert len(steps) == 14 and not steps["taken"].any()
    assert len(pd.read_parquet(outcome.folder / "migrations.parquet")) == 0


def test_re_placement_off_the_model_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecError) as caught:
        parse_text(EXPERIMENT.replace("backend: sim", "backend: hybrid"))
    assert caught.value.path == ("placement", "replace")
    assert "run.backend sim or emu" in caught.value.expected


def test_a_period_of_zero_is_refused() -> None:
    with pytest.raises(SpecError) as caught:
        parse_text(EXPERIMENT.replace("period: 2s", "period: 0s"))
    assert caught.value.path[:3] == ("placement", "replace", "period")


# -- the planner alone, on a problem by hand ----------------------------------------------

def one_gateway(rate: float):
    """A filter of 1 ms a message on gw-1 (capacity 1.0) or the cloud (4.0), its flow at
    gw-1: at `rate` 1,000/s it fills gw-1 exactly."""
    nodes = [node("gw-1", parent="cloud"), node("cloud", "cloud_vm", cores=4)]
    op = Operator("filter", 0.001, flows=(Flow("gw-1", rate, 100, "s"),),
                  candidates=("gw-1", "cloud"))
    return problem([op], nodes, {("gw-1", "cloud"): 0.02})


class Fixed(Policy):
    """A stand-in policy (for the planner's own logic): answers `nodes` at run time."""

    def __init__(self, nodes: dict[str, tuple[str, ...]]):
        self.nodes = nodes

    def place(self, problem):
        return Decision(dict(self.nodes))


def observation(t: float, rate: float, **fields) -> Observation:
    return Observation(t, {("s", "gw-1"): rate}, **fields)


def walk(hysteresis: float, rates: list[float]) -> list[tuple[Move, ...]]:
    """Edge-ward re-placing the filter at each rate in turn, every move ending in time."""
    from workloads.placement.policy import decide, make_policy

    policy = make_policy("edge-ward")
    start = one_gateway(rates[0])
    planner = Replanner(policy, start, decide(policy, start),
                        Replace(period=1.0, hysteresis=hysteresis))
    found = []
    for t, rate in enumerate(rates[1:], 1):
        step = planner.step(observation(t, rate))
        for move in step.moves:
            planner.ended(move, True)
        found.append(step.moves)
    return found


def test_a_load_hovering_at_capacity_moves_once_with_headroom_and_every_period_without() -> None:
    hovering = [900.0] + [1050.0, 950.0] * 4  # 105 % and 95 % of gw-1 in turn
    without = walk(0.0, hovering)
    assert sum(map(len, without)) == 8  # off at each 105 %, back at each 95 %
    with_headroom = walk(0.1, hovering)
    assert [m for step in with_headroom for m in step] == [Move("filter", "gw-1", "cloud")]


def test_the_move_budget_and_a_moving_operator_hold_moves_back() -> None:
    nodes = [node(f"gw-{i}") for i in range(1, 5)] + [node("cloud", "cloud_vm", cores=8)]
    op = Operator("filter", 0.001, flows=tuple(Flow(f"gw-{i}", 100.0, 100, "s")
                                               for i in (1, 2)),
                  candidates=tuple(n.name for n in nodes))
    start = problem([op], nodes, {(f"gw-{i}", "cloud"): 0.02 for i in range(1, 5)})
    # The answer moves both instances, far from their flows (a worse objective is refused,
    # so the answer's must be better: instances where the flows are, from far ones).
    first = Decision({"filter": ("gw-3", "gw-4")})
    planner = Replanner(Fixed({"filter": ("gw-1", "gw-2")}), start, first,
                        Replace(period=1.0, moves=1))
    rates = {("s", "gw-1"): 100.0, ("s", "gw-2"): 100.0}
    step = planner.step(Observation(1.0, rates))
    assert step.moves == (Move("filter", "gw-3", "gw-1"),)  # one of two: the budget
    step = planner.step(Observation(2.0, rates))
    assert step.moves == () and "filter is moving" in step.reason
    assert step.observation.moving == {"filter"}
    planner.ended(Move("filter", "gw-3", "gw-1"), True)
    step = planner.step(Observation(3.0, rates))
    assert step.moves == (Move("filter", "gw-4", "gw-2"),)
    assert planner.current["filter"] == ("gw-1", "gw-2")


def test_a_failed_move_is_undone_and_an_uneven_answer_says_why_it_waits() -> None:
    start = one_gateway(500.0)
    planner = Replanner(Fixed({"filter": ("cloud",)}), start, Decision({"filter": ("gw-1",)}),
                        Replace(period=1.0, hysteresis=0.0))
    step = planner.step(observation(1.0, 1500.0))  # gw-1 over its capacity: to the cloud
    assert step.moves == (Move("filter", "gw-1", "cloud"),)
    failed = planner.ended(step.moves[0], False)
    assert failed == step.moves[0]
    planner.policy = Fixed({"filter": ("gw-1",)})
    step = planner.step(observation(2.0, 1500.0, failed=(failed,)))
    assert planner.current["filter"] == ("gw-1",)  # the failed move undone
    assert step.moves == () and "saves 0.0%" in step.reason  # the answer is what runs
    # One instance where two run: a flow entering at the cloud goes in equal shares to the
    # near gw-1 and the far gw-2, and the answer keeps gw-1's alone; but a move takes one
    # instance to one node, so the answer waits, and says why.
    nodes = [node("gw-1", parent="cloud"), node("gw-2", parent="cloud"),
             node("cloud", "cloud_vm", cores=4)]
    op = Operator("filter", 0.001, flows=(Flow("cloud", 100.0, 100, "s"),),
                  candidates=("gw-1", "gw-2"))
    two = problem([op], nodes, {("gw-1", "cloud"): 0.02, ("gw-2", "cloud"): 0.2})
    planner = Replanner(Fixed({"filter": ("gw-1",)}), two, Decision({"filter": ("gw-1", "gw-2")}),
                        Replace(period=1.0))
    step = planner.step(Observation(1.0, {("s", "cloud"): 100.0}))
    assert step.moves == () and "filter on 1 nodes where it runs on 2" in step.reason


def test_the_problem_as_observed_has_the_rates_seen_and_no_down_candidate() -> None:
    start = one_gateway(500.0)
    seen = observed(start, Observation(1.0, {("s", "gw-1"): 700.0, ("other", "gw-1"): 9.0},
                                       frozenset({"cloud"})))
    (op,) = seen.operators
    assert op.flows == (Flow("gw-1", 700.0, 100, "s"),)  # a stream it does not read: none
    assert op.candidates == ("gw-1",)
    assert math.isclose(start.operators[0].flows[0].rate, 500.0)  # the start is kept


def test_validate_says_how_it_re_places_and_what_it_may_move() -> None:
    from experiments.placement import described

    point = parse_text(EXPERIMENT).points[0]
    line = described(point.placement, point.replanning)
    assert line.endswith("asked again every 2 s (hysteresis 10%, at most 1 move(s) a period: "
                         "filter)")  # store is pinned: not the re-placement's to move
    assert point.replanning.movable == {"filter"}
