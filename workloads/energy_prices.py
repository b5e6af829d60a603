"""The price list of `scenario.energy` and the run's cost: workloads/prices/default.yaml, or
a file the experiment names, charges cloud VMs per hour by hardware profile, every other node
its energy per kWh, and each site the bytes leaving it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from topologies.documents import read
from topologies.errors import SpecError, Withheld, first_error

PRICES = Path(__file__).parent / "prices" / "default.yaml"  # the shipped price list
KWH_J = 3.6e6
GB = 1e9  # a price per GB counts decimal gigabytes, as the providers bill


class Prices(BaseModel):
    """A price list: cloud VMs per hour by hardware profile, electricity per kWh for every
    other node, and bytes leaving a site per GB (by site, `default` for the rest)."""

    model_config = ConfigDict(extra="forbid")

    currency: str = "USD"
    vm_per_hour: dict[str, float] = Field(default_factory=dict)
    energy_per_kwh: float = Field(default=0.0, allow_inf_nan=False)
    egress_per_gb: dict[str, float] = Field(default_factory=lambda: {"default": 0.0})


def load_prices(path: str | None) -> Prices:
    """The price list at `path` (the shipped one when None); a SpecError names the file,
    line, field and what is wrong (a list the experiment names: not the value there, its
    column instead, topologies.documents.Document.confidential)."""
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
