"""What scenario.energy reports (workloads.reports): its table, its figures in the run's
summary, and its rows in `foglab compare`. The ledger that counts the joules is
workloads.energy_ledger's."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from workloads.reports import NAME, FeatureTable, Figure, RunFacts, fail, required


def _check_table(name: str, table: pa.Table) -> None:
    required(name, table, ["t_start", "t_end", "kind", "bytes", "joules"])
    fail(name, table, "t_end is after t_start",
         pc.less_equal(table.column("t_end"), table.column("t_start")))
    fail(name, table, "joules is >= 0", pc.less(table.column("joules"), 0.0))
    value = table.column("utilisation")
    fail(name, table, "utilisation is a share, 0 to 1, or null",
         pc.or_(pc.less(value, 0.0), pc.greater(value, 1.0)))
    fail(name, table, "a row is of a node or of a link, one of them",
         pc.equal(pc.is_null(table.column("node")), pc.is_null(table.column("link"))))


# A row per node with a CPU per sample interval (utilisation: its own hardware's, 0 to 1;
# kind: its node kind), per link direction per interval (emu: per link, both directions)
# (bytes; kind: wired, wan or wireless), per device and radio link for the whole run (a
# battery device: per interval); the joules of each.
TABLES = {"energy": FeatureTable(pa.schema([
    ("t_start", pa.float64()), ("t_end", pa.float64()), ("node", NAME), ("link", NAME),
    ("kind", NAME), ("utilisation", pa.float64()), ("bytes", pa.int64()),
    ("joules", pa.float64()),
]), _check_table)}


def summary(tables: dict, facts: dict) -> dict:
    """Total energy, per delivered message, nodes against links, battery deaths and cost."""
    energy = facts.get("energy")
    if not energy:
        return {}
    figures = {"energy J": energy["total_j"], "J per delivered": energy.get("per_delivered_j")}
    for kind, joules in sorted(energy.get("by_kind", {}).items()):
        figures[f"{kind} J"] = joules
    figures["battery deaths"] = len(energy.get("battery_deaths", {}))
    money = energy.get("cost")
    if money:
        figures[f"cost {money['currency']}"] = money["total"]
    offloads = energy.get("offloads")
    if offloads is not None:  # scenario.energy.offload: a row per gateway watched
        times = [o["t"] for o in offloads if o["t"] is not None]
        figures["offloads"] = len(times)
        figures["first offload s"] = min(times) if times else None
    return figures


def compare_rows(runs: Mapping[str, RunFacts]) -> list[Figure]:
    """The joules, in all and per node that has a CPU: both backends count them by one
    ledger, sim from the model's utilisation, emu from each container's measured CPU."""
    energy = {label: run.facts.get("energy") or {} for label, run in runs.items()}
    if not any(energy.values()):
        return []
    rows = [Figure("energy", "energy", "J",
                   {label: e.get("total_j") for label, e in energy.items()})]
    nodes: list[str] = []
    for label, run in runs.items():  # the nodes with a CPU, as the cpu rows take them
        nodes += [n for n in energy[label].get("by_node", {})
                  if n in run.summary.get("nodes", {}) and n not in nodes]
    rows += [Figure(f"energy:{node}", f"energy {node}", "J",
                    {label: (e.get("by_node") or {}).get(node) for label, e in energy.items()},
                    node=node) for node in nodes]
    return rows
