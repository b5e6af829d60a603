"""Relations between runs: what must hold of any run, and between two runs that differ in one
known way, whatever the figures are. Each check reads runs (tests/relations/runs.py: a Run's
conformed tables, facts and summary) and returns its violations, one sentence each, empty
when the relation holds, so that one check serves every experiment of the catalog and a
deliberately broken model (tests/relations/test_relations_broken.py) alike.

- Conserved: every reading ends in one state, counted once (check_readings_conserved); the
  energy table's rows add up to the energy facts (check_energy_conserved) and cover the run
  (check_energy_covers_run).
- Must not change: tables, facts and summary the same (check_same_tables, check_same_facts,
  check_same_summary), energy totals the same (check_same_energy).
- Must move, and which way: a figure larger in one run than in the other (check_grows).
- Bounded: a part never above its whole, a share in [0, 1] (check_bounds).
- Must be said: a migration without an end counted as such in the summary
  (check_unfinished_said), an overloaded node named in facts["saturated"]
  (check_saturation_said).
- Nothing after the end: no migration, fault, recovery or replica action starting at or after
  the run's duration (check_nothing_after_end).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tests.relations.runs import Run

# Float figures computed two ways (a table summed against a running total) agree to this.
REL, ABS = 1e-9, 1e-9
# A share (cpu, utilisation) is a difference of running float totals: -1e-17 is a zero.
SHARE_TOLERANCE = 1e-9
TIME_TOLERANCE = 1e-6
# At most this many examples named in one violation.
SHOWN = 5


def _close(a: float, b: float, rel: float = REL, abs_: float = ABS) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def _few(items) -> str:
    items = list(items)
    shown = ", ".join(str(i) for i in items[:SHOWN])
    return shown + (f", ... ({len(items)} in all)" if len(items) > SHOWN else "")


def _column(table: pa.Table, name: str) -> np.ndarray:
    """A column as numpy: names as str (None for null), numbers with NaN for null."""
    column = table.column(name)
    if pa.types.is_dictionary(column.type):
        column = pc.cast(column, pa.string())
    if pa.types.is_integer(column.type) and column.null_count:
        column = pc.cast(column, pa.float64())
    return column.to_numpy(zero_copy_only=False)


def _frame(table: pa.Table, names: list[str]) -> pd.DataFrame:
    return pd.DataFrame({name: _column(table, name) for name in names})


# -- conserved -------------------------------------------------------------------------------

_STATES = ("delivered", "in_flight", "filtered", "lost")  # a reading's best copy: first of these


def reading_states(run: Run) -> pd.DataFrame:
    """One row per distinct reading id of the messages table: how many streams and sources
    its rows (copies) name, its first row's stream and source, how many rows it has, and its
    best state, counted here from the rows (not by experiments.summary)."""
    messages = run.tables["messages"]
    frame = _frame(messages, ["id", "stream", "source", "state"])
    frame["rank"] = frame["state"].map({s: i for i, s in enumerate(_STATES)}).fillna(
        len(_STATES)).astype(int)
    grouped = frame.groupby("id", sort=True)
    readings = grouped.agg(streams=("stream", "nunique"), sources=("source", "nunique"),
                           stream=("stream", "first"), source=("source", "first"),
                           rows=("state", "size"), rank=("rank", "min"))
    readings["best"] = [(_STATES[r] if r < len(_STATES) else None) for r in readings["rank"]]
    return readings


def check_readings_conserved(run: Run) -> list[str]:
    """Every reading the sources emitted ends in exactly one state, by its best copy: the
    messages table has every emitted reading's id (no more, no fewer, per device too), each
    row's state is one of delivered, filtered, lost, in_flight, a reading's copies agree on
    its stream and source, and the summary's four counts are the table's and add up to
    the facts' `emitted`. (Sinks may copy a reading: counted by distinct id.)"""
    if not run.whole_messages:
        return []
    found = []
    facts, summary = run.facts, run.summary
    emitted = facts["emitted"]
    readings = reading_states(run)
    if len(readings) != emitted:
        missing = emitted - len(readings)
        found.append(f"{len(readings):,} distinct reading ids in the messages table, "
                     f"{emitted:,} emitted (facts): " + (
                         f"{missing:,} readings without an end in the table" if missing > 0
                         else f"{-missing:,} ids that no source emitted"))
    by_device = readings.groupby("source").size()
    wrong = {device: (int(by_device.get(device, 0)), count)
             for device, count in (facts.get("emitted_by_device") or {}).items()
             if int(by_device.get(device, 0)) != count}
    extra = sorted(set(by_device.index) - set(facts.get("emitted_by_device") or {}))
    if wrong:
        found.append(f"{len(wrong)} devices' readings in the table are not the number they "
                     "emitted (table, facts): " + _few(f"{d} {t} vs {f}"
                                                       for d, (t, f) in wrong.items()))
    if extra:
        found.append(f"readings in the table from sources that emitted nothing by the facts: "
                     f"{_few(extra)}")
    states = set(_column(run.tables["messages"], "state")) - set(_STATES)
    if states:
        found.append(f"rows in a state that is none of {', '.join(_STATES)}: {_few(states)}")
    mixed = readings[(readings["streams"] > 1) | (readings["sources"] > 1)]
    if len(mixed):
        found.append(f"{len(mixed)} readings whose copies disagree on their stream or source: "
                     f"ids {_few(mixed.index)}")
    counted = readings["best"].value_counts()
    for state in _STATES:
        if summary.get(state) != int(counted.get(state, 0)):
            found.append(f"the summary's {state} is {summary.get(state)}, the table's readings "
                         f"{state} by their best copy {int(counted.get(state, 0))}")
    ends = sum(summary.get(state) or 0 for state in _STATES)
    if summary.get("emitted") != emitted or ends != emitted:
        found.append(f"the summary's emitted is {summary.get('emitted')} and its delivered + "
                     f"in_flight + filtered + lost {ends}; the facts' emitted {emitted}")
    return found


def check_energy_conserved(run: Run) -> list[str]:
    """With scenario.energy: the energy table's joules add up to the facts' total, per node,
    per kind, nodes and links apart (a row is of a node or of a link)."""
    energy = run.facts.get("energy")
    if not energy:
        return []
    found = []
    table = _frame(run.tables["energy"], ["node", "link", "kind", "joules"])
    total = float(table["joules"].sum())
    if not _close(total, energy["total_j"]):
        found.append(f"the energy table's rows add up to {total:.9g} J, the facts' total_j is "
                     f"{energy['total_j']:.9g} J")
    nodes = table[table["node"].notna()]
    links = table[table["link"].notna()]
    for part, rows in (("nodes_j", nodes), ("links_j", links)):
        if not _close(float(rows["joules"].sum()), energy[part]):
            found.append(f"the table's {part.split('_')[0]} rows add up to "
                         f"{float(rows['joules'].sum()):.9g} J, the facts' {part} is "
                         f"{energy[part]:.9g} J")
    if not _close(energy["nodes_j"] + energy["links_j"], energy["total_j"]):
        found.append(f"nodes_j + links_j = {energy['nodes_j'] + energy['links_j']:.9g} J, "
                     f"total_j {energy['total_j']:.9g} J")
    per_node = nodes.groupby("node")["joules"].sum()
    wrong = [f"{name} {float(per_node.get(name, 0.0)):.6g} vs {joules:.6g}"
             for name, joules in energy.get("by_node", {}).items()
             if not _close(float(per_node.get(name, 0.0)), joules)]
    wrong += [f"{name} {float(joules):.6g} vs none" for name, joules in per_node.items()
              if name not in energy.get("by_node", {})]
    if wrong:
        found.append("nodes whose energy rows do not add up to the facts' by_node "
                     f"(table vs facts, J): {_few(wrong)}")
    per_kind = table.groupby("kind")["joules"].sum()
    wrong = [f"{kind} {float(per_kind.get(kind, 0.0)):.6g} vs {joules:.6g}"
             for kind, joules in energy.get("by_kind", {}).items()
             if not _close(float(per_kind.get(kind, 0.0)), joules)]
    if wrong:
        found.append("kinds whose energy rows do not add up to the facts' by_kind "
                     f"(table vs facts, J): {_few(wrong)}")
    return found


def check_energy_covers_run(run: Run) -> list[str]:
    """With scenario.energy: each node's and each link's rows cover the run, from 0 to its
    duration, once (every energy figure is over the run's duration)."""
    if not run.facts.get("energy"):
        return []
    table = _frame(run.tables["energy"], ["t_start", "t_end", "node", "link"])
    table["part"] = table["node"].where(table["node"].notna(), table["link"])
    table["span"] = table["t_end"] - table["t_start"]
    spans = table.groupby("part").agg(covered=("span", "sum"), since=("t_start", "min"),
                                      until=("t_end", "max"))
    duration = run.duration
    short = spans[(np.abs(spans["covered"] - duration) > TIME_TOLERANCE)
                  | (spans["since"] < -TIME_TOLERANCE)
                  | (spans["until"] > duration + TIME_TOLERANCE)]
    if not len(short):
        return []
    return [f"{len(short)} of {len(spans)} nodes and links have energy rows that do not cover "
            f"the {duration:g} s run once (covered, from, to): "
            + _few(f"{row.Index} {row.covered:g} s {row.since:g}-{row.until:g}"
                   for row in short.itertuples())]


# -- must not change -------------------------------------------------------------------------

def _same_column(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Row by row, whether two columns hold the same value (NaN the same as NaN)."""
    if x.dtype.kind == "f" and y.dtype.kind == "f":
        return (x == y) | (np.isnan(x) & np.isnan(y))
    return np.array([a == b or (a is None and b is None)
                     or (isinstance(a, float) and isinstance(b, float)
                         and math.isnan(a) and math.isnan(b))
                     for a, b in zip(x, y, strict=True)], dtype=bool) \
        if x.dtype == object or y.dtype == object else (x == y)


def _table_difference(name: str, a: pa.Table, b: pa.Table) -> str | None:
    if a.schema.names != b.schema.names:
        return f"{name}: columns {a.schema.names} vs {b.schema.names}"
    if a.num_rows != b.num_rows:
        return f"{name}: {a.num_rows:,} rows vs {b.num_rows:,}"
    differing = []
    for column in a.schema.names:
        rows = int((~_same_column(_column(a, column), _column(b, column))).sum())
        if rows:
            differing.append(f"{column} ({rows:,} rows)")
    if not differing:
        return None
    text = f"{name}: {a.num_rows:,} rows, differing in {', '.join(differing)}"
    if name == "messages" and _same_up_to_ids(a, b):
        text += "; the same rows up to the message ids and the rows' order"
    return text


def _same_up_to_ids(a: pa.Table, b: pa.Table) -> bool:
    """Whether two messages tables hold the same rows but for the ids and the order."""
    names = [n for n in a.schema.names if n != "id"]
    x, y = _frame(a, names), _frame(b, names)
    keys = ["t_sent", "source", "sink", "t_received", "state"]
    x = x.sort_values(keys, na_position="last").reset_index(drop=True)
    y = y.sort_values(keys, na_position="last").reset_index(drop=True)
    return bool(((x == y) | (x.isna() & y.isna())).all().all())


def check_same_tables(a: Run, b: Run, names: list[str] | None = None) -> list[str]:
    """The named tables (all of them by default) are the same in both runs, row by row and
    column by column."""
    found = []
    for name in names or list(a.tables):
        difference = _table_difference(name, a.tables[name], b.tables[name])
        if difference is not None:
            found.append(f"{a.label} / {b.label}: {difference}")
    return found


def _fact_differences(a, b, path: str = "facts") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        found = [f"{path}: keys {sorted(set(a) ^ set(b), key=str)} in one run only"] \
            if set(a) != set(b) else []
        for key in a:
            if key in b:
                found += _fact_differences(a[key], b[key], f"{path}.{key}")
        return found
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in _fact_differences(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def check_same_facts(a: Run, b: Run, ignore: tuple[str, ...] = ()) -> list[str]:
    """The facts are the same in both runs (but the keys in `ignore`)."""
    x = {k: v for k, v in a.facts.items() if k not in ignore}
    y = {k: v for k, v in b.facts.items() if k not in ignore}
    found = _fact_differences(x, y)
    return [f"{a.label} / {b.label}: {_few(found)}"] if found else []


def check_same_summary(a: Run, b: Run, ignore: tuple[str, ...] = ()) -> list[str]:
    """The summaries are the same in both runs (but the keys in `ignore`; a key
    `features.<feature>` leaves out one feature's figures)."""
    def kept(summary: dict) -> dict:
        summary = {k: v for k, v in summary.items() if k not in ignore}
        if "features" in summary:
            summary["features"] = {k: v for k, v in summary["features"].items()
                                   if f"features.{k}" not in ignore}
        return summary
    found = _fact_differences(kept(a.summary), kept(b.summary), "summary")
    return [f"{a.label} / {b.label}: {_few(found)}"] if found else []


def check_same_energy(a: Run, b: Run, rel: float = 1e-6) -> list[str]:
    """The energy facts' totals (total, nodes, links, by kind, by node) agree within `rel`."""
    x, y = a.facts.get("energy"), b.facts.get("energy")
    if not x or not y:
        return [f"{a.label} / {b.label}: energy facts in {'neither' if not x and not y else 'one'}"
                " run"]
    figures = [(k, x[k], y[k]) for k in ("total_j", "nodes_j", "links_j")]
    for group in ("by_kind", "by_node"):
        for key in sorted(set(x[group]) | set(y[group])):
            figures.append((f"{group}.{key}", x[group].get(key, 0.0), y[group].get(key, 0.0)))
    apart = [(name, p, q) for name, p, q in figures if not math.isclose(p, q, rel_tol=rel)]
    if not apart:
        return []
    apart.sort(key=lambda f: -abs(f[1] - f[2]) / max(abs(f[1]), abs(f[2]), 1e-300))
    return [f"{a.label} / {b.label}: {len(apart)} energy figures differ by more than "
            f"{rel:g} relative: " + _few(f"{name} {p:.6g} vs {q:.6g} J "
                                          f"({(q - p) / p if p else math.inf:+.2%})"
                                          for name, p, q in apart)]


# -- must move, and which way -----------------------------------------------------------------

Figure = Callable[[Run], "float | dict[str, float]"]


def check_grows(smaller: Run, larger: Run, figure: Figure, what: str) -> list[str]:
    """`figure` (a number, or numbers by name) is strictly larger in `larger` than in
    `smaller`: the run with more of the cause has more of the effect."""
    x, y = figure(smaller), figure(larger)
    if not isinstance(x, dict):
        x, y = {what: x}, {what: y}
    return [f"{what}: {name} is {y.get(name)!r} in {larger.label}, not more than its "
            f"{x.get(name)!r} in {smaller.label}"
            for name in x if not (y.get(name) is not None and y[name] > x[name])]


def node_cpu(node: str) -> Figure:
    """A node's mean CPU share over the run's samples."""
    def figure(run: Run) -> float:
        nodes = _frame(run.tables["nodes"], ["node", "cpu"])
        return float(nodes.loc[nodes["node"] == node, "cpu"].mean())
    figure.__name__ = f"cpu of {node}"
    return figure


def emitted(run: Run) -> float:
    return run.facts["emitted"]


def energy(run: Run) -> dict[str, float]:
    """The run's total energy and each node's that has a CPU (its rows, per sample)."""
    facts = run.facts["energy"]
    table = _frame(run.tables["energy"], ["node", "kind"])
    hosts = set(table.loc[table["node"].notna() & (table["kind"] != "device"), "node"])
    return {"total": facts["total_j"], **{n: j for n, j in facts["by_node"].items()
                                          if n in hosts}}


# -- bounded ----------------------------------------------------------------------------------

def _share_outside(table: pa.Table, column: str) -> int:
    values = _column(table, column).astype(float)
    values = values[~np.isnan(values)]
    return int(((values < -SHARE_TOLERANCE) | (values > 1 + SHARE_TOLERANCE)).sum())


def check_bounds(run: Run) -> list[str]:
    """A part is never above its whole, and a share is in [0, 1]:
    - delivered, filtered, lost, in flight each <= emitted; deliveries (copies) >= delivered;
      the loss rate in [0, 1];
    - the faults' `lost while in force` <= lost;
    - per stream: its readings delivered <= what its sources emitted (facts, per device);
    - per device: emitted <= the run's emitted; per node: energy <= the run's total;
    - a node's CPU share, a link's utilisation, an energy row's utilisation in [0, 1], and
      the summary's cpu_mean <= cpu_max per node;
    - per migration: downtime <= its execution (end - start); per recovery: detect <=
      recover."""
    found = []
    summary, facts = run.summary, run.facts
    whole = summary["emitted"]
    for part in _STATES:
        if not 0 <= summary[part] <= whole:
            found.append(f"the summary's {part} {summary[part]} is not within 0 and its "
                         f"emitted {whole}")
    if summary["deliveries"] < summary["delivered"]:
        found.append(f"the summary's deliveries {summary['deliveries']} (copies) are fewer "
                     f"than its delivered readings {summary['delivered']}")
    if not 0 <= summary["loss_rate"] <= 1:
        found.append(f"the summary's loss rate {summary['loss_rate']} is not in [0, 1]")
    in_force = (summary.get("features", {}).get("faults") or {}).get("lost while in force")
    if in_force is not None and in_force > summary["lost"]:
        found.append(f"the faults' lost while in force {in_force:,} is above the run's lost "
                     f"{summary['lost']:,}")
    found += _stream_bounds(run)
    by_device = facts.get("emitted_by_device") or {}
    over = [f"{d} {n}" for d, n in by_device.items() if not 0 <= n <= facts["emitted"]]
    if over:
        found.append(f"devices whose emitted is not within 0 and the run's "
                     f"{facts['emitted']}: {_few(over)}")
    energy_facts = facts.get("energy")
    if energy_facts:
        total = energy_facts["total_j"]
        over = [f"{n} {j:.6g} J" for n, j in energy_facts["by_node"].items()
                if not -ABS <= j <= total * (1 + REL) + ABS]
        over += [f"{k} {energy_facts[k]:.6g} J" for k in ("nodes_j", "links_j")
                 if not -ABS <= energy_facts[k] <= total * (1 + REL) + ABS]
        if over:
            found.append(f"energy parts not within 0 and the run's total {total:.6g} J: "
                         f"{_few(over)}")
    for table, column in (("nodes", "cpu"), ("links", "utilisation"), ("energy", "utilisation")):
        outside = _share_outside(run.tables[table], column)
        if outside:
            found.append(f"{outside} rows of the {table} table have a {column} outside [0, 1]")
    nodes = summary.get("nodes") or {}
    over = [f"{n} {f['cpu_mean']:.6g} > {f['cpu_max']:.6g}" for n, f in nodes.items()
            if f["cpu_mean"] > f["cpu_max"] + SHARE_TOLERANCE]
    if over:
        found.append(f"nodes whose cpu_mean is above their cpu_max: {_few(over)}")
    migrations = _frame(run.tables["migrations"], ["operator", "start", "end", "downtime"])
    over = migrations[migrations["downtime"] > migrations["end"] - migrations["start"]
                      + TIME_TOLERANCE]
    if len(over):
        found.append("migrations whose downtime is longer than the migration: " + _few(
            f"{r.operator} {r.downtime:.6g} s of {r.end - r.start:.6g} s"
            for r in over.itertuples()))
    recoveries = _frame(run.tables["recoveries"], ["node", "operator", "detect", "recover"])
    over = recoveries[recoveries["detect"] > recoveries["recover"] + TIME_TOLERANCE]
    if len(over):
        found.append("recoveries noticed after they recovered: " + _few(
            f"{r.operator} on {r.node}: detect {r.detect:.6g} s, recover {r.recover:.6g} s"
            for r in over.itertuples()))
    return found


def _stream_bounds(run: Run) -> list[str]:
    """Per stream: readings delivered <= emitted by the devices that source it."""
    if run.spec is None or not run.whole_messages:
        return []
    by_device = run.facts.get("emitted_by_device") or {}
    readings = reading_states(run)
    delivered = readings[readings["best"] == "delivered"].groupby("stream").size()
    found = []
    for stream in run.spec.workload.streams:
        devices = run.topology.select(stream.sources)
        whole = sum(by_device.get(device, 0) for device in devices)
        part = int(delivered.get(stream.name, 0))
        if part > whole:
            found.append(f"stream {stream.name}: {part:,} readings delivered, its "
                         f"{len(devices)} sources emitted {whole:,}")
    return found


# -- must be said ------------------------------------------------------------------------------

# How a summary may say that some migrations had not ended.
UNFINISHED = re.compile(r"unfinished|under way|incomplete|not finished|did not finish|"
                        r"not ended", re.I)


def check_unfinished_said(run: Run) -> list[str]:
    """A migration still under way when the run ended (a row with no end) is said so in the
    summary: counted by a figure of the summary's migration figures (named unfinished, under
    way, incomplete...), or in the summary's warnings, with each such row of its
    `migrations` marked unfinished."""
    migrations = _frame(run.tables["migrations"], ["operator", "start", "end"])
    open_ = migrations[migrations["end"].isna()]
    if not len(open_):
        return []
    summary = run.summary
    figures = (summary.get("features") or {}).get("migrations") or {}
    counted = len(open_) in {v for k, v in figures.items() if UNFINISHED.search(str(k))}
    warned = [w for w in summary.get("warnings") or []
              if "migration" in str(w) and UNFINISHED.search(str(w))]
    marked = [row for row in summary.get("migrations") or []
              if row.get("end") is None and row.get("status") == "unfinished"]
    if counted or (warned and len(marked) == len(open_)):
        return []
    return [f"{len(open_)} of {len(migrations)} migrations had no end when the run ended ("
            + _few(f"{r.operator} from {r.start:.6g} s" for r in open_.itertuples())
            + f"), and the summary does not say so: its migration figures {figures}, its "
            f"warnings {summary.get('warnings')}, {len(marked)} of its rows marked unfinished"]


# A node is overloaded when, over the second half of the run, its CPU was busy all along and
# its queue ended long (sim.saturation's own floor) and longer than it was halfway.
BUSY = 0.98
LONG_QUEUE = 50


def overloaded(run: Run) -> list[str]:
    """The nodes the nodes table shows overloaded (BUSY, LONG_QUEUE), by this module's rule,
    not sim.saturation's."""
    nodes = _frame(run.tables["nodes"], ["t", "node", "cpu", "queue"])
    nodes = nodes[nodes["t"] <= run.duration + TIME_TOLERANCE]
    found = []
    for name, rows in nodes.groupby("node", sort=True):
        rows = rows.sort_values("t")
        late = rows[rows["t"] > run.duration / 2]
        if len(late) < 2:
            continue
        middle, end = float(late["queue"].iloc[0]), float(late["queue"].iloc[-1])
        if late["cpu"].mean() >= BUSY and end >= LONG_QUEUE and end > middle:
            found.append(str(name))
    return found


def check_saturation_said(run: Run) -> list[str]:
    """Every node the nodes table shows overloaded is named in facts["saturated"], and each
    node named there is one of the run's with the queue the table ends with."""
    named = run.facts.get("saturated") or {}
    found = []
    missing = [n for n in overloaded(run) if n not in named]
    if missing:
        found.append(f"nodes overloaded (CPU >= {BUSY:.0%} over the run's second half, the "
                     f"queue ending at {LONG_QUEUE} or more and growing) that facts['saturated']"
                     f" does not name: {_few(missing)}")
    nodes = _frame(run.tables["nodes"], ["t", "node", "queue"])
    last = nodes.sort_values("t").groupby("node")["queue"].last()
    wrong = [f"{n} queue_end {row.get('queue_end')} vs {last.get(n)}"
             for n, row in named.items() if n not in last or row.get("queue_end") != last[n]]
    if wrong:
        found.append(f"facts['saturated'] names nodes the nodes table does not end so: "
                     f"{_few(wrong)}")
    return found


# -- nothing after the end ---------------------------------------------------------------------

# The tables whose rows each begin something, and the column that says when.
STARTS = {"migrations": ("start", "operator"), "faults": ("t_start", "kind"),
          "recoveries": ("t_crash", "operator"), "replicas": ("t", "action")}


def check_nothing_after_end(run: Run) -> list[str]:
    """No migration, fault, recovery or replica action begins at or after the run's end
    (its duration; the drain after it only lets what is under way finish)."""
    found = []
    for name, (column, what) in STARTS.items():
        rows = _frame(run.tables[name], [column, what])
        late = rows[rows[column] >= run.duration - TIME_TOLERANCE]
        if len(late):
            found.append(f"{len(late)} of {len(rows)} {name} rows begin at or after the run's "
                         f"end ({run.duration:g} s): " + _few(
                             f"{getattr(r, what)} at {getattr(r, column):.6g} s"
                             for r in late.itertuples()))
    return found


# Every relation one run must satisfy on its own, by name: what the catalog-wide tests apply.
ONE_RUN: dict[str, Callable[[Run], list[str]]] = {
    "readings conserved": check_readings_conserved,
    "energy conserved": check_energy_conserved,
    "energy covers the run": check_energy_covers_run,
    "bounds": check_bounds,
    "saturation said": check_saturation_said,
    "nothing after the end": check_nothing_after_end,
}
