"""One run's energy table and facts (experiments.schema's `energy`): the ledger the model
(sim.features.energy) and the emulation (emu.features.energy) fill alike, interval by
interval, and the totals and cost it gives at the end (workloads.energy_report reports them).
"""

from __future__ import annotations

import math

import numpy as np

from workloads.energy import EnergySpec, resolve_power
from workloads.energy_power import Power, energy_per_bit
from workloads.energy_prices import Prices, cost

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
