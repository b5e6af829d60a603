"""The energy-aware offload rule (workloads.energy.EnergyPolicy): when a battery node's
operators go to the cloud. The rule alone: it is not yet wired into the model or hybrid."""

import math

import pytest
from pydantic import ValidationError

from workloads.energy import EnergyPolicy, offload_reason, offload_time


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
