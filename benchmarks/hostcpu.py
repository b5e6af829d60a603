"""The benchmarks' view of where the host's CPU goes during an emulated run (emu.host.accounting).

`HostCpu` wraps emu.run.emulate's measuring span (`_during`: from the common epoch to the run's end,
before the agents stop) and the nodes' sampler while a benchmark runs experiments in this
process, and keeps one `host_cpu` fact per emulated run. It reads counters only at the span's
two ends (and times the sampler with time.thread_time, to split it from the run loop), so the
run it watches is not changed. Until emu.run.emulate keeps the fact itself
(emu.host.accounting.account), this is how the benchmarks get it.

`idle_rates` measures the agents' idle loops: the same cluster with every driver at rate 0,
each container's CPU per second; `lines` prints a breakdown with them split out.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from emu.host import accounting

IDLE_PART = "agents' idle loops (in the containers above)"
SPARK_PART = "Spark's per-batch work (in cloud-1 above)"


class HostCpu:
    """Context manager: `facts`, one per emulated run while it is open (see the module)."""

    def __init__(self) -> None:
        self.facts: list[dict] = []
        self._sampling = 0.0

    def _record(self, cluster, since, inside: dict, containers) -> None:
        fact = accounting.account(cluster, since, self._sampling, containers)
        if "error" in fact:
            print(f"hostcpu: {fact['error']}")
            return
        fact["processes"] = {node: accounting.process_breakdown(inside.get(node, {}), found)
                             for node, found in _processes(containers).items()}
        self.facts.append(fact)

    @contextlib.contextmanager
    def watching(self) -> Iterator[HostCpu]:
        import emu.run.emulate
        from emu.host.metrics import NodeSampler

        during, sample = emu.run.emulate._during, NodeSampler.sample
        hook = self

        def timed_sample(sampler, now=None):
            started = time.thread_time()
            try:
                return sample(sampler, now)
            finally:
                hook._sampling += time.thread_time() - started

        def watched_during(run, progress):
            containers = accounting.cluster_containers(run.cluster)
            since = accounting.snapshot(containers, hook._sampling)
            inside = _processes(containers)
            try:
                return during(run, progress)
            finally:
                hook._record(run.cluster, since, inside, containers)

        emu.run.emulate._during, NodeSampler.sample = watched_during, timed_sample
        try:
            yield self
        finally:
            emu.run.emulate._during, NodeSampler.sample = during, sample


def _processes(containers) -> dict[str, dict]:
    found = {}
    for container in containers:
        try:
            found[container.node] = accounting.container_processes(container.container)
        except (OSError, ValueError):
            continue
    return found


def idle_rates(fact: Mapping) -> dict[str, float]:
    """Part -> CPU seconds per second of an idle run's fact (the containers of the cluster)."""
    span = fact["span_s"] or 1.0
    return {row["part"]: row["cpu_s"] / span for row in fact["parts"]
            if row["kind"] == accounting.EMULATED}


def split(fact: Mapping, idle: Mapping[str, float] | None) -> dict[str, float]:
    """The idle loops' and Spark's per-batch CPU seconds inside a run's emulated containers:
    each container's idle rate (from `idle_rates`) times the span; Spark's, cloud-1's beyond
    its idle rate. Empty without an idle measurement."""
    if not idle:
        return {}
    span = fact["span_s"]
    rows = {row["part"]: row for row in fact["parts"] if row["kind"] == accounting.EMULATED}
    agents = sum(min(rows[p]["cpu_s"], rate * span) for p, rate in idle.items()
                 if p in rows and not p.startswith(("broker", "cloud")))
    found = {"idle_loops_s": agents}
    clouds = [p for p in rows if p.startswith("cloud")]
    if clouds:
        found["spark_batches_s"] = sum(max(0.0, rows[p]["cpu_s"] - idle.get(p, 0.0) * span)
                                       for p in clouds)
        found["spark_idle_s"] = sum(min(rows[p]["cpu_s"], idle.get(p, 0.0) * span)
                                    for p in clouds)
    return found


def lines(label: str, fact: Mapping, idle: Mapping[str, float] | None = None) -> list[str]:
    """key=value lines: per part, then the totals (machinery's share of the host and of the
    run's own CPU, the host's load) and, with `idle`, the idle loops' share."""
    out = []
    for row in sorted(fact["parts"], key=lambda r: -r["cpu_s"]):
        out.append(f"{label} part={row['part']!r} kind={row['kind']} cpu_s={row['cpu_s']:.2f} "
                   f"share={row['share']:.3f}")
    busy = fact["host_busy_s"] or 1.0
    extra = split(fact, idle)
    for key, seconds in extra.items():
        out.append(f"{label} {key}={seconds:.2f} {key.removesuffix('_s')}_share="
                   f"{seconds / busy:.3f}")
    for node, names in (fact.get("processes") or {}).items():
        if node.startswith("gw-") and node != "gw-1":
            continue  # the gateways are alike: the first stands for them
        for name, seconds in names.items():
            if seconds >= 0.05:
                out.append(f"{label} node={node} process={name!r} cpu_s={seconds:.2f}")
    share, own = fact["machinery_share"], fact["machinery_share_of_run"]
    out.append(f"{label} host_load={fact['host_load']:.2f} span_s={fact['span_s']:.1f} "
               f"host_busy_s={busy:.1f} machinery_s={fact['machinery_s']:.2f} "
               f"emulated_s={fact['emulated_s']:.2f} other_s={fact['other_s']:.2f} "
               f"machinery_share={share:.3f} machinery_share_of_run={own:.3f} "
               f"skew_s={fact.get('skew_s', 0.0):.2f}")
    if "idle_loops_s" in extra:
        with_idle = fact["machinery_s"] + extra["idle_loops_s"]
        out.append(f"{label} machinery_with_idle_loops_share={with_idle / busy:.3f} "
                   f"machinery_with_idle_loops_share_of_run="
                   f"{with_idle / (fact['machinery_s'] + fact['emulated_s']):.3f}")
    return out


def write(path: Path, facts: list[dict]) -> None:
    import json

    path.write_text(json.dumps(facts, indent=1))
