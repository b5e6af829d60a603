"""What a person reads of runs: the run summary `foglab run` prints and `foglab results show`."""

from __future__ import annotations

import json
from pathlib import Path

from rich import box
from rich.table import Table

from topologies.terminal import console, escape, say


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def count(value) -> str:
    """A count, or '-' for a summary written before it was counted."""
    return "-" if value is None else f"{value:,}"


def manifest_of(folder: Path) -> dict:
    path = folder / "manifest.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def fidelity_lines(manifest: dict) -> list[str]:
    """An emulated run's fidelity (emu.host.fidelity), as lines to print: why its figures are
    doubtful; nothing for a run that kept up, or a model's."""
    fidelity = (manifest.get("facts") or {}).get("fidelity") or {}
    return list(fidelity.get("reasons") or []) if fidelity.get("marked") else []


def saturation_lines(manifest: dict) -> list[str]:
    """A model's nodes whose queue only grew (sim's fact `saturated`), in one line: what it
    delivered is what they had the time for, the rest was still queued."""
    saturated = (manifest.get("facts") or {}).get("saturated") or {}
    if not saturated:
        return []
    nodes = ", ".join(f"{node} ({row['queue_end']:,} jobs, median {row['queue_median']:,})"
                      for node, row in saturated.items())
    return [f"{len(saturated)} node{'s' if len(saturated) != 1 else ''} could not keep up, "
            f"the queue growing to the end: {nodes}"]


def handover_lines(manifest: dict) -> list[str]:
    """A run with people moving (scenario.mobility): how many times a device changed gateway
    (the run's fact `handovers`, on sim and hybrid alike); nothing for a run without."""
    scenario = (manifest.get("config") or {}).get("scenario") or {}
    handovers = (manifest.get("facts") or {}).get("handovers")
    if not scenario.get("mobility") or handovers is None:
        return []
    return [f"handovers: {handovers:,} (devices that changed gateway; the positions table "
            "says who and when)"]


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def copies_counted(summaries: list[dict]) -> bool:
    """Whether a sink's copies outnumber the readings delivered in any of `summaries`: then
    the tables show deliveries/s beside readings/s."""
    return any(s.get("deliveries") is not None and s["deliveries"] != s.get("delivered")
               for s in summaries if s)


# Said under a table that shows deliveries/s (docs/results.md: throughput).
COPIES_NOTE = ("readings/s: readings delivered a second (the throughput), each once; "
               "deliveries/s: every copy a sink took (a reading N sinks read counts N times)")


def run_summary(name: str, backend: str, outcomes: list) -> None:
    """The table of a run's repetitions and sweep points, then each run's folder, warnings
    and its features' own figures."""
    from experiments.summary import throughputs

    keys = list(outcomes[0].point) if outcomes else []
    copies = copies_counted([o.summary for o in outcomes if o.summary])
    table = Table(title=f"{escape(name)} ({backend})")
    columns = ["emitted", "delivered", "filtered", "lost", "in flight", "readings/s",
               *(["deliveries/s"] if copies else []), "p50 ms", "p95 ms", "p99 ms", "jitter"]
    for column in ["rep", *keys, *columns]:
        table.add_column(escape(column.rsplit(".", 1)[-1]), justify="right")
    for outcome in outcomes:
        cells = [str(outcome.repetition), *(escape(str(outcome.point[k])) for k in keys)]
        s = outcome.summary
        if s is None:
            table.add_row(*cells, "[red]failed[/red]", *[""] * (len(columns) - 1))
            continue
        lat = s["latency_s"]
        jitter = s["jitter"]["mean_abs"]
        readings, deliveries = throughputs(s)
        # An emulated run's figures taken on an overloaded host are marked (emu.host.fidelity).
        mark = "*" if fidelity_lines(manifest_of(outcome.folder)) else ""
        table.add_row(*cells, count(s.get("emitted")), count(s["delivered"]),
                      count(s.get("filtered")), count(s["lost"]), count(s.get("in_flight")),
                      rate(readings), *([rate(deliveries)] if copies else []),
                      *(ms(lat[q]) + mark for q in ("p50", "p95", "p99")),
                      f"{jitter:.3f}" if jitter is not None else "-")
    console.print(table)
    if copies:
        say(COPIES_NOTE)
    for outcome in outcomes:
        say(f"results: {outcome.folder}")
        manifest = manifest_of(outcome.folder)
        if outcome.status == "degraded":
            say(f"  degraded: {outcome.failed_summary()}", style="yellow")
        for reason in fidelity_lines(manifest):
            say(f"  * figures taken while the testbed was overloaded: {reason}",
                style="yellow")
        for line in saturation_lines(manifest):
            say(f"  saturated: {line}", style="yellow")
        for line in handover_lines(manifest):
            say(f"  {line}")
        for line in (outcome.summary or {}).get("warnings") or []:
            say(f"  warning: {escape(line)}", style="yellow")
        if outcome.summary and outcome.summary.get("in_flight"):
            s = outcome.summary
            say(f"  {s['in_flight']:,} of {count(s.get('emitted'))} readings were still "
                "queued or on a link when the run ended (in flight, not lost)", style="yellow")
        if outcome.error:
            say(f"  failed: {outcome.error}", style="red")
        plot = outcome.folder / "latency.png"
        if plot.exists():
            say(f"plot:    {plot}")
    if len(outcomes) == 1 and outcomes[0].summary:
        feature_tables(outcomes[0].summary)
    elif len(outcomes) > 1:
        shown = [o for o in outcomes if o.summary]
        points_table([o.folder for o in shown], [o.index for o in shown],
                     [o.point for o in shown])
        sweep_feature_tables(outcomes, keys)


def points_table(folders: list[Path], indices: list[int] | None = None,
                 values: list[dict] | None = None) -> None:
    """Per sweep point, each measure's mean and 95 % interval over its repetitions
    (experiments.points, as the sweep's points.parquet holds them); `indices` and `values`:
    each run's point and swept values as written (else its manifest's)."""
    from experiments import points

    rows = points.rows(folders, indices, values) if folders else []
    if not rows:
        return
    measures = [m for m in points.MEASURES if m in rows[0]]
    shown = Table(title="points (mean ± 95 % interval over repetitions; latency in ms)",
                  title_justify="left", box=box.SIMPLE_HEAD)
    for column in [*points.swept_keys(rows[0]), "runs", *measures]:
        shown.add_column(escape(column.rsplit(".", 1)[-1]), justify="right")
    # The swept values as the command line or the file wrote them (`1m`, `gateways`), not as
    # the points table types them (60.0, ["gateways"]).
    written: dict[int, dict] = {}
    for index, point in points.memberships([manifest_of(f) for f in folders], indices, values):
        written.setdefault(index, point)
    for row in rows:
        values = written.get(int(row["point"]), {})
        shown.add_row(*(escape(str(values.get(k, row[k]))) for k in points.swept_keys(rows[0])),
                      str(row["runs"]), *(points.shown(row, m) for m in measures))
    console.print(shown)


def sweep_feature_tables(outcomes: list, keys: list[str]) -> None:
    """Each feature's figures across a sweep: a table per feature, a row per run."""
    features = dict.fromkeys(key for o in outcomes if o.summary
                             for key in (o.summary.get("features") or {}))
    for feature in features:
        labels = list(dict.fromkeys(label for o in outcomes if o.summary
                                    for label in (o.summary["features"].get(feature) or {})))
        shown = Table(title=feature.replace("_", " "), title_justify="left",
                      box=box.SIMPLE_HEAD)
        for column in ["rep", *keys, *labels]:
            shown.add_column(escape(column.rsplit(".", 1)[-1]), justify="right")
        for o in outcomes:
            figures = ((o.summary or {}).get("features") or {}).get(feature) or {}
            shown.add_row(str(o.repetition), *(escape(str(o.point[k])) for k in keys),
                          *(_value(figures.get(label)) for label in labels))
        console.print(shown)


def feature_tables(summary: dict) -> None:
    """One short table per feature that ran, with the figures it declared
    (workloads.features: each feature's `summary`)."""
    if summary.get("migrations"):
        migration_table(summary["migrations"])
    for key, figures in (summary.get("features") or {}).items():
        if key == "migrations" or not figures:
            continue
        shown = Table(title=key.replace("_", " "), title_justify="left", box=box.SIMPLE_HEAD)
        for label in figures:
            shown.add_column(escape(label), justify="right")
        shown.add_row(*(_value(value) for value in figures.values()))
        console.print(shown)


def _value(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return escape(str(value))


def migration_table(rows: list[dict]) -> None:
    moved = Table(title="migrations", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("operator", "strategy", "source", "target", "status", "start s",
                   "downtime ms", "execution ms", "state bytes", "lost", "duplicates"):
        moved.add_column(column, justify="left" if column in (
            "operator", "strategy", "source", "target", "status") else "right")
    for row in rows:
        moved.add_row(*(escape(str(row[k])) for k in (
            "operator", "strategy", "source", "target")), escape(str(row.get("status", "-"))),
            f"{row['start']:.2f}", ms(row["downtime"]), ms(row["execution"]),
            f"{row['state_bytes']:,}", str(row["lost"]), str(row["duplicates"]))
    console.print(moved)


def show_run(manifest: dict, summary: dict, folder: Path) -> None:
    """`foglab results show`: the manifest's facts, the headline figures, the nodes, and each
    feature's own figures."""
    facts = Table(title=f"run {escape(str(manifest.get('run', folder)))}",
                  title_justify="left", box=box.SIMPLE_HEAD, show_header=False)
    facts.add_column("field", style="bold")
    facts.add_column("value")
    for key in ("experiment", "backend", "seed", "status", "error", "failed_nodes", "start",
                "end", "config_hash", "revision", "point"):
        value = manifest.get(key)
        if value not in (None, {}, []) or key in ("status",):
            facts.add_row(key, escape(str(value)))
    console.print(facts)
    fidelity = (manifest.get("facts") or {}).get("fidelity")
    if fidelity and fidelity.get("samples"):
        pressure, lag = fidelity.get("host_pressure"), fidelity.get("relay_lag_s")
        say("fidelity: host CPU pressure "
            + (f"mean {pressure['mean']:.0%}, max {pressure['max']:.0%}" if pressure else "-")
            + f" ({fidelity.get('pressure_source', '?')}); relay timers late by "
            + (f"up to {lag['max'] * 1000:.1f} ms" if lag else "- (no relay)")
            + f"; saturated for {fidelity['saturated_share']:.0%} of the run")
    for reason in fidelity_lines(manifest):
        say(f"figures taken while the testbed was overloaded: {reason}", style="yellow")
    for line in saturation_lines(manifest):
        say(f"saturated: {line}", style="yellow")
    for line in manifest.get("warnings") or (summary or {}).get("warnings") or []:
        say(f"warning: {escape(line)}", style="yellow")
    if not summary:
        say("no summary: the run wrote no tables", style="yellow")
        return
    from experiments.summary import throughputs

    copies = copies_counted([summary])
    figures = Table(title="figures", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("emitted", "delivered", "filtered", "lost", "in flight", "loss",
                   "readings/s", *(["deliveries/s"] if copies else []),
                   "mean ms", "p50 ms", "p95 ms", "p99 ms", "max ms", "jitter"):
        figures.add_column(column, justify="right")
    latency, jitter = summary["latency_s"], summary["jitter"]["mean_abs"]
    readings, deliveries = throughputs(summary)
    figures.add_row(count(summary.get("emitted")), count(summary["delivered"]),
                    count(summary.get("filtered")), count(summary["lost"]),
                    count(summary.get("in_flight")),
                    f"{summary['loss_rate']:.2%}", rate(readings),
                    *([rate(deliveries)] if copies else []),
                    *(ms(latency[k]) for k in ("mean", "p50", "p95", "p99", "max")),
                    f"{jitter:.3f}" if jitter is not None else "-")
    console.print(figures)
    if copies:
        say(COPIES_NOTE)
    if summary.get("nodes"):
        nodes = Table(title="nodes", title_justify="left", box=box.SIMPLE_HEAD)
        for column in ("node", "cpu mean", "cpu max", "memory MB", "queue max"):
            nodes.add_column(column, justify="left" if column == "node" else "right")
        for node, row in summary["nodes"].items():
            nodes.add_row(escape(node), f"{row['cpu_mean']:.1%}", f"{row['cpu_max']:.1%}",
                          f"{row['memory_mean'] / 1e6:.1f}", str(row["queue_max"]))
        console.print(nodes)
    feature_tables(summary)
