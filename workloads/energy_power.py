"""What nodes, links and devices draw and what batteries hold (`scenario.energy`): the
shipped figures, each naming its source, and the arithmetic every backend shares.

A node draws `P(u)` watts at CPU utilisation `u` (0 to 1) of its power profile, and an
interval of `dt` seconds at `u` costs `dt * P(u)` joules (iFogSim's linear model: E += dt *
(P_idle + (P_max - P_idle) * u); square and cubic put u^2, u^3 in its place; a table of
measured points is interpolated linearly). A link costs `bits * e` joules, `e` its kind's
energy per bit (LEAF's model): wired, WAN (its two ends at different sites) or wireless (a
device's radio to its gateway), the last plus an amplifier term that grows with the square of
the distance between its ends (Heinzelman's first-order radio model). A device draws its
profile's idle power and its radio's energy per message sent; a device with a battery stops
emitting when what it drew reaches the capacity (a `battery` row in the faults table).

The model (sim.features.energy) and the emulation feed the same functions: `hardware_share`,
`watts`, `link_kind`, `energy_per_bit`. The experiment's part (`scenario.energy`, its check)
is workloads.energy's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from topologies.errors import SpecError
from topologies.profiles import BUILTIN_PROFILES
from workloads.faults import Patterns

MODELS = ("linear", "square", "cubic", "table")
LINK_KINDS = ("wired", "wireless", "wan")

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


def battery_nodes(topology, path: tuple, battery, key: str, kind: str,
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
