"""CPU and memory of running containers, read from their cgroups (v1 or v2) without the engine.

`docker stats` takes about a second per container and call; the cgroup files the engine reads
take microseconds, so a run of hundreds of containers can sample them every second.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from emu.agent.timebase import UNDILATED, TimeBase

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Usage:
    cpu_s: float        # CPU seconds used since the container started
    memory: int         # bytes in use now


def _first(candidates: list[Path]) -> Path | None:
    return next((path for path in candidates if path.exists()), None)


class ContainerCgroup:
    """A container's cgroup files: the cgroupfs (docker/<id>) or systemd (docker-<id>.scope)
    layouts, under cgroup v1 (cpuacct, memory, freezer) or v2 (unified)."""

    def __init__(self, container_id: str, root: Path = CGROUP_ROOT):
        names = [f"docker/{container_id}", f"system.slice/docker-{container_id}.scope"]
        self.cpu_file = _first([root / "cpuacct" / n / "cpuacct.usage" for n in names]
                               + [root / n / "cpu.stat" for n in names])
        self.memory_file = _first([root / "memory" / n / "memory.usage_in_bytes" for n in names]
                                  + [root / n / "memory.current" for n in names])
        if self.cpu_file is None or self.memory_file is None:
            raise FileNotFoundError(f"no cgroup found for container {container_id[:12]} "
                                    f"under {root}")
        self.procs_file = self.cpu_file.parent / "cgroup.procs"
        # v1 has no freezer file where the freezer controller is not mounted.
        self.freezer_file = _first([root / "freezer" / n / "freezer.state" for n in names]
                                   + [self.cpu_file.parent / "cgroup.freeze"])

    def usage(self) -> Usage:
        text = self.cpu_file.read_text()
        if self.cpu_file.name == "cpu.stat":  # v2: usage_usec <n> on the first line
            cpu_s = int(text.split()[1]) / 1e6
        else:  # v1: nanoseconds
            cpu_s = int(text) / 1e9
        return Usage(cpu_s, int(self.memory_file.read_text()))

    def down(self) -> str | None:
        """None while the container runs; else why it does not: its cgroup is gone (removed),
        holds no process (stopped, or its process died), or is frozen (paused)."""
        try:
            if not self.procs_file.read_text().strip():
                return "stopped: no process left in its cgroup"
            if self.freezer_file is not None and self.freezer_file.read_text().strip() in (
                    "FROZEN", "FREEZING", "1"):
                return "paused: its cgroup is frozen"
        except (FileNotFoundError, ProcessLookupError):
            return "gone: its cgroup was removed"
        return None


class EngineStats:
    """A container's CPU and memory from its engine's stats API, for one whose cgroup is not on
    this host (a task on another node of a swarm, reached through its node's engine:
    emu.engines.swarm.routing). About a second per call, where a cgroup file takes microseconds;
    and no
    throttling counters (`cpu_file` None: the fidelity sampler leaves its column empty)."""

    cpu_file = None

    def __init__(self, node) -> None:
        self.node = node  # its engine's control of it (emu.engines.base.NodeControl)
        self.container = node.container

    def usage(self) -> Usage:
        try:
            stats = self.node.stats()
            cpu_s = stats["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9
            return Usage(cpu_s, int((stats.get("memory_stats") or {}).get("usage", 0)))
        except Exception as error:  # noqa: BLE001 - the engine's or the answer's, as a gone cgroup
            raise ProcessLookupError(f"no stats for container {self.container[:12]}: "
                                     f"{error}") from None

    def down(self) -> str | None:
        try:
            state = self.node.state()
        except Exception:  # noqa: BLE001 - removed, or its node's engine went
            return "gone: its engine does not know it"
        if state.get("Paused"):
            return "paused: its engine says so"
        if not state.get("Running"):
            return "stopped: its engine says so"
        return None


def counters(container_id: str, root: Path = CGROUP_ROOT, node=None):
    """The container's cgroup on this host; without one, its engine's stats (given `node`, its
    engine's control of the container: emu.engines.base.NodeControl)."""
    try:
        return ContainerCgroup(container_id, root)
    except FileNotFoundError:
        if node is None:
            raise
        return EngineStats(node)


class NodeSampler:
    """Samples a set of containers: per node, CPU as a fraction of its cores since the last
    sample, memory in bytes, and whether it is up, as the simulator's `nodes` table has them.

    A node whose container is gone, stopped or paused is down at that sample (a row with `up`
    false, cpu and memory 0), and up again once it runs (a broker's `docker restart`); `down`
    says when and why each node first went down. A container restarted between two samples
    starts its cgroup's CPU counter again at 0: a reading below the last one is taken as the
    CPU time since that restart, within the interval.

    With `fidelity` (emu.host.fidelity.FidelitySampler, made by `watch`), each row also has what
    could distort the run at that sample: the host's CPU pressure, the link relays' timer lag
    and the node's CPU throttling (null for a node that is down).
    """

    def __init__(self, containers: dict[str, str], cores: dict[str, float], epoch: float,
                 root: Path = CGROUP_ROOT, clock: TimeBase = UNDILATED, control=None):
        # `control`: node -> its engine's control (Engine.node), for containers whose cgroup
        # is elsewhere (`counters`).
        self.cgroups = {node: counters(cid, root, control(node) if control else None)
                        for node, cid in containers.items()}
        self.cores = cores
        # Rows are stamped in the run's time (`epoch` is on its clock: emulated at dilation
        # K); CPU is a share of the node's cores over host seconds, the same at every K (an
        # emulated node of c cores gets K * c host CPU seconds per emulated second).
        self.epoch = epoch
        self.clock = clock
        self.last: dict[str, tuple[float, float]] = {}
        self.down: dict[str, str] = {}
        self.rows: dict[str, list] = {"t": [], "node": [], "cpu": [], "memory": [], "queue": [],
                                      "up": []}
        self.fidelity = None

    def watch(self, lag=None, pressure=None):
        """Sample the fidelity columns too (emu.host.fidelity); `lag`: the relays' (RelaySet.lag),
        None without relays. Returns the FidelitySampler, whose `facts` the manifest keeps."""
        from emu.host.fidelity import COLUMNS, FidelitySampler

        self.fidelity = FidelitySampler({node: cgroup.cpu_file
                                         for node, cgroup in self.cgroups.items()
                                         if cgroup.cpu_file is not None}, lag, pressure)
        for column in COLUMNS:
            self.rows[column] = []
        return self.fidelity

    @classmethod
    def of_cluster(cls, plan, status: dict, epoch: float,
                   root: Path = CGROUP_ROOT, clock: TimeBase = UNDILATED,
                   control=None) -> NodeSampler:
        """A sampler of a cluster's topology nodes (`plan`: its ClusterPlan; `status`: node ->
        its container's status, with `.container`), each on its container's CPU limit.

        The ZooKeeper servers the cluster adds (kind `zookeeper`: no topology node stands for
        them) are testbed machinery, not part of the experiment: they are not sampled, so the
        `nodes` table names the topology's nodes only, as the simulator's does. A coordinator
        of the topology that runs ZooKeeper is a topology node and is sampled."""
        nodes = [node for node in status if plan.containers[node].kind != "zookeeper"]
        return cls({node: status[node].container for node in nodes},
                   {node: plan.containers[node].nano_cpus / 1e9 for node in nodes}, epoch, root,
                   clock, control)

    def sample(self, now: float | None = None) -> None:
        """One row per node at host time `now` (default: this moment)."""
        now = time.time() if now is None else now
        t = (self.clock.emulated(now) if self.clock.dilated else now) - self.epoch
        rows = self.rows
        fidelity = self.fidelity
        host = fidelity.host(now) if fidelity is not None else None
        for node, cgroup in self.cgroups.items():
            why = cgroup.down()
            if why is None:
                try:
                    usage = cgroup.usage()
                except (FileNotFoundError, ProcessLookupError, ValueError):
                    why = "gone: its cgroup was removed"
            if why is not None:
                self.down.setdefault(node, f"down at t={t:.1f} s: {why}")
                self.last.pop(node, None)
                for column, value in (("t", t), ("node", node), ("cpu", 0.0),
                                      ("memory", 0.0), ("queue", 0), ("up", False)):
                    rows[column].append(value)
                if host is not None:
                    rows["host_pressure"].append(host[0])
                    rows["relay_lag"].append(host[1])
                    rows["throttled"].append(None)
                continue
            throttled = fidelity.throttled(node) if fidelity is not None else None
            if node in self.last:
                then, cpu_then = self.last[node]
                if usage.cpu_s < cpu_then:
                    cpu_then = 0.0  # restarted since the last sample: its counter began again
                rows["t"].append(t)
                rows["node"].append(node)
                rows["cpu"].append((usage.cpu_s - cpu_then)
                                   / (self.cores[node] * max(now - then, 1e-9)))
                rows["memory"].append(float(usage.memory))
                # Queues inside the agents and Mosquitto are not visible from outside.
                rows["queue"].append(0)
                rows["up"].append(True)
                if host is not None:
                    rows["host_pressure"].append(host[0])
                    rows["relay_lag"].append(host[1])
                    rows["throttled"].append(throttled)
            self.last[node] = (now, usage.cpu_s)
