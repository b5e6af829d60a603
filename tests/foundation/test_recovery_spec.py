"""scenario.recovery and checkpoints as written: refused where they cannot work, and the
detector's timing and the re-placement rule that sim and emu share (workloads.recovery)."""

from __future__ import annotations

import pytest

from experiments.loader import parse_text
from topologies.errors import SpecError
from workloads import recovery

FILE = """
name: r
topology:
  name: r
  nodes:
    - {name: sensor, kind: device, replicas: 2}
    - {name: gw, kind: gateway, replicas: 2}
    - {name: broker, kind: broker}
  links:
    - {from: sensor-*, to: gw-2, latency: 2ms}
    - {from: gw-*, to: broker, latency: 5ms}
workload:
  name: w
  streams: [{name: s, sources: sensor-*, rate: 10/s}]
pipeline:
  - {name: count, on: gw-1, reads: s, OPERATOR}
scenario:
  recovery: RECOVERY
run: {backend: sim, duration: 10s}
"""


def _error(operator: str = "window: {size: 2s}, checkpoint: 2s",
           recovery: str = "{session_timeout: 2s}") -> SpecError:
    with pytest.raises(SpecError) as caught:
        parse_text(FILE.replace("OPERATOR", operator).replace("RECOVERY", recovery))
    return caught.value


def test_a_good_file_loads() -> None:
    (point,) = parse_text(FILE.replace("OPERATOR", "window: {size: 2s}, checkpoint: 2s")
                          .replace("RECOVERY", "{session_timeout: 2s}")).points
    assert point.spec.pipeline[0].checkpoint == 2.0
    assert point.spec.scenario.recovery.to == ["gateways", "cloud_vms"]


def test_a_checkpoint_without_a_window_is_refused_naming_the_operator() -> None:
    error = _error(operator="checkpoint: 2s")
    assert error.path == ("pipeline", 0, "checkpoint") and "'count'" in str(error)


def test_recovery_onto_a_broker_or_onto_nothing_is_refused() -> None:
    error = _error(recovery="{to: broker}")
    assert error.path == ("scenario", "recovery", "to", 0) and "a broker" in str(error)
    error = _error(recovery="{to: [edge-*]}")
    assert error.path == ("scenario", "recovery", "to", 0) and "names none" in str(error)
    error = _error(recovery="{to: cloud_vms}")
    assert error.path == ("scenario", "recovery", "to")


def test_a_session_timeout_zookeeper_would_not_grant_is_refused() -> None:
    error = _error(recovery="{session_timeout: 100ms}")
    assert "session_timeout" in str(error) and "0.4 s" in str(error)


def test_expiry_is_the_last_ping_plus_the_timeout_on_the_next_tick() -> None:
    # pings every 2/3 s from 0.1: the last before 7.0 at 6.766..., + 2 s, next 0.2 s tick
    assert recovery.expiry(7.0, 2.0, 0.1) == pytest.approx(8.8)
    assert recovery.expiry(7.0, 2.0, 0.1, tick_phase=0.05) == pytest.approx(8.85)
    for crash in (3.0, 3.3, 3.6, 3.65):
        detected = recovery.expiry(crash, 2.0, 0.0) - crash
        assert 2.0 * 2 / 3 - 1e-9 <= detected <= 2.0 + recovery.ZK_TICK_S + 1e-9


def test_the_nearest_candidate_to_the_input_wins_and_ties_go_in_order() -> None:
    latency = {("d", "a"): 3.0, ("d", "b"): 1.0, ("d", "c"): 1.0}
    assert recovery.place(["a", "b", "c"], ["d"], lambda s, n: latency[s, n]) == "b"
    assert recovery.place(["c", "b"], ["d"], lambda s, n: latency[s, n]) == "c"
    assert recovery.place([], ["d"], lambda s, n: 0.0) is None


def test_the_agent_checkpoints_on_the_phase_the_model_assumes() -> None:
    from emu.agent.checkpoint import CHECKPOINT_PHASE

    assert CHECKPOINT_PHASE == recovery.CHECKPOINT_PHASE
