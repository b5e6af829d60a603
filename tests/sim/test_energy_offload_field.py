"""`scenario.energy.offload` on the model: experiments/energy-offload.yaml's battery gateway
moves its filter to the cloud at offload_time's instant (to the millisecond), saves its
filter's joules from then on, and says so in the migrations table and the energy facts; bad
offloads are refused naming the field and value, and an energy feature without an offload
keeps the model's direct hand-over (no containers)."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.loader import load
from sim.model import Model
from tests.foundation.helpers import settings, simulate_point
from topologies.errors import SpecError
from workloads.energy_offload import EnergyPolicy, offload_time
from workloads.energy_power import PI4B, VCPU

NAME = "energy-offload"
# The file's figures: 10 readings/s; the filter 9 ms at the reference speed, 20 ms on the
# Pi 4 (speed 0.45), the driver 0.45 ms (1 ms); four cores; a 40 J battery, 20 % low.
RATE, FILTER_PI, DRIVER_PI, CORES, CAPACITY = 10, 0.020, 0.001, 4, 40.0
DURATION = 15.0


@pytest.fixture(scope="module")
def runs():
    """The shipped experiment with its offload and without it (two sim runs of 15 s)."""
    offloaded = simulate_point(load(NAME).points[0])
    kept = simulate_point(load(NAME, overrides=["scenario.energy.offload=null"]).points[0])
    return offloaded, kept


def test_the_gateway_moves_its_filter_when_its_charge_crosses_20_percent(runs):
    offloaded, _ = runs
    # The draw by hand: the filter's and the driver's share of the Pi's four cores.
    busy = RATE * (FILTER_PI + DRIVER_PI) / CORES  # 0.0525
    watts = PI4B[0] + (PI4B[1] - PI4B[0]) * busy  # 2.894 W
    expected = offload_time(EnergyPolicy(battery_low=0.2), CAPACITY, 0.0, watts)
    assert round(expected, 3) == round(0.8 * CAPACITY / watts, 3) == 11.056
    migrations = offloaded.tables["migrations"]
    assert list(migrations["operator"]) == ["filter"]
    assert list(migrations["source"]) == ["gw-1"] and list(migrations["target"]) == ["cloud-1"]
    assert list(migrations["strategy"]) == ["pause_drain"]
    assert round(float(migrations["start"][0]), 3) == 11.056
    assert float(migrations["start"][0]) == pytest.approx(expected, abs=1e-6)
    # The facts say when, why, and what it had drawn (80 % of 40 J) at what draw.
    [row] = offloaded.facts["energy"]["offloads"]
    assert row["gateway"] == "gw-1" and row["reason"] == "battery_low"
    assert row["t"] == float(migrations["start"][0])
    assert row["drawn_j"] == pytest.approx(32.0, abs=1e-9)
    assert row["watts"] == pytest.approx(watts, abs=1e-9)
    assert row["operators"] == ["filter"] and row["target"] == "cloud-1"


def test_the_gateway_saves_its_filters_joules_and_the_cloud_spends_its_own(runs):
    offloaded, kept = runs
    assert len(kept.tables["migrations"]["start"]) == 0
    assert "offloads" not in kept.facts["energy"]
    # The cloud filters every reading sent from the first one the broker held on: that one
    # waited the whole pause, the longest latency of the run.
    messages = offloaded.tables["messages"]
    first_held = messages["t_sent"][int(np.argmax(messages["latency"]))]
    moved = int(np.count_nonzero(messages["t_sent"] >= first_held))
    start = float(offloaded.tables["migrations"]["start"][0])
    # The pause begins a command's time after the decision: the readings sent from then on
    # (38 of the 39.4 a second's rate gives after 11.056 s).
    assert RATE * (DURATION - start) - 2 <= moved <= RATE * (DURATION - start)
    assert moved == 38
    # Each costs the Pi 20 ms of one core of four above idle: (6.4 - 2.7) * 0.020 / 4 J.
    by_node = {name: offloaded.facts["energy"]["by_node"][name]
               - kept.facts["energy"]["by_node"][name] for name in ("gw-1", "cloud-1")}
    saved = -by_node["gw-1"]
    assert saved == pytest.approx(moved * (PI4B[1] - PI4B[0]) * FILTER_PI / CORES, abs=1e-9)
    assert round(saved, 4) == 0.703
    # The cloud VM (one vCPU, 0.74 W to 3.5 W) does that work in 9 ms each: offloading
    # saves the battery, not energy overall.
    per_reading = (VCPU[1] - VCPU[0]) * 0.009
    assert by_node["cloud-1"] == pytest.approx(moved * per_reading, abs=per_reading / 2)
    assert by_node["cloud-1"] > saved
    figures = offloaded.facts["energy"]
    assert figures["battery_deaths"] == {}  # the gateway's battery feeds the decision only


def test_a_budget_offloads_at_the_first_measure_above_it():
    # 2.894 W over 1 s is above 2.8 J: the first measure, at 1 s, says go.
    point = load(NAME, overrides=["scenario.energy.offload.budget=2.8"]).points[0]
    result = simulate_point(point, duration=3.0)
    [row] = result.facts["energy"]["offloads"]
    assert row["reason"] == "budget" and row["t"] == 1.0
    assert float(result.tables["migrations"]["start"][0]) == 1.0


def test_energy_without_an_offload_keeps_the_direct_hand_over_and_with_one_drops_it():
    def built(overrides):
        point = load(NAME, overrides=overrides).points[0]
        return Model(point.topology, point.spec.workload, point.spec.pipeline,
                     settings(point))

    assert not built(["scenario.energy.offload=null"]).dynamic
    model = built([])
    assert model.dynamic and model.settings.direct_handover  # the default settings run it


def refused(*overrides: str) -> str:
    with pytest.raises(SpecError) as caught:
        load(NAME, overrides=list(overrides))
    return str(caught.value)


@pytest.mark.parametrize(("overrides", "expected"), [
    (["scenario.energy.offload.gateways=sensor"],
     "scenario.energy.offload.gateways: gateways only (the battery's charge decides where "
     "their operators run), but sensor is a device"),
    (["scenario.energy.offload.gateways=gw-9"], "a gateway name or pattern of topology"),
    (["scenario.energy.offload.to=cloud-9"],
     "scenario.energy.offload.to: a node of topology battery-gateway (got 'cloud-9')"),
    (["scenario.energy.offload.to=broker"], "a gateway or cloud VM, but broker is a broker"),
    (["scenario.energy.offload.joules=0"], "scenario.energy.offload.joules: a capacity > 0"),
    (["scenario.energy.offload.strategy=pause_transfer"],
     "scenario.energy.offload.strategy: pause_drain for the offload: filter has no window "
     "state"),
    (["scenario.energy.offload.strategy=null"],  # scenario.migration's pause_transfer
     "scenario.migration.strategy: pause_drain for the offload"),
    (["scenario.energy.offload.battery_low=100%"], "battery_low"),
    (["scenario.energy.offload.interval=0s"], "interval"),
    (["scenario.migrations=[{at: 5s, operator: filter, to: cloud-1, strategy: pause_drain}]"],
     "scenario.migrations[0].operator: an operator the offload does not move"),
])
def test_a_bad_offload_is_refused_naming_the_field_and_value(overrides, expected):
    assert expected in refused(*overrides)


def test_without_to_the_topologys_one_cloud_vm_is_the_target():
    point = load(NAME, overrides=["scenario.energy.offload.to=null"]).points[0]
    from workloads.energy_offload import offload_target

    assert offload_target(point.spec.scenario.energy.offload, point.topology) == "cloud-1"


TWO = """
name: two-batteries
topology:
  name: two-gateways
  nodes:
    - {name: sensor, kind: device, replicas: 2}
    - {name: gw, kind: gateway, replicas: 2, profile: rpi4}
    - {name: broker, kind: broker}
    - {name: cloud-1, kind: cloud_vm, profile: vm.small}
  links:
    - {from: sensor-1, to: gw-1, latency: 2ms}
    - {from: sensor-2, to: gw-2, latency: 2ms}
    - {from: gw-*, to: broker, latency: 5ms}
    - {from: broker, to: cloud-1, latency: 1ms}
workload:
  name: readings
  streams: [{name: s, sources: sensor-*, rate: 10/s, arrivals: periodic, size: 100B}]
pipeline:
  - {name: filter, on: gateways, reads: s, cost: 9ms}
scenario:
  energy: {offload: {gateways: gw-*, joules: 100, budget: 1, strategy: pause_drain}}
run: {duration: 8s, seed: 2, drain: 2s}
"""


def test_gateways_that_offload_one_operator_together_move_it_in_turn():
    # Both draw above 1 J a second: both decide at the first measure, 1 s; the model's
    # coordinator moves one instance of an operator at a time, so gw-2's waits for gw-1's.
    from experiments.loader import parse_text

    result = simulate_point(parse_text(TWO).points[0])
    rows = result.facts["energy"]["offloads"]
    assert [(r["gateway"], r["t"], r["reason"], r["target"]) for r in rows] == [
        ("gw-1", 1.0, "budget", "cloud-1"), ("gw-2", 1.0, "budget", "cloud-1")]
    migrations = result.tables["migrations"]
    assert list(migrations["source"]) == ["gw-1", "gw-2"]
    assert float(migrations["start"][0]) == 1.0
    assert float(migrations["start"][1]) == float(migrations["end"][0])
    assert int(np.count_nonzero(result.tables["messages"]["lost"])) == 0


def test_a_battery_that_lasts_the_run_offloads_nothing_and_its_gauge_agrees_with_the_table():
    # 1 kJ: 80 % lasts 276 s at 2.894 W, past the 15 s run. What the watcher measured over
    # the run is the gateway's energy in the table, by the same power profile.
    point = load(NAME, overrides=["scenario.energy.offload.joules=1000"]).points[0]
    result = simulate_point(point)
    [row] = result.facts["energy"]["offloads"]
    assert row["t"] is None and row["reason"] is None and row["operators"] == []
    assert len(result.tables["migrations"]["start"]) == 0
    assert row["drawn_j"] == pytest.approx(result.facts["energy"]["by_node"]["gw-1"], abs=1e-9)
    assert round(row["drawn_j"], 2) == 43.41  # 15 s at 2.894 W
