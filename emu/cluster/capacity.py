"""How many hosts an emulated run needs, how long it takes to come up, and the CPU pressure it
puts on each: the capacity planner behind `foglab emu plan` (docs/capacity.md).

Pure arithmetic over two inputs, so that it runs without Docker and in a test:

- the cluster's plan (emu.cluster.plan: what becomes a container, its site's network, its
  image and role);
- each container's predicted CPU demand at K = 1 in host cores, with the testbed's own parts
  (`relays`, `engine`): the calibrated model's prediction, experiments.dilation's
  `predicted_demand`, the same figures `run.dilation: auto` reads. emu imports neither sim nor
  the experiment layer, so the caller hands the demand in (the CLI through
  emu.cli.main.use_demand).

Placement, as Docker Swarm will place the services (by node labels, a site pinned to a node):
a site is kept together on one host where it fits (sites by demand, largest first, each on the
first host with room: the CPU budget TARGET_PRESSURE x cores x K and the memory); a site that
fits on no host whole is split, its containers placed first-fit decreasing by demand; a
container that fits nowhere goes to the host of least pressure (it is then over the budget,
and the plan says so). The relays' CPU follows the agents (each node's link agent shapes the
connections of the containers on it), the engine's is paid on every host.

Pressure is a host's demand over its cores at the run's dilation K (K times the host's time
per emulated second: demand / (K x cores)). TARGET_PRESSURE is the bound `auto` dilation keeps
(experiments.dilation imports it from here: one constant). `hosts_needed` is the fewest hosts
of the given size on which every host stays within it at K (with `auto`, at K = 1: the hosts
that would run it in real time); None when one container alone is beyond it (only a larger K
helps). Memory is what the containers hold resident, not their
limits (Docker does not reserve a limit: 200 Pi 4 gateways are 800 GiB of limits and 4 GiB
resident): per role, measured with `docker stats` on the smart city here (RESIDENT below).

Start-up: the engine's CPU per container (emu.engines.docker.engine: about 0.5 s on a user-defined
network, 0.2 s for an agent the zygote forks, 1.1 s for the zygote itself, a QEMU agent
started afresh) over the host's cores, the hosts starting in parallel: a lower bound, as the
services' own start (ZooKeeper's JVM) overlaps it.

A plan that cannot fit is refused (CapacityRefused, naming the figures): memory beyond a host's
on the hosts given, or a host predicted beyond its cores (pressure above 1) at a fixed K.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workloads.operator_engines import operator_engine

if TYPE_CHECKING:
    from emu.cluster.plan import ClusterPlan, ContainerPlan

TARGET_PRESSURE = 0.5
SATURATED = 1.0
GIB = 1024**3
MIB = 1024**2
# The engine's CPU seconds to start one container (emu.engines.docker.engine's docstring).
START_CPU_S = 0.5
START_FORKED_S = 0.2
START_ZYGOTE_S = 1.1
# Resident memory per container (docker stats, smart city on the 2-core host, 2026-11-28:
# a forked gateway 16-18 MiB, an idle cloud agent 14 MiB, ZooKeeper 51 MiB young, Mosquitto
# 1.6 MiB, the zygote 45 MiB), rounded up; a Spark job's JVM and Python workers on top of
# its cloud VM's agent (local mode: docs/host-cpu.md).
RESIDENT = {"gateway": 24 * MIB, "agent": 48 * MIB, "broker": 8 * MIB,
            "zookeeper": 160 * MIB, "idle": 4 * MIB}
SPARK_RESIDENT = 768 * MIB
# The zygote's own: its warm interpreter (42 MiB) and about 0.65 MiB a gateway it forked, the
# pages it writes after each fork (emu.engines.docker.zygote; 79 MiB with 60 gateways, 2026-12-06),
# rounded up.
ZYGOTE_RESIDENT = 48 * MIB
ZYGOTE_RESIDENT_PER_AGENT = MIB


def zygote_resident(forked: int) -> int:
    """The resident memory of a host's zygote that forked `forked` agents (none: no zygote)."""
    return ZYGOTE_RESIDENT + ZYGOTE_RESIDENT_PER_AGENT * forked if forked else 0
TESTBED = ("relays", "engine")
# The hard cap on the containers one host takes (host_cap), refused before anything starts.
# Each container costs the host more than its own processes: its containerd-shim (3 MiB
# proportional set, 11-12 threads: /proc here, 2026-12-06) and the engine's and the kernel's
# state for it (its network namespace, veth, cgroups: put at 1 MiB, not measured apart), in
# ENGINE_RESIDENT; and
# its pids at work (pids.current, measured on the quickstart at 40 s: a gateway's agent 8-9,
# a cloud VM's agent with its Spark job 164, ZooKeeper 24, RabbitMQ 26, Mosquitto 1).
ENGINE_RESIDENT = 4 * MIB
ENGINE_PIDS = 12
PIDS = {"gateway": 10, "agent": 10, "broker": 32, "zookeeper": 32, "idle": 1}
SPARK_PIDS = 192
ZYGOTE_PIDS = 8
# A Linux bridge has at most 1024 ports (BR_MAX_PORTS), port 0 never used: the containers a
# site's network holds.
BRIDGE_PORTS = 1023
# What the host keeps for itself: its own processes, the engine, the relays. The cap is the
# host's hard limit, not a comfortable load (the planner's pressure says that): RESIDENT is
# already rounded up from what was measured.
HOST_RESERVE = 0.1


class CapacityRefused(ValueError):
    """The experiment does not fit on the hosts given; the message names the figures."""


@dataclass(frozen=True)
class Host:
    """One host of the plan: its containers, their demand (host cores at K = 1) and memory."""

    index: int
    containers: tuple[str, ...]
    sites: tuple[str, ...]
    demand: float
    memory: int
    cores: float
    dilation: float
    start_s: float

    @property
    def pressure(self) -> float:
        return self.demand / (self.dilation * self.cores)


@dataclass(frozen=True)
class CapacityPlan:
    hosts: list[Host]
    cores: float
    memory: int
    dilation: float
    asked: float | str
    hosts_needed: int | None
    demand: dict[str, float] = field(default_factory=dict)

    @property
    def total_demand(self) -> float:
        return sum(h.demand for h in self.hosts)

    @property
    def max_pressure(self) -> float:
        return max(h.pressure for h in self.hosts)

    @property
    def start_s(self) -> float:
        return max(h.start_s for h in self.hosts)

    @property
    def saturated(self) -> bool:
        """Beyond the bound `auto` keeps: the emulated figures start to be the testbed's."""
        return self.max_pressure > TARGET_PRESSURE + 1e-9

    def figures(self) -> dict[str, object]:
        """The plan as key -> value (`--plain`, the run's facts)."""
        found: dict[str, object] = {
            "hosts": len(self.hosts), "cores": self.cores,
            "memory_gib": round(self.memory / GIB, 2), "dilation": self.dilation,
            "predicted_cores": round(self.total_demand, 3),
            "max_pressure": round(self.max_pressure, 3),
            "target_pressure": TARGET_PRESSURE,
            "hosts_needed": self.hosts_needed if self.hosts_needed is not None else "none",
            "startup_s": round(self.start_s, 1), "saturated": str(self.saturated).lower()}
        for host in self.hosts:
            found[f"host{host.index}"] = (
                f"containers={len(host.containers)} cores={host.demand:.3f} "
                f"pressure={host.pressure:.3f} memory_gib={host.memory / GIB:.2f} "
                f"startup_s={host.start_s:.1f}")
        return found


@dataclass
class _Item:
    name: str
    site: str
    demand: float
    memory: int
    start_s: float
    agent: bool
    forked: bool


def resident(container: ContainerPlan) -> int:
    """What a container holds resident, by role (RESIDENT; an agent with a Spark job more)."""
    if container.role == "agent":
        base = RESIDENT["gateway"] if _forked(container) else RESIDENT["agent"]
        return base + _jvm_jobs(container) * SPARK_RESIDENT
    return RESIDENT.get(container.role, RESIDENT["idle"])


def _jvm_jobs(container: ContainerPlan) -> int:
    """How many of an agent's operators run a job on a JVM beside it (Spark's), each with the
    JVM's memory and threads."""
    return sum(1 for op in container.agent.operators if operator_engine(op.engine).jvm)


def _forked(container: ContainerPlan) -> bool:
    from emu.images import GATEWAY

    return container.role == "agent" and container.image == GATEWAY


def _items(cluster: ClusterPlan, demand: Mapping[str, float]) -> list[_Item]:
    items = []
    for name, container in cluster.containers.items():
        forked = _forked(container)
        items.append(_Item(name, container.segment, float(demand.get(name, 0.0)),
                           resident(container), START_FORKED_S if forked else START_CPU_S,
                           container.role == "agent", forked))
    return items


def auto_dilation(demand: float, cores: float) -> float:
    """`auto`'s K for a host of `cores` whose containers need `demand` host cores at K = 1:
    the smallest multiple of 1/2 (at least 1) that keeps the demand within TARGET_PRESSURE of
    the cores. The one formula: experiments.dilation's choice and the capacity planner's."""
    return max(1.0, math.ceil(2 * demand / (TARGET_PRESSURE * cores) - 1e-9) / 2)


def _dilation(asked: float | str, busiest: float, cores: float) -> float:
    """The run's K: a number as it is; `auto` for the busiest host."""
    if isinstance(asked, str):
        return auto_dilation(busiest, cores)
    return float(asked)


class _Bins:
    """Hosts being filled: per host its items, demand and memory."""

    def __init__(self, hosts: int, budget: float, memory: int, base: float):
        self.items: list[list[_Item]] = [[] for _ in range(hosts)]
        self.demand = [base] * hosts
        self.memory = [0] * hosts
        self.budget, self.limit = budget, memory

    def fits(self, i: int, demand: float, memory: int) -> bool:
        return (self.demand[i] + demand <= self.budget + 1e-9
                and self.memory[i] + memory <= self.limit)

    def put(self, i: int, items: list[_Item]) -> None:
        self.items[i] += items
        self.demand[i] += sum(it.demand for it in items)
        self.memory[i] += sum(it.memory for it in items)

    def first(self, demand: float, memory: int) -> int | None:
        return next((i for i in range(len(self.items)) if self.fits(i, demand, memory)), None)


def _place(items: list[_Item], hosts: int, budget: float, memory: int,
           base: float) -> tuple[_Bins, bool]:
    """Sites whole where they fit, first-fit decreasing for the rest; whether all fitted."""
    bins = _Bins(hosts, budget, memory, base)
    sites: dict[str, list[_Item]] = {}
    for item in items:
        sites.setdefault(item.site, []).append(item)
    ordered = sorted(sites.items(), key=lambda kv: (-sum(i.demand for i in kv[1]), kv[0]))
    loose: list[_Item] = []
    for _, members in ordered:
        where = bins.first(sum(i.demand for i in members), sum(i.memory for i in members))
        if where is None:
            loose += members
        else:
            bins.put(where, members)
    fitted = True
    for item in sorted(loose, key=lambda i: (-i.demand, -i.memory, i.name)):
        where = bins.first(item.demand, item.memory)
        if where is None:
            fitted = False
            room = [i for i in range(hosts) if bins.memory[i] + item.memory <= memory]
            where = min(room or range(hosts), key=lambda i: (bins.demand[i], i))
        bins.put(where, [item])
    return bins, fitted


def _hosts(bins: _Bins, engine: float, cores: float, dilation: float) -> list[Host]:
    found = []
    for i, items in enumerate(bins.items):
        start = sum(it.start_s for it in items) + (
            START_ZYGOTE_S if any(it.forked for it in items) else 0.0)
        memory = bins.memory[i] + zygote_resident(sum(it.forked for it in items))
        found.append(Host(i + 1, tuple(it.name for it in items),
                          tuple(dict.fromkeys(it.site for it in items)),
                          sum(it.demand for it in items) + engine, memory, cores,
                          dilation, start / cores))
    return found


def _with_relays(items: list[_Item], relays: float) -> list[_Item]:
    """The relays follow the agents (each node's link agent shapes its own containers'
    connections): each agent carries an equal share of their CPU as its own demand."""
    agents = sum(1 for it in items if it.agent)
    share = relays / agents if agents else 0.0
    return [_Item(it.name, it.site, it.demand + (share if it.agent else 0.0), it.memory,
                  it.start_s, it.agent, it.forked) for it in items]


def _needed(items: list[_Item], engine: float, cores: float, memory: int,
            dilation: float) -> int | None:
    """The fewest hosts on which every host stays within TARGET_PRESSURE at `dilation`."""
    budget = TARGET_PRESSURE * cores * dilation
    if any(it.demand + engine > budget + 1e-9 for it in items):
        return None
    for hosts in range(1, len(items) + 1):
        _, fitted = _place(items, hosts, budget, memory, engine)
        if fitted:
            return hosts
    return None


def plan_capacity(cluster: ClusterPlan, demand: Mapping[str, float], hosts: int = 1,
                  cores: float = 2.0, memory: int = 8 * GIB,
                  dilation: float | str = 1.0) -> CapacityPlan:
    """Place the cluster's containers on `hosts` hosts of `cores` cores and `memory` bytes each
    and predict each host's CPU pressure at the run's dilation (a number, or `auto`), the
    start-up time and the hosts needed; raise CapacityRefused when it cannot fit."""
    if hosts < 1 or not cores > 0 or memory <= 0:
        raise ValueError(f"hosts, cores and memory above 0, got {hosts}, {cores:g}, {memory}")
    engine = float(demand.get("engine", 0.0))
    items = _with_relays(_items(cluster, demand), float(demand.get("relays", 0.0)))
    _check_memory(items, hosts, memory)
    # First at K = 1 with the K = 1 budget, for `auto` to see the busiest host.
    budget = TARGET_PRESSURE * cores * (1.0 if isinstance(dilation, str) else float(dilation))
    bins, _ = _place(items, hosts, budget, memory, engine)
    busiest = max(h.demand for h in _hosts(bins, engine, cores, 1.0))
    k = _dilation(dilation, busiest, cores)
    placed = _hosts(bins, engine, cores, k)
    # `auto`: the hosts that would run it in real time (K = 1); a number: at that K.
    needed_at = 1.0 if isinstance(dilation, str) else k
    plan = CapacityPlan(placed, cores, memory, k, dilation,
                        _needed(items, engine, cores, memory, needed_at), dict(demand))
    over = [h for h in placed if h.memory > memory]
    if over:
        host = over[0]
        raise CapacityRefused(
            f"host {host.index} needs {host.memory / GIB:.2f} GiB of memory for its "
            f"{len(host.containers)} containers; {hosts} host(s) of {memory / GIB:.2f} GiB "
            "cannot hold the sites placed: add --hosts or --memory")
    if not isinstance(dilation, str) and plan.max_pressure > SATURATED:
        host = max(placed, key=lambda h: h.pressure)
        raise CapacityRefused(
            f"host {host.index} needs {host.demand:.2f} cores at K={k:g} and has {cores:g}: "
            f"pressure {host.pressure:.2f} > {SATURATED:g} ({hosts} host(s), "
            f"{plan.total_demand:.2f} cores in all; hosts needed at pressure "
            f"{TARGET_PRESSURE:g}: {plan.hosts_needed or 'none at this K'}): add --hosts, or "
            "dilate (run.dilation=auto)")
    return plan


def _check_memory(items: list[_Item], hosts: int, memory: int) -> None:
    # at least one zygote, on the host of the first forked agent
    total = sum(it.memory for it in items) + zygote_resident(sum(it.forked for it in items))
    largest = max(items, key=lambda it: it.memory, default=None)
    if largest is not None and largest.memory > memory:
        raise CapacityRefused(
            f"{largest.name} needs {largest.memory / GIB:.2f} GiB of memory, more than a host's "
            f"{memory / GIB:.2f} GiB")
    if total > hosts * memory:
        raise CapacityRefused(
            f"needs {total / GIB:.2f} GiB of memory for {len(items)} containers; {hosts} "
            f"host(s) of {memory / GIB:.2f} GiB have {hosts * memory / GIB:.2f} GiB")


def plan_experiment(topology, workload, pipeline, seed: int, demand: Mapping[str, float],
                    hosts: int = 1, cores: float = 2.0, memory: int = 8 * GIB,
                    dilation: float | str = 1.0) -> CapacityPlan:
    """plan_capacity for an experiment's topology, workload and pipeline: its containers as
    emu.cluster.plan makes them for the run (agents with their drivers and operators)."""
    from emu.cluster.deployment import agent_configs
    from emu.cluster.plan import plan_cluster

    agents = agent_configs(topology, workload, pipeline, seed, 0.0)
    cluster = plan_cluster(topology, "plan", agents=agents,
                           host_cpus=max(1, math.floor(cores)))
    return plan_capacity(cluster, demand, hosts, cores, memory, dilation)


def host_memory() -> int:
    """This host's memory in bytes."""
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass(frozen=True)
class HostCap:
    """How many containers this host takes (`cap`), and what bounds it: the host's memory
    (less HOST_RESERVE) over a container's (its resident memory by role, RESIDENT, plus the
    engine's ENGINE_RESIDENT), and the pids free under the kernel's pid_max over a
    container's (PIDS plus its shim's ENGINE_PIDS). The plan's own mix of containers sets the
    per-container figures (their mean)."""

    containers: int
    memory: int
    per_container_memory: float
    pids_free: int
    per_container_pids: float
    largest_network: tuple[str, int] = ("", 0)

    @property
    def by_memory(self) -> int:
        return int(self.memory * (1 - HOST_RESERVE) // self.per_container_memory)

    @property
    def by_pids(self) -> int:
        return int(self.pids_free // self.per_container_pids)

    @property
    def cap(self) -> int:
        return min(self.by_memory, self.by_pids)

    def refusal(self) -> str | None:
        """Why the host cannot take the plan, with the figures; None when it can."""
        network, members = self.largest_network
        if self.containers <= self.cap:
            if members > BRIDGE_PORTS:
                return (f"network {network} would hold {members} containers; a Linux bridge "
                        f"holds at most {BRIDGE_PORTS}: spread the nodes over more sites")
            return None
        return (f"the experiment asks for {self.containers} containers on this host, which "
                f"takes at most {self.cap}: by memory {self.by_memory} "
                f"({self.memory / GIB:.1f} GiB, {HOST_RESERVE:.0%} kept for the host, at "
                f"{self.per_container_memory / MIB:.0f} MiB a container: its resident memory "
                f"and the engine's {ENGINE_RESIDENT // MIB} MiB), by pids {self.by_pids} "
                f"({self.pids_free} free under kernel.pid_max, at "
                f"{self.per_container_pids:.0f} a container with its shim's): make the "
                "topology smaller, or spread it over several hosts (run.engine swarm)")


def pids_at_work(container: ContainerPlan) -> int:
    """The processes and threads a container holds at work, by role (PIDS; Spark's more)."""
    if container.role == "agent":
        return PIDS["agent"] + _jvm_jobs(container) * SPARK_PIDS
    return PIDS.get(container.role, PIDS["idle"])


def host_cap(cluster: ClusterPlan, memory: int | None = None,
             pids_free: int | None = None) -> HostCap:
    """The cap on containers for this host (its memory and free pids unless given) and the
    plan's figures against it."""
    containers = list(cluster.containers.values())
    count = max(1, len(containers))
    forked = sum(1 for c in containers if _forked(c))
    memory_each = (sum(resident(c) for c in containers) + zygote_resident(forked)
                   ) / count + ENGINE_RESIDENT
    pids_each = (sum(pids_at_work(c) for c in containers) + (ZYGOTE_PIDS if forked else 0)
                 ) / count + ENGINE_PIDS
    members: dict[str, int] = {}
    for container in containers:
        members[container.network] = members.get(container.network, 0) + 1
    largest = max(members.items(), key=lambda kv: kv[1], default=("", 0))
    return HostCap(len(containers), host_memory() if memory is None else memory, memory_each,
                   free_pids() if pids_free is None else pids_free, pids_each, largest)


def check_host_cap(cluster: ClusterPlan) -> HostCap:
    """Refuse (CapacityRefused, with the figures) a plan this host cannot take."""
    cap = host_cap(cluster)
    if (why := cap.refusal()) is not None:
        raise CapacityRefused(f"cluster {cluster.cluster}: {why}")
    return cap


def host_threads(proc: str = "/proc") -> int:
    """The threads (kernel scheduling entities) that exist on this host now: /proc/loadavg's
    fourth field, runnable/existing, one read the kernel makes whole. Walking
    /proc/<pid>/task/ instead races every process that ends during the walk (its task
    directory is gone when listed: a FileNotFoundError, not a count), which a busy host does
    all the time."""
    from pathlib import Path

    return int(Path(proc, "loadavg").read_text().split()[3].split("/")[1])


def free_pids(proc: str = "/proc") -> int:
    """The pids the kernel can still hand out: pid_max less the threads that exist now."""
    from pathlib import Path

    limit = int(Path(proc, "sys/kernel/pid_max").read_text())
    return max(0, limit - host_threads(proc))
