"""Pictures of a run's results: the latency distribution and its course over time."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from experiments.results import load_run  # noqa: E402


def latency_plot(folder: Path | str, out: Path | str | None = None) -> Path:
    """Two panels: the latency ECDF per stream, and the per-second median and p95 over time."""
    run = load_run(folder)
    messages = run.messages
    delivered = messages[~messages["lost"]].copy()
    delivered["latency_ms"] = delivered["latency"] * 1000
    sns.set_theme(style="whitegrid")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    if len(delivered):
        sns.ecdfplot(data=delivered, x="latency_ms", hue="stream", ax=left)
        delivered["second"] = delivered["t_received"].astype(int)
        per_second = delivered.groupby("second")["latency_ms"].quantile([0.5, 0.95]).unstack()
        right.plot(per_second.index, per_second[0.5], label="median")
        right.plot(per_second.index, per_second[0.95], label="p95", alpha=0.7)
        right.legend()
    left.set(xlabel="end-to-end latency (ms)", ylabel="fraction of messages",
             title=f"{run.manifest['experiment']}: latency")
    right.set(xlabel="time (s)", ylabel="latency (ms)", title="latency over time")
    fig.tight_layout()
    path = Path(out) if out else Path(folder) / "latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
