"""Install, update and uninstall of an operator on N idle arm64 gateways, against a serial loop.

    python benchmarks/deploy_timing.py [--gateways 50,100,150,200] [--repetitions 10]
                                       [--out DIR]

The migration thesis (seed 002, 3.6, Figs. 3.10-3.13) installed, updated and uninstalled an
operator bundle on 50 to 200 Kura gateways, 10 times each, and measured at the client from the
first request until every node had answered; Kura's commands ran one node after another. Here
the Controller (emu.control.commands) sends every node its request first and then awaits the replies
together, so a command costs about the slowest node's time.

For each N: one cluster (emu.cluster) of N gateways gw-1..N (arm64 under QEMU, profile rpi4)
with a broker and ZooKeeper, agents idle; once all are registered, `--repetitions` rounds of
install, update (a changed parameter) and uninstall sent to all at once; then the baseline on
the same cluster, in the same run: one round of the same three commands sent the thesis's way,
node after node, each awaited before the next. Then the cluster goes, also on a failure or
Ctrl-C. The first install on a node imports the RIoTBench tasks (numpy): it is slow, and the
median of the repetitions leaves it out; the serial round comes after, warm.

Printed per N: `install_s_<N>=`, `update_s_<N>=`, `uninstall_s_<N>=` (median over the
repetitions, first request to last reply), `install_first_s_<N>=` (the cold first round),
`reply_p95_s_<N>=`, `failed_<N>=`, and the baseline `serial_install_s_<N>=`,
`serial_update_s_<N>=`, `serial_uninstall_s_<N>=`; the thesis's one stated figure,
`thesis_install_s_50=10.47`; last `ratio=` install_s / serial_install_s at the largest N.
With `--out`, also tables (`commands.parquet`: one row per node reply, `summary.parquet`,
`summary.json`) and a plot (`deploy-timing.png`) under DIR/<run-id>/.

Measured on the 2-core development host, shared with other work (load 14 to 67 during the
runs), agents forked from the zygote:

    --gateways 10,50 --repetitions 3:       N=10: install 0.055 s, serial 0.069 s;
        N=50: install 0.56 s (first, cold: 1.2 s), update 0.34, uninstall 0.36; serial install
        0.68 s; ratio 0.83
    --gateways 50,100,200 --repetitions 5:  N=50: install 0.24 s (cold 1.6 s), serial 0.33 s;
        N=100: install 0.70 s (cold 3.9 s), serial 1.09 s; N=200: install 2.5 s (cold 21.8 s),
        update 2.0, uninstall 2.1, serial install 12.2 s; ratio 0.21; 0 failed

The thesis's Kura took 10.47 s to install on 50 gateways; here a warm install on 50 takes
0.24-0.56 s and even node after node 0.33-0.68 s: a request costs an agent a few ms, and the
host's two cores, which run every emulated gateway, bound the parallel figure, so the gain of
sending all requests first shows only once the serial round's round trips add up (N=200).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emu.agent.config import OperatorConfig  # noqa: E402
from topologies.model import Topology, expand  # noqa: E402
from topologies.spec import TopologySpec  # noqa: E402

if TYPE_CHECKING:
    import docker
    import pandas as pd

    from emu.control.commands import CommandResult

COMMANDS = ("install", "update", "uninstall")
DEFAULT_GATEWAYS = (50, 100, 150, 200)
DEFAULT_REPETITIONS = 10
# Seed 002, 3.6 (Experiment 2): "it takes 10.47 seconds to deploy and run an operator on 50
# gateway devices". The only number the text gives; Figs. 3.10, 3.12 and 3.13 are box plots
# whose values the text does not state. (command, gateways, mean seconds)
THESIS_SERIAL_S: tuple[tuple[str, int, float], ...] = (("install", 50, 10.47),)
# A RIoTBench range filter, as the thesis's operators read a gateway's sensor stream; the update
# changes one parameter, as the thesis changed publish.rate.
OPERATOR = OperatorConfig(name="timing", task="range_filter",
                          params={"ranges": {"temperature": [-30.0, 50.0]}},
                          reads=["city/#"], writes="clean")
UPDATED_PARAMS = {"ranges": {"temperature": [-20.0, 45.0]}}
REGISTER_TIMEOUT_S = 600.0
# The first install on a node imports the RIoTBench tasks (numpy): seconds of CPU per node
# under QEMU, all nodes at once on the host's cores.
INSTALL_TIMEOUT_PER_NODE_S = 3.0
COMMAND_TIMEOUT_S = 60.0
LABELS = {"foglab.experiment": "deploy-timing"}

# (stage, done, total, detail): stages are cluster (a container started), registered,
# command (a command finished), down, leftover (a network the engine kept).
Progress = Callable[[str, int, int, str], None]
MODES = ("parallel", "serial")


def _quiet(stage: str, done: int, total: int, detail: str) -> None:
    pass


def gateway_topology(gateways: int, name: str = "gateways") -> Topology:
    """N idle arm64 gateways gw-1..N (profile rpi4) and one broker, on one site, no devices."""
    return expand(TopologySpec.model_validate({
        "name": name, "sites": [{"name": "edge"}],
        "nodes": [{"name": "gw", "kind": "gateway", "replicas": gateways, "site": "edge",
                   "profile": "rpi4"},
                  {"name": "broker", "kind": "broker", "site": "edge", "profile": "vm.small"}],
        "links": [{"from": "gw-*", "to": "broker"}]}))


@dataclass
class Rows:
    """The commands table as columns: one row per node reply (or missing reply). `mode`:
    parallel (all requests first) or serial (the baseline: node after node); `duration_s` is
    the whole command's, first request to last reply."""

    columns: dict[str, list] = field(default_factory=lambda: {
        name: [] for name in ("gateways", "mode", "repetition", "command", "node", "ok",
                              "error", "latency_s", "duration_s", "t_sent", "t_replied",
                              "t_done")})

    def add(self, gateways: int, mode: str, repetition: int, result: CommandResult) -> None:
        for node, reply in sorted(result.replies.items()):
            self._row(gateways, mode, repetition, result, node, reply.ok, reply.error,
                      reply.latency, reply.t_sent, reply.t_replied, reply.t_done)
        for node in result.missing:
            self._row(gateways, mode, repetition, result, node, False, "no reply", None,
                      result.t_sent, None, None)

    def _row(self, gateways: int, mode: str, repetition: int, result: CommandResult,
             *values) -> None:
        row = (gateways, mode, repetition, result.command, *values[:4], result.duration,
               *values[4:])
        for name, value in zip(self.columns, row, strict=True):
            self.columns[name].append(value)


def summarise(commands: pd.DataFrame) -> pd.DataFrame:
    """One row per (gateways, mode, command): the total duration's mean, spread and extremes
    over repetitions, the node reply latencies' median and 95th percentile, and failures."""
    import pandas as pd

    columns = ["gateways", "mode", "command", "repetitions", "mean_s", "std_s", "min_s",
               "median_s", "max_s", "latency_p50_s", "latency_p95_s", "replies", "failed"]
    if commands.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (gateways, mode, command), group in commands.groupby(["gateways", "mode", "command"],
                                                             sort=False):
        durations = group.groupby("repetition")["duration_s"].first()
        latencies = group["latency_s"].dropna()
        rows.append({
            "gateways": int(gateways), "mode": mode, "command": command,
            "repetitions": len(durations), "mean_s": durations.mean(),
            "std_s": durations.std(ddof=1) if len(durations) > 1 else 0.0,
            "min_s": durations.min(), "median_s": durations.median(),
            "max_s": durations.max(),
            "latency_p50_s": latencies.quantile(0.5) if len(latencies) else None,
            "latency_p95_s": latencies.quantile(0.95) if len(latencies) else None,
            "replies": int(group["ok"].count()), "failed": int((~group["ok"]).sum())})
    table = pd.DataFrame(rows, columns=columns)
    table["_mode"] = table["mode"].map({m: i for i, m in enumerate(MODES)})
    table["_command"] = table["command"].map({c: i for i, c in enumerate(COMMANDS)})
    return table.sort_values(["gateways", "_mode", "_command"]).drop(
        columns=["_mode", "_command"]).reset_index(drop=True)


def warm_seconds(commands: pd.DataFrame, gateways: int, command: str,
                 mode: str = "parallel") -> float:
    """The median duration of a command on N gateways over its repetitions after the first
    (the first install imports the tasks), or the only one there is; NaN if none ran."""
    rows = commands[(commands["gateways"] == gateways) & (commands["mode"] == mode)
                    & (commands["command"] == command)]
    durations = rows.groupby("repetition")["duration_s"].first()
    if len(durations) > 1:
        durations = durations.iloc[1:]
    return float(durations.median()) if len(durations) else float("nan")


def plot(commands: pd.DataFrame, path: Path) -> Path:
    """Duration against N per command: the median with a bar from the fastest to the
    slowest repetition (durations are skewed: a gateway's first install loads the task's
    code), the serial baseline, and the thesis's serial figures."""
    import seaborn as sns
    from matplotlib.figure import Figure

    per_command = commands.groupby(["gateways", "mode", "repetition", "command"],
                                   as_index=False)["duration_s"].first()
    figure = Figure(figsize=(4 * len(COMMANDS), 3.6))  # not pyplot's: leaves its backend alone
    axes = figure.subplots(1, len(COMMANDS), sharey=True, squeeze=False)
    for axis, command in zip(axes[0], COMMANDS, strict=True):
        data = per_command[per_command["command"] == command]
        sns.pointplot(data=data, x="gateways", y="duration_s", hue="mode",
                      hue_order=[m for m in MODES if m in set(data["mode"])],
                      estimator="median", errorbar=("pi", 100), capsize=0.2,
                      native_scale=True, ax=axis)
        thesis = [(n, s) for c, n, s in THESIS_SERIAL_S if c == command]
        if thesis:
            axis.scatter([n for n, _ in thesis], [s for _, s in thesis], marker="x",
                         color="tab:red", zorder=3, label="thesis, Kura (serial)")
        axis.set_title(command)
        axis.set_xlabel("gateways")
        axis.set_ylabel("first request to last reply (s)")
        axis.legend(fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path


@dataclass
class DeployTiming:
    """The commands table and its summary; where they were written (None: nowhere), the
    clusters made and any network the engine kept."""

    commands: pd.DataFrame
    summary: pd.DataFrame
    folder: Path | None
    clusters: list[str]
    leftovers: list[str]


def run_deploy_timing(gateways: Sequence[int] = DEFAULT_GATEWAYS,
                      repetitions: int = DEFAULT_REPETITIONS, out: Path | None = None, *,
                      client: docker.DockerClient | None = None,
                      labels: dict[str, str] | None = None,
                      progress: Progress = _quiet,
                      command_timeout_s: float = COMMAND_TIMEOUT_S) -> DeployTiming:
    """Run the benchmark for each N in turn. With `out`, write out/<run-id>/ commands.parquet,
    summary.parquet, summary.json and deploy-timing.png (also on a failure, with the N done
    so far). Each N's cluster is removed before the next starts, and on any failure."""
    import pandas as pd

    from emu.cluster.plan import plan_cluster
    from emu.engines.docker.engine import Cluster
    from emu.engines.docker.inventory import StuckNetwork

    if not gateways or any(n < 1 for n in gateways):
        raise ValueError(f"gateways must be positive counts, not {list(gateways)}")
    if repetitions < 1:
        raise ValueError(f"repetitions must be at least 1, not {repetitions}")
    rows = Rows()
    clusters: list[str] = []
    leftovers: list[str] = []
    error: BaseException | None = None
    folder = None
    try:
        for n in gateways:
            name = f"dt-{secrets.token_hex(3)}-{n}"
            clusters.append(name)
            plan = plan_cluster(gateway_topology(n), name,
                                labels={**LABELS, **(labels or {})})
            cluster = Cluster(plan, client, progress=lambda stage, done, total, detail:
                              progress("cluster", done, total, detail)
                              if stage == "containers" else None)
            try:
                cluster.up()
                _time_commands(cluster, n, repetitions, rows, progress, command_timeout_s)
            finally:
                progress("down", 0, 1, name)
                try:
                    cluster.down()
                except StuckNetwork as stuck:
                    # Only a network the engine keeps is left, under another name than the
                    # next N's: the timings stand, and the leftover is named.
                    leftovers.append(str(stuck))
                    progress("leftover", 0, 1, str(stuck))
    except BaseException as failure:
        error = failure
        raise
    finally:
        commands = pd.DataFrame(rows.columns)
        summary = summarise(commands)
        if out is not None:
            folder = Path(out) / (time.strftime("%Y%m%d-%H%M%S") + f"-{secrets.token_hex(2)}")
            _write(folder, commands, summary, {
                "gateways": list(gateways), "repetitions": repetitions,
                "operator": OPERATOR.task, "clusters": clusters,
                "error": None if error is None else repr(error), "leftovers": leftovers})
    return DeployTiming(commands, summary, folder, clusters, leftovers)


def _write(folder: Path, commands: pd.DataFrame, summary: pd.DataFrame, facts: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    commands.to_parquet(folder / "commands.parquet", index=False)
    summary.to_parquet(folder / "summary.parquet", index=False)
    (folder / "summary.json").write_text(json.dumps({
        **facts, "thesis_serial_s": [list(t) for t in THESIS_SERIAL_S],
        "summary": json.loads(summary.to_json(orient="records"))}, indent=2))
    if not commands.empty:
        plot(commands, folder / "deploy-timing.png")


def _command(control, command: str, nodes: list[str], timeout: float) -> CommandResult:
    if command == "install":
        return control.install(nodes, OPERATOR, timeout=timeout)
    if command == "update":
        return control.update(nodes, OPERATOR.name, UPDATED_PARAMS, timeout=timeout)
    return control.uninstall(nodes, OPERATOR.name, timeout=timeout)


def _serially(control, command: str, nodes: list[str], timeout: float) -> CommandResult:
    """The thesis's way: one node's request, its reply awaited, then the next node's; one
    result spanning them all."""
    from emu.control.commands import CommandResult

    results = [_command(control, command, [node], timeout) for node in nodes]
    return CommandResult(command, {n: r for result in results for n, r in result.replies.items()},
                         [n for result in results for n in result.missing],
                         t_sent=results[0].t_sent, t_finished=results[-1].t_finished)


def _time_commands(cluster, n: int, repetitions: int, rows: Rows, progress: Progress,
                   timeout_s: float) -> None:
    from emu.control.commands import Controller, wait_registered

    status = {s.node: s for s in cluster.status()}
    nodes = [a.node for a in cluster.plan.agents()]
    zookeeper = ",".join(f"{status[z].ip}:2181" for z in cluster.plan.zookeeper)
    progress("registered", 0, n, "")
    wait_registered(zookeeper, nodes, timeout=REGISTER_TIMEOUT_S)
    progress("registered", n, n, "")
    broker = sorted(set(cluster.plan.brokers.values()))[0]
    total = (repetitions + 1) * len(COMMANDS)
    with Controller(f"{status[broker].ip}:1883") as control:
        for repetition in range(repetitions + 1):
            serial = repetition == repetitions  # the baseline, warm, after the rounds
            for step, command in enumerate(COMMANDS):
                timeout = timeout_s
                if command == "install" and repetition == 0:
                    # The first install imports the tasks on every node at once.
                    timeout = max(timeout_s, INSTALL_TIMEOUT_PER_NODE_S * n)
                if serial:
                    result = _serially(control, command, nodes, timeout)
                    rows.add(n, "serial", 0, result)
                else:
                    result = _command(control, command, nodes, timeout)
                    rows.add(n, "parallel", repetition, result)
                progress("command", repetition * len(COMMANDS) + step + 1, total,
                         f"N={n} {'serial' if serial else f'#{repetition + 1}'} "
                         f"{result.summary()}")


def figures(commands: pd.DataFrame, gateways: Sequence[int]) -> list[str]:
    """The key=value lines of a run, the ratio last."""
    lines = []
    for n in gateways:
        mine = commands[commands["gateways"] == n]
        if mine.empty:
            continue
        parallel = mine[mine["mode"] == "parallel"]
        for command in COMMANDS:
            lines.append(f"{command}_s_{n}={warm_seconds(commands, n, command):.3f}")
        first = parallel[(parallel["command"] == "install") & (parallel["repetition"] == 0)]
        if not first.empty:
            lines.append(f"install_first_s_{n}={first['duration_s'].iloc[0]:.3f}")
        latencies = parallel["latency_s"].dropna()
        if len(latencies):
            lines.append(f"reply_p95_s_{n}={latencies.quantile(0.95):.3f}")
        lines.append(f"failed_{n}={int((~mine['ok']).sum())}")
        for command in COMMANDS:
            lines.append(f"serial_{command}_s_{n}="
                         f"{warm_seconds(commands, n, command, 'serial'):.3f}")
    for command, n, seconds in THESIS_SERIAL_S:
        lines.append(f"thesis_{command}_s_{n}={seconds}")
    done = [n for n in gateways if not commands[(commands["gateways"] == n)
                                                & (commands["mode"] == "serial")].empty]
    if done:
        largest = max(done)
        parallel, serial = (warm_seconds(commands, largest, "install", mode) for mode in MODES)
        lines.append(f"ratio={parallel / serial:.3f}")
    else:
        lines.append("ratio=nan")
    return lines


def main() -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from topologies.terminal import stop_on_signals

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateways", default=",".join(map(str, DEFAULT_GATEWAYS)),
                        help="gateway counts, comma-separated")
    parser.add_argument("--repetitions", type=int, default=DEFAULT_REPETITIONS,
                        help="parallel rounds of install, update and uninstall per N")
    parser.add_argument("--out", type=Path, help="folder for the tables and the plot")
    parser.add_argument("--label", action="append", default=[],
                        help="KEY=VALUE: one more label on every container and network")
    options = parser.parse_args()
    try:
        counts = [int(part) for part in options.gateways.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--gateways: comma-separated counts, not {options.gateways!r}")
    if not counts or min(counts) < 1:
        parser.error(f"--gateways: positive counts, not {options.gateways!r}")
    if options.repetitions < 1:
        parser.error(f"--repetitions: at least 1, not {options.repetitions}")
    labels = dict(item.partition("=")[::2] for item in options.label)

    console = Console(stderr=True)
    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=True)
    sizes = bars.add_task("gateway counts", total=len(counts))
    started = bars.add_task("containers", total=None, visible=False)
    steps = bars.add_task("commands", total=None, visible=False)

    def progress(stage: str, done: int, total: int, detail: str) -> None:
        if stage == "cluster":
            bars.update(started, visible=True, completed=done, total=total,
                        description="containers")
        elif stage == "registered":
            bars.update(started, description=f"registered {done}/{total}")
        elif stage == "command":
            bars.update(started, visible=False)
            bars.update(steps, visible=True, completed=done, total=total)
            console.print(detail, style="dim", markup=False)
        elif stage == "down":
            bars.update(steps, visible=False, completed=0)
            bars.advance(sizes)
        elif stage == "leftover":
            console.print(f"left behind: {detail}", style="yellow", markup=False)

    code = 0
    with stop_on_signals(), bars:
        try:
            result = run_deploy_timing(counts, options.repetitions, options.out,
                                       labels=labels, progress=progress)
        except KeyboardInterrupt:
            console.print("interrupted: the clusters are removed")
            return 130
    for line in figures(result.commands, counts):
        print(line)
    if result.folder is not None:
        console.print(f"tables and plot in {result.folder}")
    if result.leftovers or (~result.commands["ok"]).any():
        code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
