"""The `placement:` block of an experiment: decided once in the loader, the same for every
backend, written as placements.parquet, and every bad input refused naming file, field and
value (experiments.placement)."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.loader import parse_text
from experiments.placement import build_problem
from experiments.runner import run_experiment
from topologies.errors import SpecError
from topologies.model import expand

# The lesson's city: 200 sensors at 1/s on four Pi gateways (50 each), a filter keeping one
# reading in five, a store on the cloud VM.
BASE = """
name: placed
topology: smart-city
workload: city-sensors
pipeline:
  - {name: filter, task: range_filter, on: auto, reads: city, writes: kept, cost: 150us,
     selectivity: 0.2}
  - {name: store, task: passthrough, on: cloud-1, reads: kept, cost: 50us}
placement: {policy: POLICY}
run: {backend: BACKEND, duration: 5s, seed: 7, drain: 2s}
"""


def experiment(policy: str = "edge-ward", backend: str = "sim", text: str = BASE):
    return parse_text(text.replace("POLICY", policy).replace("BACKEND", backend))


def refused(text: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        parse_text(text)
    return caught.value


def test_edge_ward_puts_the_light_filter_on_every_gateway_and_the_pin_stays() -> None:
    point = experiment("edge-ward").points[0]
    # 50 readings/s x 150 us = 7.5 ms of a reference vCPU per second on each Pi 4 path:
    # each gateway (1.8 reference vCPUs) holds its own flow's filter.
    assert point.spec.pipeline[0].on == ["gw-1", "gw-2", "gw-3", "gw-4"]
    assert point.spec.pipeline[1].on == ["cloud-1"]
    assert point.placement.nodes == {"filter": ("gw-1", "gw-2", "gw-3", "gw-4"),
                                     "store": ("cloud-1",)}
    assert point.placement.policy == "edge-ward"
    assert point.placement.reasons["store"] == "pinned by `on`"


def test_cloud_only_puts_the_filter_on_the_cloud_vm() -> None:
    point = experiment("cloud-only").points[0]
    assert point.spec.pipeline[0].on == ["cloud-1"]


def test_the_decision_is_the_same_whatever_the_backend() -> None:
    decisions = [experiment("edge-ward", backend).points[0].placement
                 for backend in ("sim", "emu")]
    assert all(d.nodes == decisions[0].nodes and d.objective == decisions[0].objective
               and d.policy == decisions[0].policy for d in decisions)


def test_a_sim_run_writes_the_placements_table(tmp_path) -> None:
    (outcome,) = run_experiment(experiment("edge-ward"), tmp_path)
    assert outcome.error is None, outcome.error
    table = pd.read_parquet(outcome.folder / "placements.parquet")
    assert table.set_index("operator")["nodes"].to_dict() == {
        "filter": "gw-1,gw-2,gw-3,gw-4", "store": "cloud-1"}
    assert (table["policy"] == "edge-ward").all() and (table["t"] == 0).all()
    assert table["objective"].nunique() == 1 and table["decision_time"].ge(0).all()
    # The filter ran where the policy put it: every gateway's readings filtered there.
    messages = pd.read_parquet(outcome.folder / "messages.parquet")
    assert len(messages) > 0


def test_a_run_without_a_placement_block_has_an_empty_placements_table(tmp_path) -> None:
    text = BASE.replace("on: auto", "on: gateways").replace("placement: {policy: POLICY}\n", "")
    (outcome,) = run_experiment(experiment(text=text), tmp_path)
    assert outcome.error is None
    assert len(pd.read_parquet(outcome.folder / "placements.parquet")) == 0


def test_on_auto_without_a_placement_block_is_refused() -> None:
    error = refused(BASE.replace("placement: {policy: POLICY}\n", "").replace("BACKEND", "sim"))
    assert error.path == ("pipeline", 0, "on") and error.value == "auto"
    assert "placement" in error.expected


def test_an_unknown_policy_is_refused_naming_the_known_ones() -> None:
    error = refused(BASE.replace("POLICY", "nearest").replace("BACKEND", "sim"))
    assert error.path == ("placement", "policy") and error.value == "nearest"
    assert "edge-ward" in error.expected and "module:Class" in error.expected


def test_a_policy_module_that_does_not_import_is_refused() -> None:
    error = refused(BASE.replace("POLICY", "no_such_module_x:Mine").replace("BACKEND", "sim"))
    assert error.path == ("placement", "policy")
    assert "no_such_module_x" in error.expected and "does not import" in error.expected


def test_a_pin_outside_the_candidates_is_refused() -> None:
    text = BASE.replace("placement: {policy: POLICY}",
                        "placement: {policy: edge-ward, candidates: [gateways]}")
    error = refused(text.replace("BACKEND", "sim"))
    assert error.path == ("pipeline", 1, "on", 0) and error.value == "cloud-1"
    assert "candidates" in error.expected


def test_among_on_a_pinned_operator_is_refused() -> None:
    text = BASE.replace("on: cloud-1, reads: kept", "on: cloud-1, among: [gateways], reads: kept")
    error = refused(text.replace("POLICY", "edge-ward").replace("BACKEND", "sim"))
    assert error.path == ("pipeline", 1, "among")


def test_an_operator_that_fits_nowhere_is_refused_naming_the_cpu() -> None:
    # 10 s of a reference vCPU per reading, 50 readings/s a gateway: 500 vCPUs wanted.
    text = BASE.replace("cost: 150us", "cost: 10s")
    error = refused(text.replace("POLICY", "edge-ward").replace("BACKEND", "sim"))
    assert error.path == ("pipeline", 0) and error.value == "filter"
    assert "cpu" in error.expected


def test_among_limits_the_policys_choice() -> None:
    text = BASE.replace("on: auto, reads: city", "on: auto, among: [gw-2, cloud-1], reads: city")
    point = experiment("round-robin", text=text).points[0]
    assert set(point.spec.pipeline[0].on) <= {"gw-2", "cloud-1"}
    assert point.spec.pipeline[0].among is None  # resolved: the backends see nodes only


def test_the_docs_own_policy_runs_as_written(tmp_path, monkeypatch) -> None:
    """docs/placement.md's example policy, taken from the page, named `module:Class`."""
    import re
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "placement.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", page, re.S)
    (tmp_path / "my_policies.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    point = experiment("my_policies:Biggest").points[0]
    # cloud-1 (a vm.large: 4 cores of 1.0) has more capacity than a Pi 4 (4 x 0.45).
    assert point.spec.pipeline[0].on == ["cloud-1"]
    assert point.placement.reasons["filter"] == "most capacity (4 vCPU)"
    assert point.placement.policy == "Biggest"


def test_every_node_of_the_problem_publishes_through_its_nearest_broker() -> None:
    spec = experiment("latency-aware").points[0].spec
    problem = build_problem(spec, expand(spec.topology))
    # The broker node is in the problem (no operator's candidate), every node's broker.
    assert [n.name for n in problem.nodes] == ["gw-1", "gw-2", "gw-3", "gw-4", "broker-1",
                                               "cloud-1"]
    assert {n.broker for n in problem.nodes} == {"broker-1"}
    assert all("broker-1" not in op.candidates for op in problem.operators)
    # The parents stay among the hosts: a gateway's next host north is the cloud VM.
    assert problem.nodes[0].parent == "cloud-1"


def test_default_candidates_a_topology_lacks_are_skipped_and_none_at_all_refused() -> None:
    # smart-city without its cloud VM: `cloud` (a default candidate) names nothing, so the
    # filter goes to a gateway; among only `cloud`, it has no candidate at all.
    text = BASE.replace("on: cloud-1, reads: kept", "on: gw-1, reads: kept")
    no_cloud = text.replace("topology: smart-city", """topology:
  name: city-without-cloud
  nodes:
    - {name: sensor, kind: device, replicas: 8}
    - {name: gw, kind: gateway, profile: rpi4, replicas: 2}
    - {name: broker-1, kind: broker, profile: vm.medium}
  links:
    - {from: sensor-*, to: gw-*, mode: spread, latency: 5ms}
    - {from: gw-*, to: broker-1, latency: 20ms}""")
    point = experiment("round-robin", text=no_cloud).points[0]
    assert set(point.spec.pipeline[0].on) <= {"gw-1", "gw-2"}
    only_cloud = no_cloud.replace("on: auto, reads: city", "on: auto, among: [cloud], reads: city")
    error = refused(only_cloud.replace("POLICY", "round-robin").replace("BACKEND", "sim"))
    assert error.path == ("pipeline", 0, "among") and "candidates" in error.expected


def test_a_calibrated_run_places_with_the_costs_the_calibrated_model_charges() -> None:
    """run.calibration: the problem's costs and CPUs are the calibrated model's (sim.costs
    with the profile), not the written ones: the filter's written 150 us is the measure's."""
    from sim.costs import Costs
    from workloads import calibration

    text = BASE.replace("run: {backend: BACKEND,",
                        "run: {backend: BACKEND, calibration: reference,")
    point = experiment("edge-ward", text=text).points[0]
    spec, topology = point.spec, point.topology
    costs = Costs(topology, spec.run.driver_cost, calibration.load("reference").calibration)
    problem = build_problem(spec, topology)
    filter_cost = costs.operator(spec.pipeline[0], "gw-1")
    assert problem.operators[0].cost == pytest.approx(filter_cost.message)
    assert problem.operators[0].cost != pytest.approx(150e-6)  # the measure replaced it
    gateway = problem.nodes[problem.index()["gw-1"]]
    assert (gateway.speed, gateway.cores) == (costs.cpu(topology.nodes["gw-1"]).speed,
                                              costs.cpu(topology.nodes["gw-1"]).cores)
