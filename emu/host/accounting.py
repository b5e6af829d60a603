"""Where the host's CPU went during a run: each container, each host-side part of foglab, and
the rest of the host, adding up to the host's busy time.

An emulated run shares one host between the system it emulates and the testbed that emulates
it, so a slow figure may be the testbed's. This module takes two snapshots (the run's start
and end) and splits the CPU seconds between them:

- the run's containers, from their cgroups (emu.host.metrics.ContainerCgroup): each topology node
  (kind `emulated`: the agent, Mosquitto, the JVM; a Pi gateway's QEMU runs inside its
  container's cgroup, so the emulation of the Pi's CPU is counted with the gateway), and the
  containers the testbed adds (kind `machinery`: the ZooKeeper servers no topology node
  stands for, the agents' zygote, a swarm's link agents);
- this process's threads (kind `machinery`): the link relays' event loop (emu.cluster.relays,
  thread `relays-<cluster>`), the host controller's MQTT loop (emu.control.commands via
  emu.control.mqtt_loop, thread `mqtt-selector`), the run loop itself (the main thread: health
  polls, features' polls; `samplers_s`, timed around the samplers, splits them out), the rest
  (threads that ended, the Docker SDK's), and the process's children;
- the container engine (kind `machinery`): dockerd, containerd and the containerd-shims,
  found by name in /proc. They serve every container of the host, other people's too;
- the host's other containers (other runs, other people's tests: kind `other`), from the
  engine's parent cgroup, which keeps the CPU of containers removed meanwhile;
- the host's other processes outside containers (kind `other`), the busiest by name;
- the rest of the host (kind `other`): /proc/stat's busy time minus all of the above (the
  kernel's interrupts, processes that ended). /proc/stat counts in clock ticks (10 ms),
  cgroups in nanoseconds, and the reads take a while (`skew_s`), so over a short span the
  rest may be a little negative: kept as measured.

Within a container, `container_processes` and `process_breakdown` split its CPU by process
(the JVM against PySpark's workers on a cloud VM).

Taken only at a run's start and end (a scan of /proc and one engine listing each, 10 to 50 ms):
nothing is sampled on the run's hot path. The figures are host CPU seconds over host time,
whatever the run's dilation.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from emu.host.metrics import CGROUP_ROOT, ContainerCgroup

MACHINERY, EMULATED, OTHER = "machinery", "emulated", "other"
PROC = Path("/proc")
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
# The container engine's host processes (comm, 15 characters at most).
ENGINE = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "docker-proxy",
          "runc")
# This process's threads by name (a prefix) -> the part they are.
THREADS = {"relays-": "link relays (emu.cluster.relays)",
           "link-relays": "link relays (emu.cluster.relays)",
           "mqtt-selector": "host controller (emu.control.commands)"}
# The host's other processes are listed by name, the busiest first, this many of them.
TOP_PROCESSES = 4
RUN_LOOP = "run loop (emu.run.emulate, main thread)"
SAMPLERS = "samplers (emu.host.metrics, emu.host.fidelity)"
OTHER_THREADS = "run process, other threads"
ENGINE_PART = "container engine (dockerd, containerd, shims)"
OTHER_CONTAINERS = "other containers on the host"
CHILDREN = "run process's children"
PROCESSES = "other host processes"
REST = "rest of the host (kernel, processes that ended)"


@dataclass(frozen=True)
class Container:
    """A container of the run: its node (or `zygote`), id and kind (EMULATED, MACHINERY)."""

    node: str
    container: str
    kind: str
    what: str = ""  # e.g. "ZooKeeper (testbed)"


@dataclass
class Snapshot:
    """Cumulative CPU seconds at one moment (see the module)."""

    t: float
    host_busy: float  # the mean of /proc/stat read before and after the other counters
    containers: dict[str, float] = field(default_factory=dict)
    docker_total: float = 0.0
    engine: dict[int, float] = field(default_factory=dict)
    others: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid -> (comm, s)
    children: dict[int, float] = field(default_factory=dict)
    process: float = 0.0
    threads: dict[str, float] = field(default_factory=dict)  # part -> seconds (live threads)
    read_s: float = 0.0  # how long the reads took: the parts' skew against /proc/stat


def host_busy_s(path: Path = PROC / "stat") -> float:
    """The host's busy CPU seconds since boot, all cores: /proc/stat's first line less idle and
    iowait (guest time is inside user already)."""
    fields = path.read_text().splitlines()[0].split()[1:]
    ticks = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) * TICK_S


def _stat_cpu_s(path: Path) -> tuple[str, float] | None:
    """(comm, utime + stime in s) of a /proc/<pid>[/task/<tid>]/stat; None if gone."""
    try:
        text = path.read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return comm, (int(fields[11]) + int(fields[12])) * TICK_S


def _name(entry: Path, comm: str) -> str:
    """A process's name for a breakdown: a Python module run with -m (pyspark.daemon, the
    agent), else its command's name (java, mosquitto, busybox)."""
    try:
        argv = (entry / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return comm
    words = [word.decode(errors="replace") for word in argv if word]
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1]
    return comm


def container_processes(container: str, root: Path = CGROUP_ROOT,
                        proc: Path = PROC) -> dict[int, tuple[str, float, float]]:
    """pid -> (name, own CPU s, CPU s of its children that ended) of a container's processes
    (a Pi's are under QEMU: qemu's own time is in them)."""
    cgroup = ContainerCgroup(container, root)
    found = {}
    for line in cgroup.procs_file.read_text().split():
        entry = proc / line
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        found[int(line)] = (_name(entry, comm), (int(fields[11]) + int(fields[12])) * TICK_S,
                            (int(fields[13]) + int(fields[14])) * TICK_S)
    return found


def process_breakdown(since: Mapping[int, tuple[str, float, float]],
                      until: Mapping[int, tuple[str, float, float]]) -> dict[str, float]:
    """Name -> CPU s between two `container_processes`: a process's own, and its ended
    children's as `<name> (children)`, the busiest first."""
    found: dict[str, float] = {}
    for pid, (name, own, children) in until.items():
        then = since.get(pid, (name, 0.0, 0.0))
        found[name] = found.get(name, 0.0) + own - then[1]
        if children - then[2] > 0:
            key = f"{name} (children)"
            found[key] = found.get(key, 0.0) + children - then[2]
    return dict(sorted(found.items(), key=lambda item: -item[1]))


def _in_container(entry: Path) -> bool:
    try:
        return "/docker" in (entry / "cgroup").read_text()
    except OSError:
        return True  # gone: nothing to count


def _parent(entry: Path) -> int:
    try:
        text = (entry / "stat").read_text()
    except OSError:
        return -1
    return int(text[text.rindex(")") + 2:].split()[1])


def processes(proc: Path = PROC, names: Iterable[str] = ENGINE
              ) -> tuple[dict[int, float], dict[int, float], dict[int, tuple[str, float]]]:
    """The host's processes outside containers (whose CPU their cgroups count) and other
    than this one: the container engine's (pid -> s), this process's children (pid -> s),
    the others (pid -> (comm, s))."""
    wanted, me = set(names), os.getpid()
    engine: dict[int, float] = {}
    children: dict[int, float] = {}
    others: dict[int, tuple[str, float]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        stat = _stat_cpu_s(entry / "stat")
        if stat is None or _in_container(entry):
            continue
        pid = int(entry.name)
        if stat[0] in wanted:
            engine[pid] = stat[1]
        elif _parent(entry) == me:
            children[pid] = stat[1]
        else:
            others[pid] = stat
    return engine, children, others


def engine_cpu(proc: Path = PROC, names: Iterable[str] = ENGINE) -> dict[int, float]:
    """pid -> CPU seconds of the container engine's processes."""
    return processes(proc, names)[0]


def _thread_part(name: str) -> str | None:
    return next((part for prefix, part in THREADS.items() if name.startswith(prefix)), None)


def thread_cpu(samplers_s: float = 0.0, proc: Path = PROC) -> tuple[float, dict[str, float]]:
    """This process's CPU seconds, and its live threads' by part (THREADS, RUN_LOOP)."""
    pid = os.getpid()
    total = _stat_cpu_s(proc / str(pid) / "stat")
    parts: dict[str, float] = {}
    main = threading.main_thread().native_id
    for thread in threading.enumerate():
        stat = _stat_cpu_s(proc / str(pid) / "task" / str(thread.native_id) / "stat")
        if stat is None:
            continue
        part = RUN_LOOP if thread.native_id == main else _thread_part(thread.name)
        if part is not None:
            parts[part] = parts.get(part, 0.0) + stat[1]
    if samplers_s:
        parts[SAMPLERS] = samplers_s
    return (total[1] if total else 0.0), parts


def _docker_total(root: Path) -> float:
    for path in (root / "cpuacct" / "docker" / "cpuacct.usage",
                 root / "system.slice" / "cpu.stat", root / "docker" / "cpu.stat"):
        if path.exists():
            text = path.read_text()
            return int(text.split()[1]) / 1e6 if path.name == "cpu.stat" else int(text) / 1e9
    return 0.0


def cluster_containers(cluster) -> list[Container]:
    """A cluster's containers (emu.engines.docker.engine.Cluster), each with its kind."""
    found = []
    for status in cluster.status():
        if status.kind == "zookeeper":
            found.append(Container(status.node, status.container, MACHINERY,
                                   "ZooKeeper (testbed)"))
        else:
            found.append(Container(status.node, status.container, EMULATED, status.kind))
    zygote = getattr(cluster, "zygote", None)
    if zygote is not None:
        found.append(Container("zygote", zygote.container, MACHINERY, "agents' zygote"))
    # A swarm's link agents (emu.engines.swarm.links): the links' relays, one container per node.
    for node, container in getattr(cluster, "link_containers", {}).items():
        found.append(Container(f"link-agent@{node}", container, MACHINERY,
                               "link relays (emu.links.link_agent)"))
    return found


def snapshot(containers: Iterable[Container], samplers_s: float = 0.0,
             root: Path = CGROUP_ROOT, proc: Path = PROC) -> Snapshot:
    """Every counter now. `samplers_s`: the main thread's CPU spent sampling so far, if timed
    (time.thread_time around the samplers), to split it from the run loop.

    The reads take a while (a scan of /proc: tens of ms, more on a loaded host), during which
    the host keeps working: /proc/stat is read before and after them and its mean kept, so the
    parts and the total are skewed by at most half the reads' time per core."""
    started, busy_before = time.monotonic(), host_busy_s(proc / "stat")
    cpu = {}
    for container in containers:
        try:
            cpu[container.node] = ContainerCgroup(container.container, root).usage().cpu_s
        except (FileNotFoundError, ValueError):
            continue  # not made yet or gone: counted from 0, or with the other containers
    process, threads = thread_cpu(samplers_s, proc)
    engine, children, others = processes(proc)
    docker_total = _docker_total(root)
    busy = (busy_before + host_busy_s(proc / "stat")) / 2
    ended = time.monotonic()
    return Snapshot((started + ended) / 2, busy, cpu, docker_total, engine, others, children,
                    process, threads, ended - started)


@dataclass(frozen=True)
class Part:
    part: str
    kind: str
    cpu_s: float
    share: float = 0.0  # of the host's busy time


def parts(containers: Iterable[Container], since: Snapshot, until: Snapshot) -> list[Part]:
    """The CPU seconds of each part between two snapshots; the last is the rest of the host."""
    rows: list[tuple[str, str, float]] = []
    ours = 0.0
    for container in containers:
        if container.node not in until.containers:
            continue
        used = until.containers[container.node] - since.containers.get(container.node, 0.0)
        if used < 0:  # restarted between the snapshots: its counter began again
            used = until.containers[container.node]
        ours += used
        name = container.node + (f" [{container.what}]" if container.what else "")
        rows.append((name, container.kind, used))
    rows.append((OTHER_CONTAINERS, OTHER, max(0.0, until.docker_total - since.docker_total
                                               - ours)))
    engine = sum(cpu - since.engine.get(pid, 0.0) for pid, cpu in until.engine.items())
    rows.append((ENGINE_PART, MACHINERY, engine))
    named = 0.0
    rows.append((CHILDREN, MACHINERY, sum(cpu - since.children.get(pid, 0.0)
                                          for pid, cpu in until.children.items())))
    for part in (*dict.fromkeys(THREADS.values()), RUN_LOOP, SAMPLERS):
        if part in until.threads:
            used = until.threads[part] - since.threads.get(part, 0.0)
            if part == RUN_LOOP:  # the samplers run on the main thread
                used -= until.threads.get(SAMPLERS, 0.0) - since.threads.get(SAMPLERS, 0.0)
            named += used
            rows.append((part, MACHINERY, used))
    rows.append((OTHER_THREADS, MACHINERY,
                 max(0.0, until.process - since.process - named)))
    by_name: dict[str, float] = {}
    for pid, (comm, cpu) in until.others.items():
        then = since.others.get(pid)
        used = cpu - (then[1] if then is not None else 0.0)
        name = comm.split("/")[0] if comm.startswith(("kworker/", "ksoftirqd/")) else comm
        by_name[name] = by_name.get(name, 0.0) + used
    busiest = sorted(by_name.items(), key=lambda item: -item[1])
    for comm, cpu in busiest[:TOP_PROCESSES]:
        rows.append((f"process {comm}", OTHER, cpu))
    rows.append((PROCESSES, OTHER, sum(cpu for _, cpu in busiest[TOP_PROCESSES:])))
    busy = until.host_busy - since.host_busy
    rows.append((REST, OTHER, busy - sum(cpu for _, _, cpu in rows)))
    return [Part(name, kind, cpu, cpu / busy if busy > 0 else 0.0) for name, kind, cpu in rows]


def summary(found: list[Part], since: Snapshot, until: Snapshot,
            cores: int | None = None) -> dict:
    """The fact a run keeps (`host_cpu`): the span, the host's busy share (its load), the
    parts, and the machinery's share of the host's busy time and of the run's own CPU
    (machinery + emulated: the figure other people's load does not change)."""
    span = until.t - since.t
    cores = cores or os.cpu_count() or 1
    busy = until.host_busy - since.host_busy
    by_kind = {kind: sum(p.cpu_s for p in found if p.kind == kind)
               for kind in (MACHINERY, EMULATED, OTHER)}
    ours = by_kind[MACHINERY] + by_kind[EMULATED]
    return {"span_s": span, "cores": cores, "host_busy_s": busy,
            "skew_s": (since.read_s + until.read_s) / 2 * cores,
            "host_load": busy / (span * cores) if span > 0 else None,
            "machinery_s": by_kind[MACHINERY], "emulated_s": by_kind[EMULATED],
            "other_s": by_kind[OTHER],
            "machinery_share": by_kind[MACHINERY] / busy if busy > 0 else None,
            "machinery_share_of_run": by_kind[MACHINERY] / ours if ours > 0 else None,
            "parts": [{"part": p.part, "kind": p.kind, "cpu_s": round(p.cpu_s, 3),
                       "share": round(p.share, 4)} for p in found]}


def begin(cluster) -> tuple[list[Container], Snapshot] | None:
    """A cluster's containers and every counter, at a run's epoch; None if they cannot be
    read (the account then says so: it never fails a run)."""
    try:
        containers = cluster_containers(cluster)
        return containers, snapshot(containers)
    except (OSError, ValueError, IndexError):
        return None


def account(cluster, since: Snapshot | None, samplers_s: float = 0.0,
            containers: list[Container] | None = None) -> dict:
    """The run's `host_cpu` fact from `since` (snapshot(cluster_containers(cluster)) at the
    epoch) to now, in host seconds (the host's CPU, whatever the run's dilation). Call it
    before the agents are stopped (their cgroups go with them). A counter that cannot be read
    gives {"error": why}: the account never fails a run."""
    if since is None:
        return {"error": "the host's CPU could not be accounted: no counters at the epoch"}
    try:
        containers = containers if containers is not None else cluster_containers(cluster)
        until = snapshot(containers, samplers_s)
        return summary(parts(containers, since, until), since, until)
    except (OSError, ValueError, IndexError) as error:
        return {"error": f"the host's CPU could not be accounted: {error}"}


def table(fact: Mapping) -> list[str]:
    """The fact as aligned lines: part, kind, CPU seconds, share of the host's busy time."""
    lines = [f"{'part':48} {'kind':10} {'cpu_s':>8} {'share':>7}"]
    for row in sorted(fact["parts"], key=lambda r: -r["cpu_s"]):
        lines.append(f"{row['part'][:48]:48} {row['kind']:10} {row['cpu_s']:8.2f} "
                     f"{row['share']:7.1%}")
    load = fact.get("host_load")
    lines.append(f"host busy {fact['host_busy_s']:.1f} s over {fact['span_s']:.1f} s on "
                 f"{fact['cores']} cores (load {load if load is None else f'{load:.2f}'}); "
                 f"machinery {fact['machinery_s']:.1f} s")
    return lines
