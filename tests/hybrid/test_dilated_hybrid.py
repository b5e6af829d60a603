"""The hybrid backend at a dilation (run.dilation: K = 2) on real containers: the real-time
model runs K times slower than the host's clock with the emulation, so the walk of
tests/hybrid/test_hybrid_run.py hands over, migrates and measures at the same emulated times,
and the model's lag and the couplings' decision to action are reported in emulated seconds."""

from __future__ import annotations

import json
import time

import pyarrow.parquet as pq
import pytest

from experiments.loader import parse_text
from experiments.runner import run_experiment
from tests.hybrid.test_hybrid_run import WALK

pytestmark = [pytest.mark.emu, pytest.mark.slow]

K = 2.0


@pytest.fixture
def trace(tmp_path):
    """As test_hybrid_run's: near gateway A for 6 s, then at 20 m/s to B, then standing."""
    path = tmp_path / "walk.csv"
    path.write_text("time,x,y\n0,0,0\n6,0,0\n21,300,0\n40,300,0\n")
    return path


@pytest.fixture(scope="module")
def client():
    from engine import docker_engine

    return docker_engine()


# `alone`: the model's lag (p99 under 50 ms, emulated) needs the host to itself, as undilated.
@pytest.mark.alone
def test_a_dilated_walk_hands_over_and_migrates_at_its_emulated_times(tmp_path, trace, client):
    text = WALK.format(trace=trace).replace("drain: 3s}", f"drain: 3s, dilation: {K:g}}}")
    assert f"dilation: {K:g}" in text
    began = time.monotonic()
    (outcome,) = run_experiment(parse_text(text), tmp_path / "out")
    wall = time.monotonic() - began
    assert outcome.error is None, outcome.error
    folder = outcome.folder
    manifest = json.loads((folder / "manifest.json").read_text())
    facts = manifest["facts"]
    assert facts["dilation"] == K
    # 27 emulated seconds (24 + 3 of drain) last K times as long on the host
    assert wall >= K * 27 * 0.95, wall
    handovers = pq.read_table(folder / "handovers.parquet").to_pydict()
    assert (handovers["source"], handovers["target"], handovers["ok"]) == (
        ["gw-a"], ["gw-b"], [True])
    # the model's time: past the midpoint plus the hysteresis at 20 m/s, 13.75 s, as undilated
    assert 13.0 <= handovers["t"][0] <= 15.0
    # decision to join, emulated: two commands to QEMU agents (50-200 ms each on the host)
    assert 0 < handovers["duration"][0] < 1.0, handovers
    messages = pq.read_table(folder / "messages.parquet").to_pandas()
    assert messages["id"].nunique() >= 0.95 * 24 * 10
    assert not messages["lost"].any() and not messages.duplicated(["id", "sink"]).any()
    # the emulated radio latency (5 + 40 * d / 200 ms) on gw-a's sink, as undilated
    at_sink = messages[messages["sink"] == "gw-a"]

    def floor(first: float, last: float) -> float:
        return at_sink.loc[at_sink["t_sent"].between(first, last), "latency"].quantile(0.1)

    near, far = floor(0.5, 5.5), floor(11.0, 13.5)
    assert near == pytest.approx(0.005, abs=0.004)
    assert far - near == pytest.approx(0.040 * (12.25 - 6) * 20 / 200, abs=0.006)
    migrations = pq.read_table(folder / "migrations.parquet").to_pydict()
    assert migrations["operator"] == ["track@phone"]
    assert [m["status"] for m in facts["migrations"]] == ["done"], facts["migrations"]
    assert (migrations["source"], migrations["target"]) == (["gw-a"], ["gw-b"])
    # the policy's move, stamped on the run's clock: after the handover, within the run
    assert handovers["t"][0] <= migrations["start"][0] < migrations["end"][0] < 24.0
    assert (migrations["lost"], migrations["duplicates"]) == ([0], [0])
    hybrid = facts["hybrid"]
    print(f"K={K:g} wall={wall:.1f} handover_t={handovers['t'][0]:.2f} "  # the figures, with -s
          f"handover_s={handovers['duration'][0]:.3f} move_start={migrations['start'][0]:.2f} "
          f"downtime={migrations['downtime'][0]:.3f} lag={hybrid['lag']} "
          f"decision_to_action_ms_p95={hybrid['decision_to_action_ms_p95']}")
    assert hybrid["handovers"] == 1 and hybrid["actions_failed"] == 0
    assert hybrid["migrations"] == 1
    assert hybrid["lag"]["lag_p99_ms"] < 50, hybrid["lag"]
    assert 0 < hybrid["decision_to_action_ms_p95"] < 1000, hybrid
