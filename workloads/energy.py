"""Energy and cost (`scenario.energy`): power profiles, energy per bit per link kind, device
batteries, a price list, and the arithmetic both backends share to turn utilisation and bytes
into joules and money.

A node draws `P(u)` watts at CPU utilisation `u` (0 to 1) of its power profile, and an
interval of `dt` seconds at `u` costs `dt * P(u)` joules (iFogSim's linear model: E += dt *
(P_idle + (P_max - P_idle) * u); square and cubic put u^2, u^3 in its place; a table of
measured points is interpolated linearly). A link costs `bits * e` joules, `e` its kind's
energy per bit (LEAF's model): wired, WAN (its two ends at different sites) or wireless (a
device's radio to its gateway), the last plus an amplifier term that grows with the square of
the distance between its ends (Heinzelman's first-order radio model). A device draws its
profile's idle power and its radio's energy per message sent; a device with a battery stops
emitting when what it drew reaches the capacity (a `battery` row in the faults table). The
price list (workloads/prices/default.yaml, or a file the experiment names) charges cloud VMs
per hour by hardware profile, every other node its energy per kWh, and each site the bytes
leaving it. A gateway on a battery (`offload`) sends its operators to the cloud when
EnergyPolicy's rule says so (offload_reason, offload_time): a decision the model makes, so
on sim only.

Every default figure below names its source. The model (sim.features.energy) and the
emulation feed the same functions: `hardware_share`, `watts`, `link_kind`,
`energy_per_bit`, `cost`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from topologies.errors import SpecError, Withheld, first_error
from topologies.fields import PositiveDuration, Ratio
from topologies.profiles import BUILTIN_PROFILES
from workloads.faults import Patterns
from workloads.operator_engines import Move, operator_engine
from workloads.scenario import Strategy

PRICES = Path(__file__).parent / "prices" / "default.yaml"  # the shipped price list
MODELS = ("linear", "square", "cubic", "table")
LINK_KINDS = ("wired", "wireless", "wan")
KWH_J = 3.6e6
GB = 1e9  # a price per GB counts decimal gigabytes, as the providers bill

# -- default power profiles, watts, by hardware profile (topologies.profiles) ---------------
# Raspberry Pi 3B and 4B: idle and with all four cores loaded (stress --cpu 4), measured at
# the USB input by Jeff Geerling's Pi Dramble benchmarks ("Power Consumption Benchmarks",
# pidramble.com/wiki/benchmarks/power-consumption): Pi 3B 260 mA idle, 730 mA loaded at
# 5.1 V (about 1.4 W and 3.7 W); Pi 4B 540 mA and 1280 mA (about 2.7 W and 6.4 W).
PI3B = (1.4, 3.7)
PI4B = (2.7, 6.4)
# A cloud VM is its share of a server's power, per vCPU: the Cloud Carbon Footprint
# methodology's averages for AWS from SPECpower_ssj2008 results (cloudcarbonfootprint.org,
# "Methodology": 0.74 W per vCPU at 0 % utilisation, 3.5 W at 100 %), the hypervisor's
# cores shared out evenly; a VM of n vCPUs draws n times that.
VCPU = (0.74, 3.5)
# An ESP32-class sensor node (the `sensor` profile, 240 MHz): Espressif's ESP32 datasheet,
# "Power consumption by power modes": modem-sleep at 80 MHz about 20 mA, CPU at 240 MHz with
# the radio off about 50 mA, at 3.3 V (0.066 W and 0.165 W).
SENSOR = (0.066, 0.165)


def default_power(profile_name: str) -> tuple[float, float] | None:
    """The (idle, max) watts shipped for a built-in hardware profile, None for any other."""
    if profile_name == "rpi3b":
        return PI3B
    if profile_name == "rpi4":
        return PI4B
    if profile_name == "sensor":
        return SENSOR
    profile = BUILTIN_PROFILES.get(profile_name)
    if profile_name.startswith("vm.") and profile is not None:
        return (VCPU[0] * profile.cores, VCPU[1] * profile.cores)
    return None


# -- default energy per bit, joules, by link kind ----------------------------------------
# Wired (a LAN or metro Ethernet link): 0, as LEAF's examples (ETHERNET_WATT_PER_BIT = 0,
# dos-group/leaf examples/smart_city_traffic/settings.py): a switch port draws its power
# whether traffic flows or not; give the switch a power profile to count it.
WIRED_J_PER_BIT = 0.0
# WAN (a link between two sites): LEAF's 6658 nJ/bit (WAN_WATT_PER_BIT_UP, same file,
# after Jalali et al., "Fog computing may help to save energy in cloud computing", IEEE
# JSAC 2016).
WAN_J_PER_BIT = 6658e-9
# Wireless (a device's radio link): Heinzelman et al.'s first-order radio model ("Energy-
# efficient communication protocol for wireless microsensor networks", HICSS 2000): 50 nJ/bit
# for the electronics (PureEdgeSim's default network energy too) plus 100 pJ/bit/m^2 times
# the squared distance for the transmit amplifier.
WIRELESS_J_PER_BIT = 50e-9
WIRELESS_AMP_J_PER_BIT_M2 = 100e-12
# A device's own radio per message sent (every device, battery or not): a TI CC2420
# (802.15.4, the smart-city topology's radio class) transmits at 0 dBm drawing 17.4 mA at
# 3.0 V, at 250 kbit/s: 52.2 mW / 250 kbit/s = 208.8 nJ per bit of the message.
RADIO_J_PER_BIT = 17.4e-3 * 3.0 / 250e3
# A battery given in mAh without a voltage: a lithium-ion cell's nominal 3.7 V.
CELL_VOLTAGE = 3.7


class PowerProfile(BaseModel):
    """What a node of one hardware profile draws: `idle` and `max` watts and how it goes
    between them (`model`), or a `table` of [utilisation, watts] points measured."""

    model_config = ConfigDict(extra="forbid")

    idle: float | None = Field(default=None, allow_inf_nan=False,
                               description="watts at 0 % CPU")
    max: float | None = Field(default=None, allow_inf_nan=False,
                              description="watts at 100 % CPU")
    model: Literal["linear", "square", "cubic", "table"] = Field(
        default="linear", description="P(u) = idle + (max - idle) * u (linear), u^2 "
        "(square), u^3 (cubic), or the table's points interpolated")
    table: list[tuple[float, float]] | None = Field(
        default=None, description="[[utilisation, watts], ...] from 0 to 1, increasing")

    @model_validator(mode="after")
    def _table_model(self):
        if self.table is not None:
            self.model = "table"
        return self


class LinkEnergy(BaseModel):
    """Energy per bit by link kind, joules (nJ/bit x 1e-9)."""

    model_config = ConfigDict(extra="forbid")

    wired: float = Field(default=WIRED_J_PER_BIT, allow_inf_nan=False)
    wan: float = Field(default=WAN_J_PER_BIT, allow_inf_nan=False)
    wireless: float = Field(default=WIRELESS_J_PER_BIT, allow_inf_nan=False)
    wireless_amp: float = Field(default=WIRELESS_AMP_J_PER_BIT_M2, allow_inf_nan=False,
                                description="J per bit per square metre of distance")


class Radio(BaseModel):
    """A device's own radio: joules per message sent plus per bit of it."""

    model_config = ConfigDict(extra="forbid")

    per_message: float = Field(default=0.0, allow_inf_nan=False)
    per_bit: float = Field(default=RADIO_J_PER_BIT, allow_inf_nan=False)


class Battery(BaseModel):
    """Devices that run on a battery: its capacity in joules, or in mAh at `voltage`."""

    model_config = ConfigDict(extra="forbid")

    devices: Patterns = Field(description="device names or patterns")
    joules: float | None = Field(default=None, allow_inf_nan=False)
    mah: float | None = Field(default=None, allow_inf_nan=False)
    voltage: float = Field(default=CELL_VOLTAGE, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_capacity(self):
        if (self.joules is None) == (self.mah is None):
            raise ValueError("a capacity: exactly one of joules, mah")
        return self

    @property
    def capacity(self) -> float:
        """Joules."""
        return self.joules if self.joules is not None else self.mah * 3.6 * self.voltage


class EnergyPolicy(BaseModel):
    """When a battery node's operators go to the cloud: charge left below `battery_low` (a
    fraction of the capacity), or a predicted draw over the next `interval` above `budget`
    joules (the rule: offload_reason, offload_time)."""

    model_config = ConfigDict(extra="forbid")

    battery_low: Ratio = Field(default=0.2, gt=0.0, lt=1.0, description=(
        "offload when the charge left falls below this fraction of the capacity (20% or 0.2)"))
    budget: float | None = Field(default=None, gt=0.0, allow_inf_nan=False, description=(
        "offload when the present draw held over `interval` exceeds these joules"))
    interval: PositiveDuration = Field(default=1.0, description=(
        "how often the draw is measured and the budget weighed"))


class Offload(EnergyPolicy):
    """`scenario.energy.offload`: gateways on a battery (its capacity in joules, or in mAh at
    `voltage`) whose operators move to `to` when EnergyPolicy's rule says so, by `strategy`
    (default scenario.migration's). The battery here feeds the decision only: the gateway
    keeps running once it is empty (a device's battery, `batteries`, stops it); it does not
    recharge, and the operators do not come back."""

    gateways: Patterns = Field(description="gateway names or patterns, each on its own battery")
    joules: float | None = Field(default=None, allow_inf_nan=False)
    mah: float | None = Field(default=None, allow_inf_nan=False)
    voltage: float = Field(default=CELL_VOLTAGE, allow_inf_nan=False)
    to: str | None = Field(default=None, description=(
        "the node the operators go to (default: the topology's cloud VM, when it has one)"))
    strategy: Strategy | None = Field(default=None, description=(
        "how they move (default: scenario.migration.strategy)"))

    @model_validator(mode="after")
    def _one_capacity(self):
        if (self.joules is None) == (self.mah is None):
            raise ValueError("a capacity: exactly one of joules, mah")
        return self

    @property
    def capacity(self) -> float:
        """Joules."""
        return self.joules if self.joules is not None else self.mah * 3.6 * self.voltage


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


class Prices(BaseModel):
    """A price list: cloud VMs per hour by hardware profile, electricity per kWh for every
    other node, and bytes leaving a site per GB (by site, `default` for the rest)."""

    model_config = ConfigDict(extra="forbid")

    currency: str = "USD"
    vm_per_hour: dict[str, float] = Field(default_factory=dict)
    energy_per_kwh: float = Field(default=0.0, allow_inf_nan=False)
    egress_per_gb: dict[str, float] = Field(default_factory=lambda: {"default": 0.0})


# -- the arithmetic ----------------------------------------------------------------------

@dataclass(frozen=True)
class Power:
    """A resolved power profile: `watts(u)`."""

    idle: float
    max: float
    model: str = "linear"
    points: tuple[tuple[float, float], ...] = ()

    def watts(self, u: float) -> float:
        u = 0.0 if u < 0.0 else (1.0 if u > 1.0 else u)
        if self.model == "table":
            points = self.points
            for (u0, w0), (u1, w1) in zip(points, points[1:], strict=False):
                if u <= u1:
                    return w0 + (w1 - w0) * (u - u0) / (u1 - u0)
            return points[-1][1]
        shape = u if self.model == "linear" else (u * u if self.model == "square" else u ** 3)
        return self.idle + (self.max - self.idle) * shape


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


def hardware_share(limit_cores: float, speed: float, profile) -> float:
    """What a share of a CPU of `limit_cores` cores of `speed` (reference vCPUs per core)
    is as a share of the node's own hardware (its profile's cores at its speed): the factor
    that turns a container's (or a calibrated model's) CPU share into the utilisation the
    power model takes. 1 for a model of the hardware itself; for a gateway under QEMU, its
    container limit's host cores at the calibrated speed over the Pi's cores at the Pi's."""
    return (limit_cores * speed) / (profile.cores * profile.speed)


def link_kind(topology, a: str, b: str) -> str:
    """wireless (one end a device), wan (both ends have sites, different ones), or wired."""
    nodes = topology.nodes
    if nodes[a].kind == "device" or nodes[b].kind == "device":
        return "wireless"
    site_a, site_b = nodes[a].site, nodes[b].site
    if site_a is not None and site_b is not None and site_a != site_b:
        return "wan"
    return "wired"


def energy_per_bit(links: LinkEnergy, topology, a: str, b: str) -> tuple[str, float]:
    """A link's kind and joules per bit (a wireless one's at the distance between its ends)."""
    kind = link_kind(topology, a, b)
    if kind != "wireless":
        return kind, getattr(links, kind)
    (xa, ya), (xb, yb) = topology.nodes[a].position, topology.nodes[b].position
    return kind, links.wireless + links.wireless_amp * ((xa - xb) ** 2 + (ya - yb) ** 2)


def radio_energy(radio: Radio, size: int) -> float:
    """A device's radio energy for one message of `size` bytes."""
    return radio.per_message + size * 8 * radio.per_bit


def battery_of(spec: EnergySpec, topology) -> dict[str, float]:
    """Device -> its battery's capacity in joules (the last battery naming it wins)."""
    capacity: dict[str, float] = {}
    for battery in spec.batteries:
        for device in topology.select(battery.devices):
            capacity[device] = battery.capacity
    return capacity


def load_prices(path: str | None) -> Prices:
    """The price list at `path` (the shipped one when None); a SpecError names the file,
    line, field and what is wrong (a list the experiment names: not the value there, its
    column instead, topologies.documents.Document.confidential)."""
    from topologies.documents import read

    file = Path(path) if path else PRICES
    document = read(file, confidential=path is not None)
    if not isinstance(document.data, dict):
        raise SpecError((), Withheld(document.data), "a price list: a mapping with "
                        + ", ".join(Prices.model_fields), str(file), 1)
    try:
        prices = Prices.model_validate(document.data)
    except ValidationError as exc:
        raise document.error(first_error(exc, document.data)) from None
    for key, values in (("vm_per_hour", prices.vm_per_hour),
                        ("egress_per_gb", prices.egress_per_gb)):
        for name, value in values.items():
            if value < 0:
                raise document.error(SpecError((key, name), value, "a price >= 0"))
    if prices.energy_per_kwh < 0:
        raise document.error(SpecError(("energy_per_kwh",), prices.energy_per_kwh,
                                       "a price >= 0"))
    return prices


def egress_price(prices: Prices, site: str) -> float:
    return prices.egress_per_gb.get(site, prices.egress_per_gb.get("default", 0.0))


def cost(prices: Prices, topology, duration: float, node_joules: dict[str, float],
         egress_bytes: dict[str, int]) -> dict:
    """The run's cost: each node's (a VM profile with an hourly price pays it for the run's
    duration, any other node its energy at energy_per_kwh), each site's (its nodes' and its
    egress), and the total, in the list's currency."""
    by_node: dict[str, float] = {}
    for name, node in topology.nodes.items():
        hourly = prices.vm_per_hour.get(node.profile_name)
        if hourly is not None and node.kind != "device":
            by_node[name] = hourly * duration / 3600
        elif name in node_joules:
            by_node[name] = node_joules[name] / KWH_J * prices.energy_per_kwh
    by_site: dict[str, float] = {}
    for name, value in by_node.items():
        site = topology.nodes[name].site or "(none)"
        by_site[site] = by_site.get(site, 0.0) + value
    egress = {site: count / GB * egress_price(prices, site)
              for site, count in egress_bytes.items()}
    for site, value in egress.items():
        by_site[site] = by_site.get(site, 0.0) + value
    return {"currency": prices.currency, "total": sum(by_node.values()) + sum(egress.values()),
            "by_node": by_node, "by_site": by_site, "egress": egress}


# -- the table and facts of a run --------------------------------------------------------

COLUMNS = ("t_start", "t_end", "node", "link", "kind", "utilisation", "bytes", "joules")
_FLOATS = ("t_start", "t_end", "utilisation", "joules")


class Ledger:
    """One run's energy table and facts (experiments.schema's `energy`), filled alike by the
    model (sim.features.energy) and the emulation (emu.features.energy): the nodes' CPU per
    interval at their hardware's utilisation, the links' bytes per interval, devices and
    radio links for the run (or per interval), then the facts and the cost."""

    def __init__(self, spec: EnergySpec, topology, duration: float):
        self.spec = spec
        self.topology = topology
        self.duration = duration
        self.power: dict[str, Power] = {}
        for name, node in topology.nodes.items():
            if node.kind == "switch" and node.profile_name not in spec.power:
                continue  # a switch draws nothing unless given a power profile
            power = resolve_power(spec, node.profile_name)
            if power is not None:
                self.power[name] = power
        self.rows: dict[str, list] = {name: [] for name in COLUMNS}
        self.node_j: dict[str, float] = {}
        self.link_j: dict[str, float] = {}
        self.link_kind: dict[str, str] = {}
        self.egress: dict[str, int] = {}
        self._per_bit: dict[tuple[str, str], tuple[str, float]] = {}

    def _row(self, t0, t1, node, link, kind, utilisation, count, joules) -> None:
        rows = self.rows
        rows["t_start"].append(t0)
        rows["t_end"].append(t1)
        rows["node"].append(node)
        rows["link"].append(link)
        rows["kind"].append(kind)
        rows["utilisation"].append(utilisation)
        rows["bytes"].append(count)
        rows["joules"].append(joules)

    def cpu(self, t0: float, t1: float, node: str, u: float) -> None:
        """A node from t0 to t1 at hardware utilisation u (clipped to 0..1)."""
        power = self.power.get(node)
        if power is None:
            return
        u = 0.0 if u < 0.0 else (1.0 if u > 1.0 else u)
        joules = (t1 - t0) * power.watts(u)
        self.node_j[node] = self.node_j.get(node, 0.0) + joules
        self._row(t0, t1, node, None, self.topology.nodes[node].kind, u, 0, joules)

    def link(self, t0: float, t1: float, src: str, dst: str, count: int) -> None:
        """One direction of a link carried `count` bytes from t0 to t1."""
        key = (src, dst)
        if key not in self._per_bit:
            self._per_bit[key] = energy_per_bit(self.spec.links, self.topology, src, dst)
        kind, e = self._per_bit[key]
        name = f"{src}>{dst}"
        joules = count * 8 * e
        self.link_j[name] = self.link_j.get(name, 0.0) + joules
        self.link_kind[name] = kind
        nodes = self.topology.nodes
        site = nodes[src].site
        if site is not None and nodes[dst].site != site and count:
            self.egress[site] = self.egress.get(site, 0) + count
        self._row(t0, t1, None, name, kind, math.nan, count, joules)

    def device(self, node: str, sent: int, radio_j: float) -> None:
        """A device for the whole run: its idle power and its radio's `radio_j`."""
        power = self.power.get(node)
        if power is None:
            return
        joules = power.idle * self.duration + radio_j
        self.node_j[node] = joules
        self._row(0.0, self.duration, node, None, "device", math.nan, sent, joules)

    def device_intervals(self, node: str, starts, ends, sent, joules) -> None:
        """A (battery) device interval by interval: bytes sent and joules drawn in each."""
        count = len(starts)
        for column, values in zip(self.rows.values(), (
                list(starts), list(ends), [node] * count, [None] * count, ["device"] * count,
                [math.nan] * count, [int(b) for b in sent], [float(j) for j in joules]),
                strict=True):
            column.extend(values)
        self.node_j[node] = float(sum(joules))

    def unsampled(self) -> None:
        """Every node with a power profile that no backend samples or counts as a device (a
        switch given a profile: no CPU of its own is measured) draws its idle power for the
        run: a port draws it whether traffic flows or not. Called once, before `table`."""
        for name, power in self.power.items():
            if name not in self.node_j and self.topology.nodes[name].kind == "switch":
                joules = power.idle * self.duration
                self.node_j[name] = joules
                self._row(0.0, self.duration, name, None, "switch", 0.0, 0, joules)

    def table(self) -> dict:
        return {name: np.array(values, dtype=float if name in _FLOATS else (
                    np.int64 if name == "bytes" else object))
                for name, values in self.rows.items()}

    def facts(self, delivered: int, deaths: dict[str, float], prices: Prices) -> dict:
        """Total joules, per delivered message, by node kind and link kind, by site (a link's
        at its sending end's), by node, battery deaths and the cost."""
        topology = self.topology
        by_kind: dict[str, float] = {}
        by_site: dict[str, float] = {}
        for name, joules in self.node_j.items():
            node = topology.nodes[name]
            by_kind[node.kind] = by_kind.get(node.kind, 0.0) + joules
            site = node.site or "(none)"
            by_site[site] = by_site.get(site, 0.0) + joules
        for name, joules in self.link_j.items():
            kind = self.link_kind[name]
            by_kind[kind] = by_kind.get(kind, 0.0) + joules
            site = topology.nodes[name.split(">", 1)[0]].site or "(none)"
            by_site[site] = by_site.get(site, 0.0) + joules
        nodes_j, links_j = sum(self.node_j.values()), sum(self.link_j.values())
        total = nodes_j + links_j
        return {"total_j": total, "nodes_j": nodes_j, "links_j": links_j,
                "delivered": delivered,
                "per_delivered_j": total / delivered if delivered else None,
                "by_kind": by_kind, "by_site": by_site, "by_node": dict(self.node_j),
                "battery_deaths": dict(deaths),
                "cost": cost(prices, topology, self.duration, self.node_j, self.egress)}


# -- the check ---------------------------------------------------------------------------

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
        _battery_nodes(topology, path, battery, "devices", "device",
                       "a battery stops a device's emissions")
    try:
        load_prices(energy.prices)
    except SpecError as error:  # placed in the experiment, naming the list's own place
        raise SpecError(base + ("prices",), energy.prices or str(PRICES),
                        f"a valid price list, but {error}") from None
    if energy.offload is not None:
        _check_offload(spec, topology, energy.offload)


def offload_target(offload: Offload, topology) -> str | None:
    """Where the offload sends operators: `to`, else the topology's cloud VM when it has
    exactly one (None when it has none or several: the check asks for `to`)."""
    if offload.to is not None:
        return offload.to
    clouds = topology.of_kind("cloud_vm")
    return clouds[0].name if len(clouds) == 1 else None


def _battery_nodes(topology, path: tuple, battery, key: str, kind: str,
                   why: str) -> list[str]:
    """A battery's capacity > 0 and its nodes (`battery.<key>`, names or patterns) all of
    `kind`: the names, in order."""
    for name in ("joules", "mah", "voltage"):
        value = getattr(battery, name)
        if value is not None and value <= 0:
            raise SpecError(path + (name,), value, "a capacity > 0")
    patterns = getattr(battery, key)
    found: list[str] = []
    for j, pattern in enumerate(patterns):
        where = path + (key, j) if len(patterns) > 1 else path + (key,)
        names = topology.match(pattern)
        if not names:
            raise SpecError(where, pattern, f"a {kind} name or pattern of topology "
                            f"{topology.name}")
        for name in names:
            other = topology.nodes[name].kind
            if other != kind:
                raise SpecError(where, pattern, f"{kind}s only ({why}), but {name} is a "
                                f"{other}")
            found.append(name)
    return found


def _check_offload(spec, topology, offload: Offload) -> None:
    """Gateways on a battery of a capacity > 0, each running an operator the coordinator can
    move (not a follow or Spark one; a strategy its state allows; not one scheduled
    migrations move from there too), to a gateway or cloud VM where it does not run."""
    from workloads.pipeline import placement

    base = ("scenario", "energy", "offload")
    gateways = _battery_nodes(topology, base, offload, "gateways", "gateway",
                              "the battery's charge decides where their operators run")
    target = offload_target(offload, topology)
    if target is None:
        clouds = [node.name for node in topology.of_kind("cloud_vm")]
        raise SpecError(base + ("to",), None, "a node to send the operators to: topology "
                        f"{topology.name} has {len(clouds)} cloud VMs ({', '.join(clouds)}), "
                        "name one")
    node = topology.nodes.get(target)
    if node is None:
        raise SpecError(base + ("to",), target, f"a node of topology {topology.name}")
    if node.kind not in ("gateway", "cloud_vm"):
        raise SpecError(base + ("to",), target, f"a gateway or cloud VM, but {target} is a "
                        f"{node.kind}")
    if target in gateways:
        raise SpecError(base + ("to",), target, "a node other than the gateways it offloads")
    if not topology.of_kind("broker"):
        raise SpecError(base, offload.gateways, "a topology with a broker: a move diverts an "
                        "operator's input there")
    strategy = offload.strategy or spec.scenario.migration.strategy
    strategy_path = (base + ("strategy",) if offload.strategy is not None
                     else ("scenario", "migration", "strategy"))
    moved = {}
    for op in spec.pipeline:
        placed = placement(topology, op.on)
        mine = [g for g in gateways if g in placed]
        if not mine:
            continue
        moved[op.name] = mine
        if op.follow is not None:
            raise SpecError(base + ("gateways",), mine[0], f"gateways without follow "
                            f"operators: {op.name}'s instances are the policy's to move")
        engine = operator_engine(op.engine)
        if engine.moves_by is not Move.AGENTS:  # the offload moves by the agents' protocol
            raise SpecError(base + ("gateways",), mine[0], f"gateways without {engine.title} "
                            f"operators: {op.name} runs on {engine.title}, which the offload "
                            "does not move")
        if target in placed:
            raise SpecError(base + ("to",), target, f"a node {op.name} does not run on "
                            f"already ({', '.join(placed)}): it moves {op.name} from "
                            f"{mine[0]}")
        if strategy == "pause_drain" and op.stateful:
            raise SpecError(strategy_path, strategy, f"pause_transfer or parallel for the "
                            f"offload: {op.name} keeps window state, which pause_drain would "
                            "lose")
        if strategy != "pause_drain" and not op.stateful:
            raise SpecError(strategy_path, strategy, f"pause_drain for the offload: "
                            f"{op.name} has no window state to transfer or synchronise "
                            "(scenario.energy.offload.strategy: pause_drain)")
    if not moved:
        raise SpecError(base + ("gateways",), offload.gateways, "gateways an operator of the "
                        "pipeline runs on: the offload moves their operators")
    for i, plan in enumerate(spec.scenario.migrations):
        mine = moved.get(plan.operator, [])
        source = plan.source if plan.source is not None else None
        if mine and (source in mine or source is None):
            raise SpecError(("scenario", "migrations", i, "operator"), plan.operator,
                            f"an operator the offload does not move: it moves {plan.operator} "
                            f"from {', '.join(mine)} when the battery says so")


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


# -- the energy-aware decision (issue 30, item 4) ----------------------------------------
#
# One rule for every backend, as workloads.recovery's re-placement is: a node offloads its
# operators to the cloud when its battery's charge left falls below `battery_low` of the
# capacity, or when the energy it is predicted to draw over the next `interval` exceeds
# `budget` (EnergyPolicy, above; `scenario.energy.offload` in an experiment).

def offload_reason(policy: EnergyPolicy, capacity: float, drawn: float,
                   watts: float) -> str | None:
    """Why a node with `capacity` joules, `drawn` of them spent, drawing `watts` now, should
    offload: "battery_low", "budget", or None to stay. The prediction is the present draw
    held over the next interval (the node's power does not change unless its load does)."""
    if capacity - drawn < policy.battery_low * capacity:
        return "battery_low"
    if policy.budget is not None and watts * policy.interval > policy.budget:
        return "budget"
    return None


def offload_time(policy: EnergyPolicy, capacity: float, drawn: float, watts: float,
                 now: float = 0.0) -> float:
    """When, at a constant `watts`, the charge left first falls below `battery_low`: the
    time the model schedules the decision at (math.inf when the node draws nothing)."""
    if capacity - drawn < policy.battery_low * capacity:
        return now
    if watts <= 0.0:
        return math.inf
    return now + (capacity - drawn - policy.battery_low * capacity) / watts
