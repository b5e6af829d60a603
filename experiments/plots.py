"""Pictures of a run's results: the latency distribution and its course over time."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import matplotlib
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from experiments.results import load_run


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
    fig, note = latency_figure(run.messages, f"{run.manifest['experiment']}: latency")
    path = Path(out) if out else Path(folder) / "latency.png"
    fig.savefig(path, dpi=110)
    return LatencyPlot(path, int((~run.messages["lost"]).sum()), note)


def latency_figure(messages: pd.DataFrame, title: str) -> tuple[Figure, str | None]:
    """Two panels: the latency ECDF per stream, and the per-second median and p95 over time;
    without delivered messages, the reason written across the figure (and returned)."""
    delivered = messages[~messages["lost"]].copy()
    delivered["latency_ms"] = delivered["latency"] * 1000
    note = empty_reason(len(messages), int(messages["lost"].sum()))
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
            right.legend()
        else:
            fig.text(0.5, 0.5, note, ha="center", va="center", fontsize=12, color="firebrick",
                     bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "firebrick"})
        left.set(xlabel="end-to-end latency (ms)", ylabel="fraction of messages", title=title)
        right.set(xlabel="time (s)", ylabel="latency (ms)", title="latency over time")
        fig.tight_layout()
    return fig, note
