"""scenario.energy on sim: a worked example checked to the joule, a battery's death to the
millisecond, the refusals, and a run with energy counted leaving every other table as it was
(no containers)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from experiments.schema import conform
from sim.model import Model
from tests.foundation.helpers import point, settings
from topologies.errors import SpecError
from workloads.energy_power import PI4B, RADIO_J_PER_BIT, SENSOR, VCPU, WAN_J_PER_BIT, Power

# A device 50 m from its Raspberry Pi 4 gateway (site edge), a broker (vm.medium, 2 vCPUs)
# and a cloud VM (vm.small, 1 vCPU) at site cloud: the gateway-broker link is a WAN link, the
# broker-VM link a wired one. Each reading costs the gateway's driver 4.5 ms (10 ms at the
# Pi's speed, 0.45), the broker 20 ms, the VM's sink 50 ms: 10 readings of 100 B in 10 s.
TRIO = """
name: energy-example
topology:
  name: trio
  sites: [{name: edge, position: [0, 0]}, {name: cloud, position: [5000, 0]}]
  nodes:
    - {name: dev, kind: device, position: [0, 0]}
    - {name: gw, kind: gateway, profile: rpi4, site: edge, position: [30, 40]}
    - {name: broker, kind: broker, profile: vm.medium, site: cloud, broker: {service_time: 20ms}}
    - {name: vm, kind: cloud_vm, profile: vm.small, site: cloud}
  links:
    - {from: dev, to: gw, latency: 5ms, bandwidth: 1Mbit}
    - {from: gw, to: broker, latency: 20ms, bandwidth: 10Mbit}
    - {from: broker, to: vm, latency: 1ms, bandwidth: 100Mbit}
workload:
  name: one
  streams:
    - {name: s, sources: dev, rate: 1/s, arrivals: periodic, size: 100B}
pipeline:
  - {name: sink, on: vm, reads: s, cost: 50ms}
SCENARIO
run: {duration: 10s, seed: SEED, driver_cost: 4.5ms, drain: 2s}
"""
ENERGY = "scenario:\n  energy: ENERGY"
# The first reading at 0.406 s (sim.draws: the source's own stream), each 1 s after, all
# done before 10 s.
SEED = 4


def text(energy: str | None = "{links: {wired: 1e-9}}", seed: int = SEED) -> str:
    scenario = ENERGY.replace("ENERGY", energy) if energy is not None else ""
    return TRIO.replace("SCENARIO", scenario).replace("SEED", str(seed))


def run(yaml: str) -> tuple[Model, dict, dict]:
    run_point = point(yaml)
    model = Model(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                  settings(run_point))
    result = model.run()
    return model, result.tables, result.facts


@pytest.fixture(scope="module")
def example():
    return run(text())


def test_the_worked_example_to_the_joule(example) -> None:
    _, tables, facts = example
    sent = tables["messages"]["t_sent"]
    assert len(sent) == 10 and sent[0] < 1 and np.all(tables["messages"]["t_received"] < 10)
    # By hand. Linear model: E = idle * T + (max - idle) * (core-seconds of work) / cores.
    gateway = PI4B[0] * 10 + (PI4B[1] - PI4B[0]) * (10 * 0.0045 / 0.45) / 4
    broker = 2 * VCPU[0] * 10 + 2 * (VCPU[1] - VCPU[0]) * (10 * 0.020) / 2
    vm = VCPU[0] * 10 + (VCPU[1] - VCPU[0]) * (10 * 0.050)
    device = SENSOR[0] * 10 + 10 * 800 * RADIO_J_PER_BIT
    assert (gateway, broker, vm) == pytest.approx((27.0925, 15.352, 8.78), abs=1e-9)
    radio_link = 8000 * (50e-9 + 100e-12 * 50 ** 2)  # 50 m: 300 nJ/bit
    wan = 8000 * WAN_J_PER_BIT
    wired = 8000 * 1e-9
    energy = facts["energy"]
    assert energy["by_node"] == pytest.approx(
        {"gw": gateway, "broker": broker, "vm": vm, "dev": device}, abs=1e-9)
    assert energy["by_kind"]["wireless"] == pytest.approx(radio_link, abs=1e-12)
    assert energy["by_kind"]["wan"] == pytest.approx(wan, abs=1e-12)
    assert energy["by_kind"]["wired"] == pytest.approx(wired, abs=1e-15)
    total = gateway + broker + vm + device + radio_link + wan + wired
    assert energy["total_j"] == pytest.approx(total, abs=1e-9)
    assert round(energy["total_j"], 6) == 51.941842
    assert energy["delivered"] == 10
    assert energy["per_delivered_j"] == pytest.approx(total / 10, abs=1e-9)
    assert energy["by_site"] == pytest.approx(
        {"edge": gateway + wan, "cloud": broker + vm + wired, "(none)": device + radio_link},
        abs=1e-9)
    # The table adds up to the facts: a row per node per 1 s sample, one per radio link.
    table = tables["energy"]
    assert float(np.sum(table["joules"])) == pytest.approx(total, abs=1e-9)
    gw = table["node"] == "gw"
    assert gw.sum() == 10 and np.all(table["t_end"][gw] - table["t_start"][gw] == 1.0)
    assert np.all(table["joules"][gw] >= PI4B[0])
    assert set(table["kind"][table["link"] != None]) == {"wireless", "wan", "wired"}  # noqa: E711


def test_the_cost_of_the_example(example) -> None:
    _, _, facts = example
    money = facts["energy"]["cost"]
    # Shipped prices: vm.medium 0.0416 and vm.small 0.0208 per hour; the gateway and the
    # device pay their energy at 0.165 per kWh; 1000 B leave site edge at 0.09 per GB.
    broker, vm = 0.0416 * 10 / 3600, 0.0208 * 10 / 3600
    gw = facts["energy"]["by_node"]["gw"] / 3.6e6 * 0.165
    assert money["by_node"]["broker"] == pytest.approx(broker, rel=1e-12)
    assert money["by_node"]["vm"] == pytest.approx(vm, rel=1e-12)
    assert money["by_node"]["gw"] == pytest.approx(gw, rel=1e-12)
    assert money["egress"] == pytest.approx({"edge": 1000 / 1e9 * 0.09}, rel=1e-12)
    assert money["by_site"]["cloud"] == pytest.approx(broker + vm, rel=1e-12)


def test_other_power_models_and_a_measured_table() -> None:
    linear, square = Power(2.0, 6.0), Power(2.0, 6.0, "square")
    cubic = Power(2.0, 6.0, "cubic")
    table = Power(2.0, 6.0, "table", ((0.0, 2.0), (0.5, 5.0), (1.0, 6.0)))
    assert [p.watts(0.5) for p in (linear, square, cubic, table)] == [4.0, 3.0, 2.5, 5.0]
    assert table.watts(0.75) == 5.5 and table.watts(1.5) == 6.0 and linear.watts(-1) == 2.0


BATTERY = ("{power: {sensor: {idle: 0.05, max: 0.05}}, radio: {per_message: 0.02, "
           "per_bit: 0}, batteries: [{devices: dev, joules: 0.5}]}")


@pytest.mark.parametrize(("seed", "death"), [
    # The first reading at 0.406 s: 7 readings (0.14 J) by 6.406 s, and the idle 0.05 W
    # empties the remaining 0.36 J at (0.5 - 0.14) / 0.05 = 7.2 s, before the 8th at 7.406 s.
    (4, 7.2),
    # The first at 0.053 s: the 8th, at 7.053 s, would bring the drain to
    # 0.05 * 7.053 + 0.16 = 0.513 J: the device dies there, without sending it.
    (3, 7.053),
])
def test_a_battery_dies_to_the_millisecond_and_stops_its_device(seed: int, death: float
                                                                ) -> None:
    model, tables, facts = run(text(BATTERY, seed))
    sent = tables["messages"]["t_sent"]
    assert len(sent) == 7
    assert round(facts["energy"]["battery_deaths"]["dev"], 3) == death
    faults = tables["faults"]
    assert list(faults["kind"]) == ["battery"] and list(faults["target"]) == ["dev"]
    assert round(faults["t_start"][0], 3) == death and math.isnan(faults["t_end"][0])
    assert json.loads(faults["params"][0]) == {"capacity_j": 0.5}
    assert "dev" in model.down
    # What it drew is its capacity: 7 readings and its idle power until it died.
    assert facts["energy"]["by_node"]["dev"] == pytest.approx(
        0.05 * facts["energy"]["battery_deaths"]["dev"] + 7 * 0.02, abs=1e-12)
    # A row a second: 0.05 J idle and 0.02 J for the reading in each of the first 7, the
    # idle power until the death in the 8th, nothing after.
    energy = tables["energy"]
    mine = energy["node"] == "dev"
    assert list(energy["t_start"][mine]) == [float(k) for k in range(10)]
    assert list(energy["bytes"][mine]) == [100] * 7 + [0] * 3
    expected = [0.07] * 7 + [0.05 * (death - 7)] + [0.0] * 2
    assert energy["joules"][mine] == pytest.approx(expected, abs=1e-3 * 0.05)
    conform({name: table for name, table in tables.items() if name != "energy"})


def test_a_battery_death_joins_the_scheduled_faults() -> None:
    yaml = text(BATTERY).replace("scenario:\n", "scenario:\n  faults: [{at: 2s, crash: gw, "
                                                "for: 1s}]\n")
    _, tables, _ = run(yaml)
    assert list(tables["faults"]["kind"]) == ["crash", "battery"]


def test_energy_counted_leaves_every_other_table_as_it_was(example) -> None:
    _, without, _ = run(text(None))
    # A battery that never runs out gates the device's source: its times must not move.
    _, gated, facts = run(text("{batteries: [{devices: dev, joules: 1e9}]}"))
    assert facts["energy"]["battery_deaths"] == {}
    for tables in (example[1], gated):
        assert set(tables) - set(without) == {"energy"}
        for name, table in without.items():
            for column, values in table.items():
                other = tables[name][column]
                assert len(values) == len(other), (name, column)
                if values.dtype.kind == "f":
                    assert np.array_equal(values, other, equal_nan=True), (name, column)
                else:
                    assert list(values) == list(other), (name, column)


@pytest.mark.parametrize(("energy", "message"), [
    ("{power: {rpi4: {idle: -1}}}", "scenario.energy.power.rpi4.idle: watts >= 0 (got -1.0)"),
    ("{power: {rpi4: {idle: 7, max: 6.4}}}",
     "scenario.energy.power.rpi4.idle: idle watts <= max watts (6.4) (got 7.0)"),
    ("{power: {rpi4: {table: [[0, 3], [0.5, 2], [1, 6]]}}}",
     "scenario.energy.power.rpi4.table[1]: watts no lower than the point before's (3): a "
     "table increasing in utilisation (got [0.5, 2.0])"),
    ("{power: {rpi4: {table: [[0, 3], [0, 4], [1, 6]]}}}",
     "scenario.energy.power.rpi4.table[1]: a utilisation above the point before's (0)"),
    ("{power: {rpi4: {table: [[0.1, 3], [1, 6]]}}}",
     "scenario.energy.power.rpi4.table: points from utilisation 0 to 1"),
    ("{power: {rpi5: {idle: 3, max: 7}}}",
     "scenario.energy.power.rpi5: a hardware profile of the topology or a built-in one"),
    ("{batteries: [{devices: gw, joules: 10}]}",
     "scenario.energy.batteries[0].devices: devices only (a battery stops a device's "
     "emissions), but gw is a gateway"),
    ("{batteries: [{devices: nothing-*, joules: 10}]}",
     "scenario.energy.batteries[0].devices: a device name or pattern of topology trio"),
    ("{batteries: [{devices: dev, joules: 0}]}",
     "scenario.energy.batteries[0].joules: a capacity > 0"),
    ("{batteries: [{devices: dev}]}", "a capacity: exactly one of joules, mah"),
    ("{links: {wan: -1e-9}}", "scenario.energy.links.wan: joules per bit >= 0"),
    ("{radio: {per_message: -1}}", "scenario.energy.radio.per_message: joules >= 0"),
])
def test_bad_values_are_refused_naming_the_field(energy: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        point(text(energy))
    assert message in str(caught.value)


def test_a_profile_without_power_and_a_bad_price_list_are_refused(tmp_path) -> None:
    yaml = text().replace("profile: rpi4,", "profile: board,").replace(
        "topology:\n  name: trio\n", "topology:\n  name: trio\n  profiles:\n    board: "
        "{arch: arm64, cores: 4, clock: 1GHz, memory: 1GiB, speed: 0.3}\n")
    with pytest.raises(SpecError) as caught:
        point(yaml)
    assert "a power profile (idle and max watts) for hardware profile 'board', which gw " \
           "uses" in str(caught.value)
    point(yaml.replace("{links: {wired: 1e-9}}", "{power: {board: {idle: 1, max: 2}}}"))
    prices = tmp_path / "prices.yaml"
    prices.write_text("vm_per_hour:\n  vm.small: -0.1\n")
    with pytest.raises(SpecError) as caught:
        point(text(f"{{prices: {prices}}}"))
    # The list's value is not shown (a file the experiment names): its line and column are.
    assert (f"scenario.energy.prices: a valid price list, but {prices}:2:13: "
            "vm_per_hour.vm.small: a price >= 0 (got a number: not shown") in str(caught.value)


def test_the_containers_refuse_devices_batteries_before_anything_starts() -> None:
    point(text(), overrides=["run.backend=emu"])
    for backend, extra in (("emu", []), ("hybrid", [
            "scenario.mobility={model: {kind: random_waypoint}}"])):
        with pytest.raises(SpecError) as caught:
            point(text(BATTERY), overrides=[f"run.backend={backend}", *extra])
        assert "scenario.energy.batteries: no batteries on emu" in str(caught.value)


def test_a_calibrated_model_counts_the_hardware_not_the_containers_share() -> None:
    # Calibrated, the gateway's CPU is one core at the QEMU speed measured (0.068), its share
    # of the container's limit (2 host cores): the power model takes the Pi's own utilisation,
    # the work in reference seconds over the Pi's 4 cores at 0.45 each.
    yaml = text().replace("drain: 2s}", "drain: 2s, calibration: reference}")
    model, tables, facts = run(yaml)
    cpu = model.cpus["gw"]
    assert cpu.speed < 0.1 and cpu.capacity == 2
    pi_core_s = cpu.work * cpu.speed / 0.45
    dynamic = facts["energy"]["by_node"]["gw"] - PI4B[0] * 10
    assert dynamic == pytest.approx((PI4B[1] - PI4B[0]) * pi_core_s / 4, rel=1e-9)
    shares = tables["nodes"]["cpu"][tables["nodes"]["node"] == "gw"]
    energy = tables["energy"]
    assert np.sum(energy["utilisation"][energy["node"] == "gw"]) == pytest.approx(
        np.sum(shares) * 2 * cpu.speed / (4 * 0.45), rel=1e-9)


def _quickstart_energy(sample: str, duration: str = "60s") -> tuple[dict, dict]:
    from experiments.loader import load
    from tests.foundation.helpers import simulate_point

    found = load("quickstart", overrides=[f"run.duration={duration}", f"run.sample={sample}",
                                          "scenario.energy={}"]).points[0]
    result = simulate_point(found)
    return result.tables, result.facts["energy"]


def test_energy_does_not_depend_on_the_sampling_interval() -> None:
    # Issue 38, 5: 7 s does not divide 60 s; the sampler wrote whole intervals only (56 s
    # of the nodes' and links' energy, 6.7-8 % less than at 5 s). Its last row is at the
    # run's end, over the 4 s left; a Spark batch counts as it runs, not in the sample at
    # its trigger, so even 1 s and 2 s agree.
    figures = {sample: _quickstart_energy(sample) for sample in ("1s", "2s", "5s", "7s")}
    totals = {sample: energy["total_j"] for sample, (_, energy) in figures.items()}
    assert totals["7s"] == pytest.approx(totals["5s"], rel=1e-9)
    assert totals["1s"] == pytest.approx(totals["2s"], rel=1e-9) == pytest.approx(
        totals["5s"], rel=1e-9)
    for sample, (tables, energy) in figures.items():
        nodes = tables["nodes"]
        assert float(np.max(nodes["t"])) == 60.0, sample
        table = tables["energy"]
        spans = table["t_end"] - table["t_start"]
        gw = table["node"] == "gw-1"
        assert float(np.sum(spans[gw])) == pytest.approx(60.0), sample
        assert energy["by_node"]["cloud-1"] == pytest.approx(
            figures["5s"][1]["by_node"]["cloud-1"], rel=1e-9), sample
    tables, _ = figures["7s"]
    last = tables["nodes"]["t"] == 60.0
    assert sorted(tables["nodes"]["node"][last]) == sorted(
        ["gw-1", "gw-2", "gw-3", "gw-4", "broker-1", "cloud-1"])


SWITCHED = TRIO.replace(
    "    - {name: vm, kind: cloud_vm, profile: vm.small, site: cloud}\n",
    "    - {name: vm, kind: cloud_vm, profile: vm.small, site: cloud}\n"
    "    - {name: sw, kind: switch, site: cloud}\n").replace(
    "    - {from: broker, to: vm, latency: 1ms, bandwidth: 100Mbit}\n",
    "    - {from: broker, to: sw, latency: 1ms, bandwidth: 100Mbit}\n"
    "    - {from: sw, to: vm, latency: 1ms, bandwidth: 100Mbit}\n")


def switched(energy: str) -> str:
    return SWITCHED.replace("SCENARIO", ENERGY.replace("ENERGY", energy)).replace(
        "SEED", str(SEED))


def test_a_switch_given_a_power_profile_draws_its_power_for_the_run() -> None:
    # docs/energy.md: a switch counts once given a power profile; it drew 0 J.
    assert "kind: switch" in SWITCHED
    _, tables, facts = run(switched("{power: {switch: {idle: 3.0, max: 5.0}}}"))
    energy = facts["energy"]
    assert energy["by_node"]["sw"] == pytest.approx(3.0 * 10)
    assert energy["by_kind"]["switch"] == pytest.approx(30.0)
    table = tables["energy"]
    mine = table["node"] == "sw"
    assert list(table["t_start"][mine]) == [0.0] and list(table["t_end"][mine]) == [10.0]
    # Without a profile it draws nothing, as before.
    _, _, facts = run(switched("{}"))
    assert "sw" not in facts["energy"]["by_node"]
