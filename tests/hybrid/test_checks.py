"""What a hybrid file needs and what hybrid refuses yet, named when the file is loaded; and
where moving devices start."""

from __future__ import annotations

import pytest

from experiments.hybrid.plan import emulated_topology, start
from experiments.loader import parse_text
from topologies.errors import SpecError

from .test_hybrid_run import WALK


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "walk.csv"
    path.write_text("time,x,y\n0,250,0\n6,250,0\n21,0,0\n")
    return path


def test_a_walk_is_accepted_and_its_device_starts_where_the_model_attaches_it(trace):
    point = parse_text(WALK.format(trace=trace)).points[0]
    begin = start(point.topology, point.spec.scenario.mobility, 1)
    assert begin.devices == ["phone"] and begin.gateway == {"phone": "gw-b"}
    topology = emulated_topology(point.spec.topology, begin)
    assert topology.graph.has_edge("phone", "gw-b")
    assert not topology.graph.has_edge("phone", "gw-a")


def test_out_of_range_at_the_start_means_the_nearest_gateway_and_a_lost_link(tmp_path):
    far = tmp_path / "far.csv"
    far.write_text("time,x,y\n0,100,500\n10,100,500\n")
    point = parse_text(WALK.format(trace=far)).points[0]
    begin = start(point.topology, point.spec.scenario.mobility, 1)
    assert begin.gateway == {"phone": "gw-a"} and begin.loss == {"phone": 1.0}


FOLLOW = ("  - {{name: sink, on: gw-a, reads: pos}}\n"
          "  - {{name: track, follow: users, on: gateways, reads: pos, window: {{size: 2s}}}}")
POLICY = "    record: 1s\n  policy: {{operator: track, kind: nearest_gateway, fallback: [gw-a]}}"


@pytest.mark.parametrize(("policy", "message"), [
    (True, "scenario.policy.*no migration policy on hybrid yet"),
    (False, "pipeline.1.\\.follow.*no follow operators on hybrid yet"),
])
def test_what_hybrid_does_not_run_yet_is_refused(trace, policy, message):
    text = WALK.replace("  - {{name: sink, on: gw-a, reads: pos}}", FOLLOW)
    if policy:
        text = text.replace("    record: 1s", POLICY)
    text = text.replace("size: 100B, qos: 1", "size: 100B, qos: 1, channel: exclusive")
    with pytest.raises(SpecError, match=message):
        parse_text(text.format(trace=trace))
