"""Where a hybrid run starts: moving devices on their gateways, follow instances where the
policy places them."""

from __future__ import annotations

import pytest

from experiments.hybrid.plan import emulated_topology, start
from experiments.loader import parse_text

from .test_hybrid_run import WALK


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "walk.csv"
    path.write_text("time,x,y\n0,250,0\n6,250,0\n21,0,0\n")
    return path


def test_a_walk_is_accepted_and_its_device_starts_where_the_model_attaches_it(trace):
    point = parse_text(WALK.format(trace=trace)).points[0]
    begin = start(point.topology, point.spec.scenario, point.spec.pipeline, 1)
    assert begin.devices == ["phone"] and begin.gateway == {"phone": "gw-b"}
    topology = emulated_topology(point.spec.topology, begin)
    assert topology.graph.has_edge("phone", "gw-b")
    assert not topology.graph.has_edge("phone", "gw-a")


def test_out_of_range_at_the_start_means_the_nearest_gateway_and_a_lost_link(tmp_path):
    far = tmp_path / "far.csv"
    far.write_text("time,x,y\n0,100,500\n10,100,500\n")
    point = parse_text(WALK.format(trace=far)).points[0]
    begin = start(point.topology, point.spec.scenario, point.spec.pipeline, 1)
    assert begin.gateway == {"phone": "gw-a"} and begin.loss == {"phone": 1.0}


def test_a_follow_instance_starts_where_the_policy_places_it(trace):
    # The walk in test_hybrid_run has the follow operator and a nearest_gateway policy.
    point = parse_text(WALK.format(trace=trace)).points[0]
    begin = start(point.topology, point.spec.scenario, point.spec.pipeline, 1)
    assert begin.follow == {"track": {"phone": "gw-b"}}


def test_a_follow_operator_without_a_policy_starts_on_the_users_gateway(trace):
    text = WALK.replace("  policy: {{operator: track, kind: nearest_gateway, fallback: [gw-a]}}\n",
                        "")
    point = parse_text(text.format(trace=trace)).points[0]
    assert start(point.topology, point.spec.scenario, point.spec.pipeline, 1).follow == {
        "track": {"phone": "gw-b"}}
