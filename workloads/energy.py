"""Energy and cost (`scenario.energy`): the experiment's spec and its check.

Its parts, with the figures shipped for them and the arithmetic on them: power profiles,
energy per bit by link kind, a device's radio and batteries in workloads.energy_power; the
price list and the run's cost in workloads.energy_prices; the offload of battery gateways and
its rule in workloads.energy_offload. workloads.energy_ledger counts a run's joules into its
table and facts, workloads.energy_report reports them. Every default figure names its source.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from topologies.errors import SpecError
from topologies.profiles import BUILTIN_PROFILES
from workloads.energy_offload import Offload, check_offload
from workloads.energy_power import (
    Battery,
    LinkEnergy,
    Power,
    PowerProfile,
    Radio,
    battery_nodes,
    default_power,
)
from workloads.energy_prices import PRICES, load_prices


class EnergySpec(BaseModel):
    """Count each node's and link's energy, devices' batteries, and the run's cost."""

    model_config = ConfigDict(extra="forbid")

    power: dict[str, PowerProfile] = Field(
        default_factory=dict, description="power profiles by hardware profile name, over "
        "the shipped ones (rpi3b, rpi4, sensor, vm.*)")
    links: LinkEnergy = Field(default_factory=LinkEnergy)
    radio: Radio = Field(default_factory=Radio)
    batteries: list[Battery] = Field(default_factory=list)
    prices: str | None = Field(default=None, description="a price list (YAML) replacing "
                               "workloads/prices/default.yaml")
    calibration: str | None = Field(
        default=None, description="emu: the calibration profile whose measured QEMU speed "
        "turns an arm64 gateway container's CPU into the Pi's (default: reference); sim "
        "takes run.calibration's")
    offload: Offload | None = Field(
        default=None, description="battery gateways whose operators go to a cloud node "
        "when their charge runs low or their draw exceeds a budget (on sim the model's draw; "
        "on emu and hybrid the container's measured CPU)")


def resolve_power(spec: EnergySpec, profile_name: str) -> Power | None:
    """The power of a hardware profile: the experiment's over the shipped default; None when
    neither knows it."""
    written = spec.power.get(profile_name)
    default = default_power(profile_name)
    if written is None:
        return Power(*default) if default is not None else None
    if written.model == "table":
        points = tuple((float(u), float(w)) for u, w in written.table)
        return Power(points[0][1], points[-1][1], "table", points)
    idle = written.idle if written.idle is not None else (default or (None, None))[0]
    high = written.max if written.max is not None else (default or (None, None))[1]
    if idle is None or high is None:
        return None
    return Power(idle, high, written.model)


def battery_of(spec: EnergySpec, topology) -> dict[str, float]:
    """Device -> its battery's capacity in joules (the last battery naming it wins)."""
    capacity: dict[str, float] = {}
    for battery in spec.batteries:
        for device in topology.select(battery.devices):
            capacity[device] = battery.capacity
    return capacity


def check(spec, topology) -> None:
    """Power profiles that make sense (watts >= 0, idle <= max, a table from 0 to 1 whose
    utilisations increase and watts never fall), one for every hardware profile a powered
    node uses, for profiles that exist; energies per bit >= 0; batteries on devices only,
    with a capacity > 0; a price list that reads."""
    energy = spec.scenario.energy
    if energy is None:
        return
    base = ("scenario", "energy")
    known = set(BUILTIN_PROFILES) | {node.profile_name for node in topology.nodes.values()}
    for name, power in energy.power.items():
        path = base + ("power", name)
        if name not in known:
            raise SpecError(path, name, "a hardware profile of the topology or a built-in one "
                            f"({', '.join(sorted(known))})")
        _check_power(path, power, default_power(name))
    for node in topology.nodes.values():
        if node.kind == "switch" and node.profile_name not in energy.power:
            continue  # a switch draws nothing unless given a power profile
        if resolve_power(energy, node.profile_name) is None:
            raise SpecError(base + ("power",), sorted(energy.power),
                            f"a power profile (idle and max watts) for hardware profile "
                            f"{node.profile_name!r}, which {node.name} uses")
    for name in LinkEnergy.model_fields:
        value = getattr(energy.links, name)
        if value < 0:
            raise SpecError(base + ("links", name), value, "joules per bit >= 0")
    for name in Radio.model_fields:
        value = getattr(energy.radio, name)
        if value < 0:
            raise SpecError(base + ("radio", name), value, "joules >= 0")
    for i, battery in enumerate(energy.batteries):
        path = base + ("batteries", i)
        battery_nodes(topology, path, battery, "devices", "device",
                      "a battery stops a device's emissions")
    try:
        load_prices(energy.prices)
    except SpecError as error:  # placed in the experiment, naming the list's own place
        raise SpecError(base + ("prices",), energy.prices or str(PRICES),
                        f"a valid price list, but {error}") from None
    if energy.offload is not None:
        check_offload(spec, topology, energy.offload)


def _check_power(path: tuple, power: PowerProfile, default) -> None:
    if power.model == "table":
        points = power.table
        if len(points) < 2:
            raise SpecError(path + ("table",), points, "at least two [utilisation, watts] "
                            "points, from 0 to 1")
        for k, (u, w) in enumerate(points):
            if not (math.isfinite(u) and math.isfinite(w)):
                raise SpecError(path + ("table", k), [u, w], "finite numbers")
            if w < 0:
                raise SpecError(path + ("table", k), [u, w], "watts >= 0")
        if points[0][0] != 0 or points[-1][0] != 1:
            raise SpecError(path + ("table",), points, "points from utilisation 0 to 1")
        for k in range(1, len(points)):
            if points[k][0] <= points[k - 1][0]:
                raise SpecError(path + ("table", k), list(points[k]),
                                f"a utilisation above the point before's "
                                f"({points[k - 1][0]:g}): a table increasing in utilisation")
            if points[k][1] < points[k - 1][1]:
                raise SpecError(path + ("table", k), list(points[k]),
                                f"watts no lower than the point before's ({points[k - 1][1]:g})"
                                ": a table increasing in utilisation")
        return
    for name in ("idle", "max"):
        value = getattr(power, name)
        if value is not None and value < 0:
            raise SpecError(path + (name,), value, "watts >= 0")
    idle = power.idle if power.idle is not None else (default or (None, None))[0]
    high = power.max if power.max is not None else (default or (None, None))[1]
    if idle is not None and high is not None and idle > high:
        raise SpecError(path + ("idle",), idle, f"idle watts <= max watts ({high:g})")
