"""The energy-aware offload: the rule (workloads.energy_offload.EnergyPolicy) to the
millisecond, and on the model (sim.energy_policy.EnergyOffload) a battery gateway whose
operator moves to the cloud at the predicted time, with the joules it saves and the cloud
spends (no containers)."""

import math

import pytest
from pydantic import ValidationError

from workloads.energy_offload import EnergyPolicy, offload_reason, offload_time


def test_battery_low_time_is_the_charge_above_the_threshold_over_the_draw():
    # 1000 J at 20 %: 800 J may be drawn; at 2.5 W that is 320 s; 100 J already drawn: 280 s.
    policy = EnergyPolicy(battery_low=0.2)
    assert offload_time(policy, 1000.0, 0.0, 2.5) == pytest.approx(320.0, abs=1e-9)
    assert offload_time(policy, 1000.0, 100.0, 2.5, now=10.0) == pytest.approx(290.0, abs=1e-9)
    # At that time the rule says go, a millisecond before it says stay.
    assert offload_reason(policy, 1000.0, 2.5 * 320.001, 2.5) == "battery_low"
    assert offload_reason(policy, 1000.0, 2.5 * 319.999, 2.5) is None


def test_below_the_threshold_already_offloads_now_and_no_draw_never():
    policy = EnergyPolicy(battery_low=0.5)
    assert offload_time(policy, 100.0, 60.0, 3.0, now=7.0) == 7.0
    assert offload_time(policy, 100.0, 10.0, 0.0) == math.inf


def test_budget_is_the_present_draw_over_the_interval():
    policy = EnergyPolicy(battery_low=0.1, budget=5.0, interval=2.0)
    assert offload_reason(policy, 1000.0, 0.0, 2.6) == "budget"      # 5.2 J > 5 J
    assert offload_reason(policy, 1000.0, 0.0, 2.4) is None          # 4.8 J
    # A low battery is named before the budget.
    assert offload_reason(policy, 1000.0, 950.0, 2.6) == "battery_low"


@pytest.mark.parametrize("field,value", [("battery_low", 0.0), ("battery_low", 1.0),
                                         ("budget", -1.0), ("interval", 0.0)])
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ValidationError, match=field):
        EnergyPolicy(**{field: value})


# -- on the model (sim.energy_policy.EnergyOffload) --------------------------------------

from sim.energy_policy import EnergyOffload  # noqa: E402
from sim.model import Model  # noqa: E402
from tests.foundation.helpers import point, settings  # noqa: E402
from workloads.energy_power import PI4B  # noqa: E402

# A Pi 4 gateway (4 cores, 0.45 the reference speed) on a battery runs a filter; the cloud VM
# stores what it keeps. 10 readings a second.
FOG = """
name: energy-offload
topology:
  name: duo
  sites: [{name: edge, position: [0, 0]}, {name: cloud, position: [5000, 0]}]
  nodes:
    - {name: dev, kind: device, position: [0, 0]}
    - {name: gw, kind: gateway, profile: rpi4, site: edge, position: [30, 40]}
    - {name: broker, kind: broker, profile: vm.medium, site: cloud}
    - {name: cloud, kind: cloud_vm, profile: vm.small, site: cloud}
  links:
    - {from: dev, to: gw, latency: 5ms, bandwidth: 1Mbit}
    - {from: gw, to: broker, latency: 20ms, bandwidth: 10Mbit}
    - {from: broker, to: cloud, latency: 1ms, bandwidth: 100Mbit}
workload:
  name: one
  streams:
    - {name: s, sources: dev, rate: 10/s, arrivals: periodic, size: 100B}
pipeline:
  - {name: filter, task: passthrough, on: gw, reads: s, writes: kept, cost: COST}
  - {name: store, task: passthrough, on: cloud, reads: kept, cost: 1ms}
scenario:
  energy: {}
  migration: {strategy: pause_drain}
run: {duration: 20s, seed: 2, driver_cost: DRIVER, drain: 2s}
"""


def run_fog(cost: str, driver: str, capacity: float | None):
    run_point = point(FOG.replace("COST", cost).replace("DRIVER", driver))
    model = Model(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                  settings(run_point, direct_handover=False))
    offload = None
    if capacity is not None:
        offload = EnergyOffload(model, EnergyPolicy(battery_low=0.2), "gw", capacity)
    result = model.run()
    return offload, result.tables, result.facts


def test_an_idle_gateway_offloads_at_the_predicted_millisecond():
    # No work on the gateway: it draws its idle 2.7 W; 80 % of 30 J lasts 24 / 2.7 s.
    offload, tables, _ = run_fog("0ms", "0ms", 30.0)
    assert offload.reason == "battery_low" and offload.moves == 1
    assert round(offload.moved_at, 3) == round(24.0 / PI4B[0], 3) == 8.889
    migrations = tables["migrations"]
    assert list(migrations["operator"]) == ["filter"]
    assert list(migrations["target"]) == ["cloud"]


def test_a_busy_gateway_offloads_when_predicted_and_saves_its_operators_joules():
    # The filter costs 9 ms at the reference speed, 20 ms on the Pi (0.45): 10 readings a
    # second keep 0.2 of its 4 cores busy, the driver 0.01 more (0.45 ms, 1 ms on the Pi).
    busy = (10 * 0.020 + 10 * 0.001) / 4
    watts = PI4B[0] + (PI4B[1] - PI4B[0]) * busy  # 2.894 W
    without, with_policy = run_fog("9ms", "0.45ms", None), run_fog("9ms", "0.45ms", 60.0)
    offload, tables, facts = with_policy
    # 80 % of 60 J at that draw, measured over whole intervals: to the millisecond.
    assert offload.reason == "battery_low"
    assert round(offload.moved_at, 3) == round(48.0 / watts, 3) == 16.585
    start = float(tables["migrations"]["start"][0])
    assert start == offload.moved_at
    # From the pause on, the filter's work is the cloud's: the gateway saves what it drew
    # above idle for it, and the cloud VM (1 vCPU, 0.74 W to 3.5 W) spends its own on it.
    duration = 20.0
    saved = without[2]["energy"]["by_node"]["gw"] - facts["energy"]["by_node"]["gw"]
    expected = (duration - start) * (PI4B[1] - PI4B[0]) * (10 * 0.020) / 4
    assert saved == pytest.approx(expected, rel=0.1)  # 0.61 J against 0.63 J
    spent = facts["energy"]["by_node"]["cloud"] - without[2]["energy"]["by_node"]["cloud"]
    assert spent == pytest.approx((duration - start) * 10 * 0.009 * (3.5 - 0.74), rel=0.1)
    assert without[0] is None and len(without[1]["migrations"]["start"]) == 0


def test_a_model_with_the_direct_hand_over_and_a_gateway_without_cpu_are_refused():
    run_point = point(FOG.replace("COST", "0ms").replace("DRIVER", "0ms"))
    model = Model(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                  settings(run_point))
    with pytest.raises(ValueError, match="direct_handover=False"):
        EnergyOffload(model, EnergyPolicy(), "gw", 30.0)
    model = Model(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                  settings(run_point, direct_handover=False))
    with pytest.raises(ValueError, match="gateway: 'dev'"):
        EnergyOffload(model, EnergyPolicy(), "dev", 30.0)
