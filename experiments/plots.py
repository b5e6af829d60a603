"""Pictures of results: a run's latency distribution and its course over time (faults and
migrations marked), and a sweep's measures across its swept values."""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from experiments.results import load_run, sample_note


class LatencyPlot(NamedTuple):
    """The written figure; `note` says why it has no curves (None when it has them)."""

    path: Path
    delivered: int
    note: str | None


def empty_reason(total: int, lost: int) -> str | None:
    """Why a run has no latency to plot, as the figure says it; None when some were delivered."""
    if total == 0:
        return "no delivered messages: none was sent, or none reached a sink before the end"
    if lost == total:
        return f"no delivered messages: all {total:,} sent were lost"
    return None


def latency_plot(folder: Path | str, out: Path | str | None = None) -> LatencyPlot:
    """Write the run's latency figure (latency.png in its folder unless `out` says where)."""
    run = load_run(folder)
    messages = run.messages  # results.NotRecorded (one line) for a run that wrote none
    sample = sample_note(run.manifest)
    fig, note = latency_figure(messages, f"{run.manifest['experiment']}: latency"
                               + (f"\n{sample}" if sample else ""),
                               events(run.table("faults"), run.table("migrations")))
    path = Path(out) if out else Path(folder) / "latency.png"
    fig.savefig(path, dpi=110)
    return LatencyPlot(path, int(messages["latency"].notna().sum()), note)


class Event(NamedTuple):
    """A moment to mark on a plot over time: a fault's start or a migration's."""

    t: float
    kind: str  # "fault" or "migration"
    label: str


def events(faults: pd.DataFrame, migrations: pd.DataFrame) -> list[Event]:
    """The faults' and migrations' start times of a run, from its tables."""
    marks = [Event(float(row.t_start), "fault", f"{row.kind} {row.target}")
             for row in faults.itertuples() if row.t_start is not None
             and not math.isnan(row.t_start)]
    marks += [Event(float(row.start), "migration", f"{row.operator} {row.source}>{row.target}")
              for row in migrations.itertuples() if row.start is not None
              and not math.isnan(row.start)]
    return sorted(marks)


MARK_STYLE = {"fault": {"color": "firebrick", "linestyle": "--"},
              "migration": {"color": "darkorange", "linestyle": ":"}}


def latency_figure(messages: pd.DataFrame, title: str,
                   marks: list[Event] = ()) -> tuple[Figure, str | None]:
    """Two panels: the latency ECDF per stream, and the per-second median and p95 over time
    with the faults and migrations marked as vertical lines; without delivered messages, the
    reason written across the figure (and returned)."""
    # Delivered: with a latency (a filtered, lost or in-flight message has none).
    delivered = messages[messages["latency"].notna()].copy()
    delivered["latency_ms"] = delivered["latency"] * 1000
    note = empty_reason(len(messages), int(messages["lost"].sum()))
    if note is None and delivered.empty:
        note = (f"no delivered messages: none of {len(messages):,} reached a sink before "
                "the end (filtered, or still in flight)")
    # A Figure of its own, not pyplot's: choosing a backend here (Agg) would turn off the
    # inline figures of a notebook that runs experiments; the style is only this figure's.
    with matplotlib.rc_context(sns.axes_style("whitegrid")):
        fig = Figure(figsize=(11, 4))
        left, right = fig.subplots(1, 2)
        if note is None:
            sns.ecdfplot(data=delivered, x="latency_ms", hue="stream", ax=left)
            delivered["second"] = delivered["t_received"].astype(int)
            per_second = delivered.groupby("second")["latency_ms"].quantile([0.5, 0.95]).unstack()
            right.plot(per_second.index, per_second[0.5], label="median")
            right.plot(per_second.index, per_second[0.95], label="p95", alpha=0.7)
            labelled = set()
            for mark in marks:  # one legend entry per kind: a sweep of faults stays legible
                right.axvline(mark.t, linewidth=1, alpha=0.8, **MARK_STYLE[mark.kind],
                              label=None if mark.kind in labelled else mark.kind)
                labelled.add(mark.kind)
                if len(marks) <= 8:  # more would overlap: the legend says which kind
                    right.annotate(mark.label[:24], (mark.t, 1), xycoords=("data", "axes fraction"),
                                   xytext=(2, -4), textcoords="offset points", rotation=90,
                                   va="top", fontsize=7, color=MARK_STYLE[mark.kind]["color"])
            right.legend()
        else:
            fig.text(0.5, 0.5, note, ha="center", va="center", fontsize=12, color="firebrick",
                     bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "firebrick"})
        left.set(xlabel="end-to-end latency (ms)", ylabel="fraction of messages", title=title)
        right.set(xlabel="time (s)", ylabel="latency (ms)", title="latency over time")
        fig.tight_layout()
    return fig, note


def sweep_plots(points_path: Path | str, folder: Path | str) -> list[Path]:
    """One figure per swept key and measure of a points table (experiments.points): the
    measure's mean at each value with its 95 % interval as error bars, other swept keys as
    separate lines; written as `<key>-<measure>.png` into `folder`, made if missing. A key
    whose values are not numbers is shown as categories in the sweep's order. A key the points
    hold one value of gets no figure of its own (one point says nothing across it); with
    several values it stays a line of the others' figures."""
    from experiments.points import MEASURES, UNITS, swept_keys

    table = pd.read_parquet(points_path)
    keys = swept_keys(table.columns)
    Path(folder).mkdir(parents=True, exist_ok=True)
    written = []
    for key in keys:
        if table[key].nunique(dropna=False) < 2:
            continue
        others = [k for k in keys if k != key and table[k].nunique(dropna=False) > 1]
        for measure in (m for m in MEASURES if m in table.columns):
            fig = sweep_figure(table, key, measure, others, UNITS[measure])
            path = Path(folder) / f"{_safe(key)}-{measure}.png"
            fig.savefig(path, dpi=110)
            written.append(path)
    return written


def sweep_figure(table: pd.DataFrame, key: str, measure: str, others: list[str],
                 unit: str) -> Figure:
    """A measure against one swept key, with error bars from its interval (none where a point
    had one repetition, as said in the title)."""
    scale, unit = (1000.0, "ms") if unit == "s" else (1.0, unit)
    numeric = pd.api.types.is_numeric_dtype(table[key])
    with matplotlib.rc_context(sns.axes_style("whitegrid")):
        fig = Figure(figsize=(7, 4.2))
        ax = fig.subplots()
        groups = table.groupby(others, sort=False) if others else [((), table)]
        for name, group in groups:
            x = group[key].to_numpy() if numeric else np.arange(len(group))
            mean = group[measure].to_numpy(float) * scale
            low = (mean - group[f"{measure}_low"].to_numpy(float) * scale)
            high = (group[f"{measure}_high"].to_numpy(float) * scale - mean)
            label = ", ".join(f"{k}={v}" for k, v in zip(others, np.atleast_1d(name),
                                                       strict=True)) or None
            ax.errorbar(x, mean, yerr=np.nan_to_num(np.vstack([low, high])), marker="o",
                        capsize=4, label=label)
            if not numeric:
                ax.set_xticks(x, [str(v) for v in group[key]], rotation=20, ha="right")
        single = bool((table["runs"] <= 1).any())
        ax.set(xlabel=key, ylabel=f"{measure.replace('_', ' ')} ({unit})",
               title=f"{measure.replace('_', ' ')} across {key}"
               + (" (no interval: one repetition)" if single else " (95 % interval)"))
        if others:
            ax.legend(fontsize="small")
        fig.tight_layout()
    return fig


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "._=+-" else "_" for c in key)
