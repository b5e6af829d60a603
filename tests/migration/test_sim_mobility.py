"""Users moving among gateways in the model: handovers, and instances that follow them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from foundation.helpers import point, run

from topologies.errors import SpecError

WALK = """
name: walk
topology:
  name: street
  nodes:
    - {{name: phone, kind: device}}
    - {{name: gw-a, kind: gateway, position: [0, 0]}}
    - {{name: gw-b, kind: gateway, position: [300, 0]}}
    - {{name: switch, kind: switch}}
    - {{name: broker, kind: broker}}
    - {{name: cloud, kind: cloud_vm}}
  links:
    - {{from: [gw-a, gw-b, broker, cloud], to: switch, latency: 5ms}}
workload:
  name: telemetry
  streams: [{{name: pos, sources: phone, rate: 2/s, arrivals: periodic, channel: exclusive}}]
pipeline:
  - {{name: track, follow: users, on: gateways, reads: pos, cost: 100us, window: {{size: 2s}}}}
scenario:
  mobility:
    model: {{kind: trace, path: {trace}}}
    radio: {{range: 200, latency: [2ms, 4ms], bandwidth: [10Mbit, 1Mbit]}}
    handover: {{hysteresis: 10, min_dwell: 1s}}
    record: 5s
  policy: {{operator: track, kind: {policy}, threshold: 8ms, hysteresis: 1ms,
           fallback: [cloud]}}
  migration: {{strategy: pause_transfer, launch: 200ms}}
run: {{duration: 60s, seed: 1}}
"""


@pytest.fixture
def trace(tmp_path):
    """A walk at 10 m/s from gateway A to gateway B, 300 m apart."""
    path = tmp_path / "walk.csv"
    path.write_text("time,x,y\n0,0,0\n30,300,0\n60,300,0\n")
    return path


@pytest.mark.parametrize("policy", ["nearest_gateway", "latency_threshold"])
def test_a_users_instance_follows_it_from_gateway_a_to_b(trace, policy):
    result = run(WALK.format(trace=trace, policy=policy))
    assert result.facts["handovers"] == 1
    migrations = result.tables["migrations"]
    assert list(migrations["source"]) == ["gw-a"] and list(migrations["target"]) == ["gw-b"]
    # The handover happens past the midpoint (150 m + half the hysteresis) at 10 m/s.
    assert 15.0 <= migrations["start"][0] <= 17.0
    assert (migrations["lost"][0], migrations["duplicates"][0]) == (0, 0)
    windows = result.tables["windows"]
    assert set(windows["node"]) == {"gw-a", "gw-b"}
    # Every message that reached the operator is in exactly one window it forwarded.
    delivered = (~result.tables["messages"]["lost"]).sum()
    assert delivered > 100 and windows["count"].sum() == delivered


def test_positions_are_recorded_with_the_gateway(trace):
    positions = run(WALK.format(trace=trace, policy="nearest_gateway")).tables["positions"]
    at = dict(zip(positions["t"], zip(positions["x"], positions["gateway"], strict=True),
                  strict=True))
    assert at[0.0] == (0.0, "gw-a")
    assert at[10.0][0] == pytest.approx(100.0)
    assert at[25.0] == (pytest.approx(250.0), "gw-b")


def test_radio_latency_grows_with_distance(trace):
    messages = run(WALK.format(trace=trace, policy="nearest_gateway")).tables["messages"]
    near = messages["latency"][messages["t_sent"] < 3]
    far = messages["latency"][(messages["t_sent"] > 13) & (messages["t_sent"] < 15)]
    assert np.median(far) > np.median(near)


def test_a_follow_operator_needs_mobility(trace):
    text = WALK.format(trace=trace, policy="nearest_gateway")
    text = text[:text.index("scenario:")] + "run: {duration: 60s, seed: 1}\n"
    with pytest.raises(SpecError, match="follow"):
        point(text)


def test_a_follow_operator_needs_exclusive_channels(trace):
    with pytest.raises(SpecError, match="exclusive"):
        point(WALK.format(trace=trace, policy="nearest_gateway").replace(
            "channel: exclusive", "channel: shared"))


def test_a_user_out_of_range_at_the_start_sends_its_qos_1_readings_once_in_range(tmp_path):
    # 400 m west of gateway A, walking to it at 20 m/s: in range (200 m) from t = 10 s.
    path = tmp_path / "late.csv"
    path.write_text("time,x,y\n0,-400,0\n20,0,0\n60,0,0\n")
    text = WALK.format(trace=path, policy="nearest_gateway").replace(
        "arrivals: periodic,", "arrivals: periodic, qos: 1,")
    messages = pd.DataFrame(run(text).tables["messages"])
    assert not messages["lost"].any() and not messages["id"].duplicated().any()
    assert len(messages) == 120 and set(messages["sink"]) == {"gw-a"}
    early = messages[messages["t_sent"] < 9.0]
    assert len(early) == 18  # held by the device until a gateway was near, then delivered
    assert (early["t_received"] >= 10.0 - 1e-9).all()
