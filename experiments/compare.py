"""Does the model predict the emulation? One configuration's runs on several backends, compared
figure by figure against the emulation (`foglab compare`); and any two runs or configurations
(two run folders, two seeds, calibrated against not), the second against the first.

`compare` is pure: from each backend's run (`RunData`: its summary and tables, as
`experiments.summary` computed them) to a `Comparison`: delivered, lost, throughput, latency
percentiles end to end and per path length (messages grouped by the links they crossed: no
backend times each link of a message), each node's mean CPU and each migration's downtime,
with the relative error of every other backend against the reference (the emulation), the
targets of issue 17 (p50 within 10 %, p95 within 20 %, throughput within 5 %, lost equal)
and, on the reference's figures, the reasons to doubt them: the emulation's own fidelity
(emu.host.fidelity: a saturated host, late link relays, throttled nodes). Around it: reading runs
from their folders, the emulation's availability, and the outputs (a rich table,
`comparison.json`, the latency CDFs on one axis and the nodes' CPU side by side).
"""

from __future__ import annotations

import json
import math
import os
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.results import typed_value
from experiments.spec import ExperimentFile
from experiments.summary import _percentiles as percentiles
from experiments.summary import throughputs
from topologies import units
from topologies.fields import unit_of
from topologies.units import written_like
from workloads.features import FEATURES
from workloads.reports import Figure, RunFacts

REFERENCE = "emu"
DEFAULT_BACKENDS = "sim,emu"
# Issue 17's agreement targets: the largest |relative error| against the emulation.
TARGETS = {"latency_p50": 0.10, "latency_p95": 0.20, "throughput": 0.05, "lost": 0.0}
# Fewer messages than this outside the saturated spans give no percentiles worth printing.
MIN_UNSATURATED = 20
DOCTOR_FIX = ("`foglab emu doctor --fix` (as root) installs what is missing (docker.io, "
              "qemu-user-static, binfmt-support, debootstrap, busybox-static), starts the "
              "Docker Engine (dockerd) and enables arm64 emulation through binfmt")


def known_backends() -> tuple[str, ...]:
    """The backends an experiment file may name (experiments.spec.RunSpec.backend)."""
    from experiments.spec import RunSpec

    return typing.get_args(RunSpec.model_fields["backend"].annotation)


def parse_backends(text: str) -> list[str]:
    """`--backends sim,emu` as a list: two or more known backends, each once; else a
    ValueError that says what is wrong."""
    names = [part.strip() for part in text.split(",")]
    known = known_backends()
    for name in names:
        if name not in known:
            raise ValueError(f"--backends: unknown backend {name!r} in {text!r}; backends are "
                             f"{', '.join(known)}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"--backends: {repeated[0]!r} is named twice in {text!r}")
    if len(names) < 2:
        raise ValueError(f"--backends: a comparison needs two or more backends, got {text!r} "
                         f"(for example {DEFAULT_BACKENDS})")
    return names


def emu_unavailable() -> str | None:
    """Why the emulation cannot run on this host (None if it can), with what the doctor's
    fix does; asked before anything runs."""
    from emu.host.doctor import Apt, check_docker, check_docker_sdk

    if os.geteuid() != 0:
        return (f"emu needs root (it makes containers, networks and link relays): run as root. "
                f"Then {DOCTOR_FIX}")
    for found in (check_docker_sdk(), check_docker(False, Apt(print), print)):
        if not found.passed:
            return f"emu needs Docker: {found.name}: {found.detail}. {DOCTOR_FIX}"
    return None


# ---------------------------------------------------------------------------- the comparison


@dataclass
class RunData:
    """What a comparison reads of one run: its folder, its summary (summary.json), its
    delivered and lost messages, and the emulation's fidelity (None for a model)."""

    backend: str
    folder: Path
    summary: dict
    messages: pd.DataFrame
    fidelity: dict | None = None
    sample: str | None = None  # what part of the readings its messages are (record.messages)
    facts: dict = field(default_factory=dict)  # the manifest's facts (features' rows read them)


@dataclass
class Comparison:
    experiment: str
    reference: str
    backends: list[str]
    runs: dict[str, str]
    figures: list[Figure]
    fidelity: dict | None
    # The reference's latency outside the spans its host was saturated, and the share of its
    # delivered messages sent within them (None when nothing was saturated).
    unsaturated: dict | None = None
    notes: list[str] = field(default_factory=list)

    def figure(self, key: str) -> Figure:
        for found in self.figures:
            if found.key == key:
                return found
        raise KeyError(f"no figure {key!r}; figures are {', '.join(f.key for f in self.figures)}")

    def to_json(self) -> dict:
        return asdict(self)


def relative_error(value: float | None, reference: float | None) -> float | None:
    """(value - reference) / |reference|; 0 when both are 0; None when either is missing or
    the reference alone is 0 (no relative error exists)."""
    if value is None or reference is None:
        return None
    if reference == 0:
        return 0.0 if value == 0 else None
    return float((value - reference) / abs(reference))


def _met(value: float | None, reference: float | None, error: float | None,
         target: float | None) -> bool | None:
    if target is None or value is None or reference is None:
        return None
    if target == 0:
        return bool(value == reference)
    return error is not None and bool(abs(error) <= target)


def _delivered(messages: pd.DataFrame) -> pd.DataFrame:
    # With a latency: a filtered, lost or in-flight message has none (messages.state).
    return messages[messages["latency"].notna()]


def _latency_rows(data: dict[str, RunData]) -> list[Figure]:
    rows = []
    for q in ("p50", "p95", "p99"):
        rows.append(Figure(f"latency_{q}", f"latency {q}", "ms",
                           {b: run.summary["latency_s"][q] for b, run in data.items()}))
    hops = sorted(set().union(*(set(_delivered(run.messages)["hops"].astype(int))
                                for run in data.values())))
    if len(hops) > 1:
        for count in hops:
            groups = {b: _delivered(run.messages) for b, run in data.items()}
            figures = {b: percentiles(g.loc[g["hops"] == count, "latency"].to_numpy(float))
                       for b, g in groups.items()}
            for q in ("p50", "p95", "p99"):
                rows.append(Figure(f"latency_{q}@{count}", f"  {count} hops {q}", "ms",
                                   {b: f[q] for b, f in figures.items()}))
    return rows


def _cpu_rows(data: dict[str, RunData]) -> list[Figure]:
    nodes: list[str] = []
    for run in data.values():
        nodes += [n for n in run.summary.get("nodes", {}) if n not in nodes]
    return [Figure(f"cpu:{node}", f"cpu {node}", "%",
                   {b: (run.summary.get("nodes", {}).get(node) or {}).get("cpu_mean")
                    for b, run in data.items()}, node=node) for node in nodes]


def _migration_rows(data: dict[str, RunData]) -> list[Figure]:
    moved = {b: run.summary.get("migrations") or [] for b, run in data.items()}
    rows = []
    for i in range(max((len(m) for m in moved.values()), default=0)):
        first = next(m[i] for m in moved.values() if len(m) > i)
        label = f"downtime {first['operator']} {first['source']}>{first['target']}"
        rows.append(Figure(f"downtime:{i}", label, "ms",
                           {b: m[i]["downtime"] if len(m) > i else None
                            for b, m in moved.items()}))
    return rows


def _feature_rows(data: dict[str, RunData]) -> list[Figure]:
    """Each scenario feature's own rows (workloads.features.Feature.compare: energy's
    joules, ...), from each run's facts and summary."""
    runs = {label: RunFacts(run.facts, run.summary) for label, run in data.items()}
    return [row for feature in FEATURES if feature.compare is not None
            for row in feature.compare(runs)]


def _doubts(fidelity: dict | None) -> tuple[list[str], dict[str, str]]:
    """The reasons to doubt the reference's figures: for all of them, and per node."""
    if not fidelity or not fidelity.get("marked"):
        return [], {}
    nodes = {node: entry["reason"] for node, entry in
             (fidelity.get("throttled_nodes") or {}).items()}
    everything = list(fidelity.get("reasons") or [])
    host = [reason for reason in everything if reason not in nodes.values()]
    return host, nodes


def _unsaturated(run: RunData) -> dict | None:
    """The reference's latency outside its saturated spans (emu.host.fidelity)."""
    from emu.host.fidelity import saturated_at

    spans = (run.fidelity or {}).get("saturated_spans") or []
    if not spans:
        return None
    delivered = _delivered(run.messages)
    inside = np.array(saturated_at(delivered["t_sent"].to_numpy(float), spans), dtype=bool)
    return {"share_sent_saturated": float(inside.mean()) if inside.size else 0.0,
            "delivered": int((~inside).sum()),
            "latency_s": percentiles(delivered["latency"].to_numpy(float)[~inside])}


def compare(data: dict[str, RunData], experiment: str = "",
            reference: str = REFERENCE, targets: dict[str, float] | None = None) -> Comparison:
    """Each run's figures (by its label: a backend, or which configuration) beside the
    reference's, with relative errors, targets (issue 17's model-against-emulation ones unless
    `targets` says others; {} for none) and the reference's doubts."""
    targets = TARGETS if targets is None else targets
    if reference not in data:
        raise ValueError(f"no {reference} run to compare against: runs are {', '.join(data)}")
    backends = list(data)
    ref = data[reference]
    figures = [
        Figure("delivered", "delivered", "", {b: r.summary["delivered"] for b, r in data.items()}),
        Figure("lost", "lost", "", {b: r.summary["lost"] for b, r in data.items()}),
        Figure("throughput", "throughput", "readings/s",
               {b: throughputs(r.summary)[0] for b, r in data.items()}),
        *_latency_rows(data), *_cpu_rows(data), *_migration_rows(data),
        *_feature_rows(data),
    ]
    host, per_node = _doubts(ref.fidelity)
    for figure in figures:
        figure.target = targets.get(figure.key)
        base = figure.values.get(reference)
        for backend in backends:
            if backend == reference:
                continue
            value = figure.values.get(backend)
            figure.errors[backend] = relative_error(value, base)
            figure.met[backend] = _met(value, base, figure.errors[backend], figure.target)
        node = figure.node
        figure.doubts = host + ([per_node[node]] if node in per_node else
                                [] if node else list(per_node.values()))
    # Latency percentiles of a sampled table are the sample's; counts are of every message.
    notes = [f"{b}: the per-hop latency, the CDF and the figures outside saturated spans are "
             f"of {r.sample}; the others of every message" for b, r in data.items() if r.sample]
    if ref.fidelity is not None and not ref.fidelity.get("samples"):
        notes.append(f"{reference}: its fidelity was not measured: "
                     + "; ".join(ref.fidelity.get("reasons") or ["no samples"]))
    elif ref.fidelity is not None and not ref.fidelity.get("marked"):
        notes.append(f"{reference}: the host kept up (no saturation, relay lag or throttling "
                     "beyond the fidelity thresholds)")
    return Comparison(experiment, reference, backends,
                      {b: str(r.folder) for b, r in data.items()}, figures, ref.fidelity,
                      _unsaturated(ref), notes)


def flat(config: dict, prefix: str = "") -> dict[str, object]:
    """A nested config as dotted keys (lists by index), the way --set names fields."""
    found: dict[str, object] = {}
    items = config.items() if isinstance(config, dict) else enumerate(config)
    for key, value in items:
        dotted = f"{prefix}{key}"
        if isinstance(value, dict | list) and value:
            found.update(flat(value, dotted + "."))
        else:
            found[dotted] = value
    return found


def differences(first: dict, second: dict, limit: int = 12) -> list[str]:
    """What sets two runs apart, from their manifests: backend, seed and each field of the
    resolved config that differs (`run.seed: 7 -> 8`, a quantity with its unit:
    `topology.links.1.bandwidth: 20Mbit -> 80kbit`); at most `limit` lines, then a count."""
    lines = [f"{key}: {first.get(key)} -> {second.get(key)}" for key in ("experiment", "backend",
             "seed") if first.get(key) != second.get(key)]
    a, b = flat(first.get("config") or {}), flat(second.get("config") or {})
    for key in sorted(set(a) | set(b), key=lambda k: (k.split(".")[0], k)):
        if key != "run.seed" and a.get(key, "(none)") != b.get(key, "(none)"):
            unit = unit_of(ExperimentFile, key)  # a quantity as it is written: 80kbit
            lines.append(f"{key}: {units.shown(a.get(key, '(none)'), unit)} -> "
                         f"{units.shown(b.get(key, '(none)'), unit)}")
    if len(lines) > limit:
        lines = [*lines[:limit], f"... and {len(lines) - limit} more"]
    return lines


def written_before(changes: list[str], before: dict, after: dict) -> str:
    """`KEY=VALUE, ...` of what `changes` (`--against KEY=VALUE` options) changed, as it was
    `before` (a resolved config; `after`, the config with them): a key by the names and
    indices --set takes (`pipeline.0.on`, `pipeline.filter.cost`), a one-item list as its
    item, a number in the unit the change was written in (`bandwidth=20000kbit` against
    `80kbit`), and `(none)` where the config has no such value."""
    shown = []
    for change in changes:
        key, _, written = (part.strip() for part in change.partition("="))
        value, changed = typed_value(before, key, None), typed_value(after, key, None)
        if isinstance(value, str) and value.startswith("[") and value.endswith("]"):
            items = json.loads(value)
            value = ", ".join(map(str, items)) if isinstance(items, list) else value
        elif isinstance(value, int | float) and isinstance(changed, int | float):
            value = written_like(written, float(changed), float(value)) or f"{value:g}"
        shown.append(f"{key}={'(none)' if value is None else value}")
    return ", ".join(shown)


def labels(first: str, second: str) -> tuple[str, str]:
    """Column labels for two runs: their names, numbered when they are the same."""
    return (first, second) if first != second else (f"1: {first}", f"2: {second}")


# ---------------------------------------------------------------------------- reading runs


class BrokenRun(ValueError):
    """A run that is not `ok` (degraded, failed, interrupted): its figures are of part of the
    workload, and errors against them would be the missing part's, not the model's."""


def sound(folder: Path | str, manifest: dict, summary: dict | None = None) -> None:
    """Raise BrokenRun naming the run, its backend and why, unless its status is `ok`."""
    from experiments.summary import lost_workload

    status = manifest.get("status")
    if status == "ok":
        return
    why = lost_workload(manifest, summary) if status else None
    raise BrokenRun(f"the {manifest.get('backend', '?')} run {folder} is "
                    f"{status or 'of unknown status'}, not ok"
                    + (f": {why.split(':', 1)[1].strip()}" if why and ":" in why else "")
                    + "; no figures are compared over a broken run")


def read_run(folder: Path | str) -> RunData:
    """A run folder as a comparison reads it; an emulated run's fidelity from its manifest
    (or, for a run written before it was recorded there, from its nodes table). BrokenRun
    for a run that is not `ok`."""
    from experiments.results import NotRecorded, load_run, sample_note

    run = load_run(folder)
    sound(folder, run.manifest, run.summary)
    try:
        messages = run.messages
    except NotRecorded as missing:  # latency by path needs the messages: said in one line
        raise BrokenRun(str(missing)) from None
    if not run.summary:
        raise ValueError(f"{folder}: the run has no summary.json (status "
                         f"{run.manifest.get('status')!r}): nothing to compare")
    backend = run.manifest.get("backend", "?")
    fidelity = None
    if backend == "emu":
        fidelity = (run.manifest.get("facts") or {}).get("fidelity")
        if fidelity is None:
            from emu.host.fidelity import assess

            sample = run.manifest.get("config", {}).get("run", {}).get("sample", 1.0)
            fidelity = assess(run.nodes.to_dict("list"), sample)
    return RunData(backend, Path(folder), run.summary, messages, fidelity,
                   sample_note(run.manifest), run.manifest.get("facts") or {})


# ---------------------------------------------------------------------------- outputs


def shown(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "ms":
        return f"{value * 1000:.1f}"
    if unit == "%":
        return f"{value:.2%}" if abs(value) < 0.01 else f"{value:.1%}"
    if unit == "readings/s":
        return f"{value:.1f}"
    return f"{value:,.0f}"


def shown_error(error: float | None) -> str:
    return "-" if error is None else f"{error:+.1%}"


def table(comparison: Comparison):
    """The comparison as a rich Table: a column per backend (the reference's values marked
    * where its fidelity doubts them), a relative error per other backend, and the target;
    without targets (two runs or configurations), a relative change and no target column."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    ref = comparison.reference
    others = [b for b in comparison.backends if b != ref]
    targeted = any(figure.target is not None for figure in comparison.figures)
    view = Table(title=f"{escape(comparison.experiment)}: "
                 f"{escape(' vs '.join(comparison.backends))} "
                 f"({'errors against' if targeted else 'changes against'} {escape(ref)})",
                 title_justify="left", box=box.SIMPLE_HEAD)
    view.add_column("figure")
    view.add_column("unit")
    for backend in comparison.backends:
        view.add_column(escape(backend), justify="right")
    for backend in others:
        view.add_column(escape(f"{backend} error" if targeted else "change" if len(others) == 1
                               else f"{backend} change"), justify="right")
    if targeted:
        view.add_column("target", justify="right")
    for figure in comparison.figures:
        cells = []
        for backend in comparison.backends:
            text = shown(figure.values.get(backend), figure.unit)
            cells.append(text + ("*" if backend == ref and figure.doubts else ""))
        errors = []
        for backend in others:
            met = figure.met.get(backend)
            colour = {True: "green", False: "red"}.get(met)
            text = shown_error(figure.errors.get(backend))
            errors.append(f"[{colour}]{text}[/{colour}]" if colour else text)
        target = ("" if figure.target is None else "equal" if figure.target == 0
                  else f"±{figure.target:.0%}")
        view.add_row(escape(figure.label), figure.unit, *cells, *errors,
                     *([target] if targeted else []))
    return view


def explanations(comparison: Comparison) -> list[str]:
    """Lines under the table: why figures are marked, and the reference without its
    saturated spans."""
    lines = list(comparison.notes)
    doubted = {d for f in comparison.figures for d in f.doubts}
    reasons = [r for r in (comparison.fidelity or {}).get("reasons") or [] if r in doubted]
    if reasons:
        lines.append(f"* {comparison.reference} figures taken while the testbed was "
                     "overloaded: " + "; ".join(reasons))
    clean = comparison.unsaturated
    if clean and clean["delivered"] < MIN_UNSATURATED:
        lines.append(f"  {comparison.reference}: only {clean['delivered']:,} messages were sent "
                     "outside the saturated spans, too few for figures of their own")
    elif clean:
        latency = clean["latency_s"]
        lines.append(f"  {comparison.reference} outside the saturated spans "
                     f"({clean['delivered']:,} messages; "
                     f"{clean['share_sent_saturated']:.0%} were sent within them): p50 "
                     f"{shown(latency['p50'], 'ms')} ms, p95 {shown(latency['p95'], 'ms')} ms, "
                     f"p99 {shown(latency['p99'], 'ms')} ms")
    return lines


def write(comparison: Comparison, folder: Path) -> dict[str, Path]:
    """comparison.json and the two figures into `folder` (made if need be); their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"comparison": folder / "comparison.json", "latency": folder / "latency_cdf.png",
             "cpu": folder / "cpu.png"}
    paths["comparison"].write_text(json.dumps(comparison.to_json(), indent=2) + "\n",
                                   encoding="utf-8")
    runs = {b: read_run(f) for b, f in comparison.runs.items()}
    latency_cdf_figure(runs, comparison).savefig(paths["latency"], dpi=110)
    cpu_figure(comparison).savefig(paths["cpu"], dpi=110)
    return paths


def _figure(size: tuple[float, float]):
    import matplotlib
    import seaborn as sns
    from matplotlib.figure import Figure as MplFigure

    # A Figure of its own, not pyplot's (see experiments.plots).
    with matplotlib.rc_context(sns.axes_style("whitegrid")):
        fig = MplFigure(figsize=size)
        ax = fig.subplots()
    return fig, ax


def latency_cdf_figure(runs: dict[str, RunData], comparison: Comparison):
    """Every backend's end-to-end latency CDF on one axis (log scale), the reference's
    saturated share in its legend."""
    fig, ax = _figure((8, 4.5))
    for backend, run in runs.items():
        latency = np.sort(_delivered(run.messages)["latency"].to_numpy(float)) * 1000
        label = backend
        if backend == comparison.reference and comparison.unsaturated:
            label += (f" ({comparison.unsaturated['share_sent_saturated']:.0%} sent while the "
                      "host was saturated)")
        if latency.size:
            ax.step(latency, np.arange(1, latency.size + 1) / latency.size, where="post",
                    label=label)
    if ax.lines:
        from matplotlib.ticker import FuncFormatter

        ax.set_xscale("log")
        plain = FuncFormatter(lambda value, _: f"{value:g}")  # 30, not 3 x 10^1
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(plain)
        ax.legend(loc="lower right")
    ax.set(xlabel="end-to-end latency (ms, log scale)", ylabel="fraction of messages",
           title=f"{comparison.experiment}: latency, {' vs '.join(comparison.backends)}")
    fig.tight_layout()
    return fig


def cpu_figure(comparison: Comparison):
    """Each node's mean CPU, a bar per backend side by side."""
    rows = [f for f in comparison.figures if f.key.startswith("cpu:")]
    fig, ax = _figure((max(6.0, 1.2 * len(rows) + 2), 4.5))
    width = 0.8 / max(1, len(comparison.backends))
    positions = np.arange(len(rows))
    for i, backend in enumerate(comparison.backends):
        values = [(f.values.get(backend) or 0.0) * 100 for f in rows]
        ax.bar(positions + (i - (len(comparison.backends) - 1) / 2) * width, values, width,
               label=backend)
    ax.set_xticks(positions, [f.key.removeprefix("cpu:") for f in rows], rotation=30,
                  ha="right")
    ax.set(ylabel="mean CPU (% of the node's cores)",
           title=f"{comparison.experiment}: CPU per node")
    if rows:
        ax.legend()
    fig.tight_layout()
    return fig
