"""Time install, update and uninstall of an operator on N idle gateways (seed 002, Figs. 3.10-3.13).

The thesis installed, updated and uninstalled an operator bundle on 50 to 200 Kura gateways,
10 times each, and measured at the client from the first request until every node had answered;
Kura's commands ran one node after another. Here the Controller sends every node its request
first and then awaits the replies together, so a command costs about the slowest node's time.

For each N: one cluster of N gateways (arm64, QEMU) with a broker and ZooKeeper, agents idle;
once all are registered, `repetitions` rounds of install, update (a changed parameter) and
uninstall; then the cluster goes, also on a failure or Ctrl-C. Tables: `commands` (one row per
node reply) and `summary` (one row per N and command), as Parquet, and a plot.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from emu.agent.config import OperatorConfig
from topologies.model import Topology, expand
from topologies.spec import TopologySpec

if TYPE_CHECKING:
    import docker
    import pandas as pd

    from emu.control import CommandResult

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
# command (a command finished), down.
Progress = Callable[[str, int, int, str], None]


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
    """The commands table as columns: one row per node reply (or missing reply)."""

    columns: dict[str, list] = field(default_factory=lambda: {
        name: [] for name in ("gateways", "repetition", "command", "node", "ok", "error",
                              "latency_s", "duration_s", "t_sent", "t_replied", "t_done")})

    def add(self, gateways: int, repetition: int, result: CommandResult) -> None:
        for node, reply in sorted(result.replies.items()):
            self._row(gateways, repetition, result, node, reply.ok, reply.error, reply.latency,
                      reply.t_sent, reply.t_replied, reply.t_done)
        for node in result.missing:
            self._row(gateways, repetition, result, node, False, "no reply", None,
                      result.t_sent, None, None)

    def _row(self, gateways: int, repetition: int, result: CommandResult, *values) -> None:
        row = (gateways, repetition, result.command, *values[:4], result.duration, *values[4:])
        for name, value in zip(self.columns, row, strict=True):
            self.columns[name].append(value)


def summarise(commands: pd.DataFrame) -> pd.DataFrame:
    """One row per (gateways, command): the total duration's mean, spread and extremes over
    repetitions, the node reply latencies' median and 95th percentile, and failures."""
    import pandas as pd

    if commands.empty:
        return pd.DataFrame(columns=["gateways", "command", "repetitions", "mean_s", "std_s",
                                     "min_s", "median_s", "max_s", "latency_p50_s",
                                     "latency_p95_s", "replies", "failed"])
    order = {command: i for i, command in enumerate(COMMANDS)}
    rows = []
    for (gateways, command), group in commands.groupby(["gateways", "command"], sort=False):
        durations = group.groupby("repetition")["duration_s"].first()
        latencies = group["latency_s"].dropna()
        rows.append({
            "gateways": int(gateways), "command": command, "repetitions": len(durations),
            "mean_s": durations.mean(), "std_s": durations.std(ddof=1) if len(durations) > 1
            else 0.0, "min_s": durations.min(), "median_s": durations.median(),
            "max_s": durations.max(),
            "latency_p50_s": latencies.quantile(0.5) if len(latencies) else None,
            "latency_p95_s": latencies.quantile(0.95) if len(latencies) else None,
            "replies": int(group["ok"].count()), "failed": int((~group["ok"]).sum())})
    table = pd.DataFrame(rows)
    table["_order"] = table["command"].map(order)
    return table.sort_values(["gateways", "_order"]).drop(columns="_order").reset_index(
        drop=True)


def plot(commands: pd.DataFrame, path: Path) -> Path:
    """Duration against N per command: the median with a bar from the fastest to the
    slowest repetition (durations are skewed: a gateway's first install loads the task's
    code), beside the thesis's serial figures."""
    import seaborn as sns
    from matplotlib.figure import Figure

    per_command = commands.groupby(["gateways", "repetition", "command"], as_index=False)[
        "duration_s"].first()
    figure = Figure(figsize=(4 * len(COMMANDS), 3.6))  # not pyplot's: leaves its backend alone
    axes = figure.subplots(1, len(COMMANDS), sharey=True, squeeze=False)
    for axis, command in zip(axes[0], COMMANDS, strict=True):
        data = per_command[per_command["command"] == command]
        sns.pointplot(data=data, x="gateways", y="duration_s", estimator="median",
                      errorbar=("pi", 100), capsize=0.2, native_scale=True, ax=axis,
                      label="foglab (parallel): median, min to max")
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
    """Where a run wrote its tables and plot, and its summary."""

    folder: Path
    summary: pd.DataFrame
    clusters: list[str]


def run_deploy_timing(gateways: Sequence[int] = DEFAULT_GATEWAYS,
                      repetitions: int = DEFAULT_REPETITIONS,
                      out: Path = Path("results/deployment-timing"), *,
                      client: docker.DockerClient | None = None,
                      labels: dict[str, str] | None = None,
                      progress: Progress = _quiet,
                      command_timeout_s: float = COMMAND_TIMEOUT_S) -> DeployTiming:
    """Run the experiment for each N in turn; write out/<run-id>/ commands.parquet,
    summary.parquet, summary.json and deploy-timing.png. Each N's cluster is removed before the
    next starts, and on any failure (the tables of the N done so far are still written)."""
    import pandas as pd

    from emu.cluster.engine import Cluster
    from emu.cluster.inventory import StuckNetwork
    from emu.cluster.plan import plan_cluster

    if not gateways or any(n < 1 for n in gateways):
        raise ValueError(f"gateways must be positive counts, not {list(gateways)}")
    if repetitions < 1:
        raise ValueError(f"repetitions must be at least 1, not {repetitions}")
    run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{secrets.token_hex(2)}"
    folder = Path(out) / run_id
    rows = Rows()
    clusters: list[str] = []
    leftovers: list[str] = []
    error: BaseException | None = None
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
                    # next N's: the timings stand, and the leftover is named in the summary.
                    leftovers.append(str(stuck))
                    progress("leftover", 0, 1, str(stuck))
    except BaseException as failure:
        error = failure
        raise
    finally:
        commands = pd.DataFrame(rows.columns)
        summary = summarise(commands)
        folder.mkdir(parents=True, exist_ok=True)
        commands.to_parquet(folder / "commands.parquet", index=False)
        summary.to_parquet(folder / "summary.parquet", index=False)
        (folder / "summary.json").write_text(json.dumps({
            "gateways": list(gateways), "repetitions": repetitions, "operator": OPERATOR.task,
            "clusters": clusters, "error": None if error is None else repr(error),
            "leftovers": leftovers,
            "thesis_serial_s": [list(t) for t in THESIS_SERIAL_S],
            "summary": json.loads(summary.to_json(orient="records"))}, indent=2))
        if not commands.empty:
            plot(commands, folder / "deploy-timing.png")
    return DeployTiming(folder, summary, clusters)


def _time_commands(cluster, n: int, repetitions: int, rows: Rows, progress: Progress,
                   timeout_s: float) -> None:
    from emu.control import Controller, wait_registered

    status = {s.node: s for s in cluster.status()}
    nodes = [a.node for a in cluster.plan.agents()]
    zookeeper = ",".join(f"{status[z].ip}:2181" for z in cluster.plan.zookeeper)
    progress("registered", 0, n, "")
    wait_registered(zookeeper, nodes, timeout=REGISTER_TIMEOUT_S)
    progress("registered", n, n, "")
    broker = sorted(set(cluster.plan.brokers.values()))[0]
    total = repetitions * len(COMMANDS)
    with Controller(f"{status[broker].ip}:1883") as control:
        for repetition in range(repetitions):
            for step, command in enumerate(COMMANDS):
                if command == "install":
                    # The first install imports the tasks on every node at once.
                    timeout = max(timeout_s, INSTALL_TIMEOUT_PER_NODE_S * n) if \
                        repetition == 0 else timeout_s
                    result = control.install(nodes, OPERATOR, timeout=timeout)
                elif command == "update":
                    result = control.update(nodes, OPERATOR.name, UPDATED_PARAMS,
                                            timeout=timeout_s)
                else:
                    result = control.uninstall(nodes, OPERATOR.name, timeout=timeout_s)
                rows.add(n, repetition, result)
                progress("command", repetition * len(COMMANDS) + step + 1, total,
                         f"N={n} #{repetition + 1} {result.summary()}")
