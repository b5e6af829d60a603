"""The emulation's own fidelity: what on the host could distort a run's figures, sampled with
the `nodes` table and judged per run.

An emulated run measures real processes in real time on a shared host, so a slow figure has two
possible causes: the system under test is slow, or the testbed was overloaded. Three things
tell them apart, sampled every `run.sample` with the nodes (emu.host.metrics.NodeSampler):

- `host_pressure`: the host's CPU pressure over the interval. With the kernel's pressure stall
  information (`/proc/pressure/cpu`), the share of the interval in which some runnable task
  waited for a CPU: the delta of its `some total` counter, exact over any interval (its
  `avg10` is a decaying average that would smear ten seconds over each sample). Without it,
  the run queue beyond the host's cores as a share of the runnable tasks, at the sample
  (/proc/stat `procs_running`). The manifest says which (`pressure_source`).
- `relay_lag`: how late the link relays' timers fired in the interval, the largest lateness
  seen (s; emu.cluster.relays.RelaySet.lag). Every relayed chunk is delivered by a timer on
  that one event loop, so this is how late a chunk due then reached its node, beyond the
  shaped delay. Null where no relay runs (netem shapes in the kernel).
- `throttled`: the share of the container's CPU enforcement periods in which its cgroup's CPU
  limit (the node's cores) held it back (cpu.stat `nr_throttled / nr_periods`).

`assess` turns these columns into a verdict for the manifest (`facts.fidelity`): the share of
the run during which the host was saturated, with the reasons in words ("host saturated: CPU
pressure 62% for 40% of the run"), the spans of time concerned, and the nodes held at their
CPU limit. `foglab run`, `results show` and `compare` print it beside the figures.
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PRESSURE_FILE = Path("/proc/pressure/cpu")
STAT_FILE = Path("/proc/stat")

# A sample is saturated when runnable tasks waited for a CPU for at least this share of it...
SATURATED_PRESSURE = 0.5
# ...or the relays' timers were this late (s): the relay's own precision is 1 ms.
SATURATED_LAG_S = 0.010
# A node is held at its CPU limit in a sample when throttled in this share of its periods.
THROTTLED_SHARE = 0.2
# A run's figures are marked when this share of its samples was saturated (or a node throttled).
MARK_SHARE = 0.05

# The testbed's machinery (emu.host.accounting's `host_cpu` fact) distorts a run when it takes more
# than this share of the run's own CPU (machinery + emulated system): issue 27's bound.
MACHINERY_SHARE = 0.10
# ... and when it is busy enough to compete with the system at all (cores, over the run's span):
# a light run's relays at a third of its small CPU took 0.1 s in 20 s, which distorts nothing.
MACHINERY_MIN_CORES = 0.05

COLUMNS = ("host_pressure", "relay_lag", "throttled")


class HostPressure:
    """The host's CPU pressure per interval between calls of `sample` (see the module)."""

    def __init__(self, pressure_file: Path = PRESSURE_FILE, stat_file: Path = STAT_FILE,
                 cores: int | None = None):
        self.pressure_file = pressure_file
        self.stat_file = stat_file
        self.cores = cores or os.cpu_count() or 1
        self.source = "psi" if self._stall_us() is not None else "run queue"
        self._last: tuple[float, float] | None = None  # (time, stall µs)

    def _stall_us(self) -> float | None:
        try:
            text = self.pressure_file.read_text()
        except OSError:  # no PSI in this kernel (or it is turned off: EOPNOTSUPP)
            return None
        for line in text.splitlines():
            if line.startswith("some "):
                fields = dict(part.split("=", 1) for part in line.split()[1:])
                return float(fields["total"])
        return None

    def _run_queue(self) -> float:
        for line in self.stat_file.read_text().splitlines():
            if line.startswith("procs_running "):
                running = int(line.split()[1])
                return max(0, running - self.cores) / running if running else 0.0
        raise ValueError(f"{self.stat_file} has no procs_running line")

    def sample(self, now: float) -> float | None:
        """The pressure since the last call (None on the first, with PSI: no interval yet)."""
        if self.source == "run queue":
            return self._run_queue()
        stall = self._stall_us()
        last, self._last = self._last, (now, stall) if stall is not None else None
        if last is None or stall is None or now <= last[0]:
            return None
        return min(1.0, max(0.0, (stall - last[1]) / 1e6 / (now - last[0])))


@dataclass(frozen=True)
class Throttling:
    """A cgroup's CPU enforcement counters: periods with a limit, those throttled, and the
    time throttled (s)."""

    periods: int
    throttled: int
    throttled_s: float


def throttle_file(cpu_file: Path) -> Path | None:
    """A container's cpu.stat with the throttling counters, from the file its CPU use is read
    from (emu.host.metrics.ContainerCgroup.cpu_file): the same file under cgroup v2; under v1 the
    `cpu` controller's cpu.stat beside the `cpuacct` one's usage. None if there is none."""
    if cpu_file.name == "cpu.stat":
        return cpu_file
    parts = cpu_file.parent.parts
    if "cpuacct" not in parts:
        return None
    at = len(parts) - 1 - parts[::-1].index("cpuacct")
    candidate = Path(*parts[:at], "cpu", *parts[at + 1:], "cpu.stat")
    return candidate if candidate.exists() else None


def read_throttling(path: Path) -> Throttling:
    """cpu.stat's counters: `throttled_usec` (v2) or `throttled_time` in ns (v1)."""
    fields = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            fields[key] = int(value)
    if "nr_periods" not in fields or "nr_throttled" not in fields:
        raise ValueError(f"{path} has no nr_periods and nr_throttled")
    seconds = (fields["throttled_usec"] / 1e6 if "throttled_usec" in fields
               else fields.get("throttled_time", 0) / 1e9)
    return Throttling(fields["nr_periods"], fields["nr_throttled"], seconds)


class FidelitySampler:
    """Per sample of the nodes: the host's pressure and the relays' lag (one value for all
    nodes), and each node's throttled share since the last sample.

    `cpu_files`: node -> its cgroup's CPU file (emu.host.metrics.ContainerCgroup.cpu_file);
    `lag`: a callable giving the relays' largest timer lateness since its last call (None
    without relays)."""

    def __init__(self, cpu_files: Mapping[str, Path],
                 lag: Callable[[], float | None] | None = None,
                 pressure: HostPressure | None = None):
        self.files = {node: throttle_file(path) for node, path in cpu_files.items()}
        self.lag = lag
        self.pressure = pressure or HostPressure()
        self._last: dict[str, Throttling] = {}

    def host(self, now: float) -> tuple[float | None, float | None]:
        """(host_pressure, relay_lag) since the last call."""
        return self.pressure.sample(now), self.lag() if self.lag is not None else None

    def throttled(self, node: str) -> float | None:
        """The node's throttled share of its CPU periods since the last call; None the first
        time, or without a readable cpu.stat; 0 without a limit (no periods)."""
        path = self.files.get(node)
        if path is None:
            return None
        try:
            now = read_throttling(path)
        except (OSError, ValueError):
            self._last.pop(node, None)
            return None
        then, self._last[node] = self._last.get(node), now
        if then is None:
            return None
        if now.periods < then.periods:  # the container restarted: its counters began again
            then = Throttling(0, 0, 0.0)
        periods = now.periods - then.periods
        return (now.throttled - then.throttled) / periods if periods else 0.0

    def facts(self) -> dict:
        return {"pressure_source": self.pressure.source, "relay_lag": self.lag is not None,
                "throttling": sorted(n for n, path in self.files.items() if path is not None)}


def _finite(values: Sequence) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(float(v))]


def _spans(times: list[float], flags: list[bool], sample: float) -> list[list[float]]:
    """Merged [start, end] spans of the samples flagged: a sample covers the time since the
    one before it (the first, `sample` seconds)."""
    spans: list[list[float]] = []
    previous = None
    for t, flag in zip(times, flags, strict=True):
        start, previous = (t - sample if previous is None else previous), t
        if not flag:
            continue
        start = max(0.0, round(start, 3))
        if spans and start <= spans[-1][1] + 1e-6:
            spans[-1][1] = round(t, 3)
        else:
            spans.append([start, round(t, 3)])
    return spans


def _stats(values: list[float]) -> dict | None:
    return {"mean": sum(values) / len(values), "max": max(values)} if values else None


def machinery_reason(host_cpu: Mapping | None) -> str | None:
    """Why the testbed's own CPU is worth a doubt, from emu.host.accounting's fact (None: it is
    not, or there is no fact): its share of the run's CPU over MACHINERY_SHARE, with the
    busiest machinery part, unless it took under MACHINERY_MIN_CORES of the host."""
    if not host_cpu or host_cpu.get("machinery_share_of_run") is None:
        return None
    share = host_cpu["machinery_share_of_run"]
    if share <= MACHINERY_SHARE:
        return None
    span, machinery = host_cpu.get("span_s"), host_cpu.get("machinery_s")
    if span and machinery is not None and machinery / span < MACHINERY_MIN_CORES:
        return None
    parts = [p for p in host_cpu.get("parts", []) if p.get("kind") == "machinery"]
    top = max(parts, key=lambda p: p["cpu_s"], default=None)
    return (f"testbed machinery took {share:.0%} of the run's CPU"
            + (f" (most: {top['part']}, {top['cpu_s']:.1f} s)" if top else ""))


def assess(nodes: Mapping[str, Sequence], sample: float, facts: Mapping | None = None,
           host_cpu: Mapping | None = None) -> dict:
    """The run's fidelity from its `nodes` columns (t, node, up and the COLUMNS): statistics
    of each measure, the share of samples in which the host was saturated, `saturated_spans`
    ([start, end] seconds since the epoch), the nodes held at their CPU limit, and `marked`
    with `reasons` when the figures should be read with them. `facts`: the sampler's own
    (FidelitySampler.facts), kept in the result. `host_cpu`: emu.host.accounting's fact, if
    taken: its machinery share is kept (`machinery_share_of_run`) and marks the run over
    MACHINERY_SHARE."""
    times = [float(t) for t in nodes.get("t", [])]
    measured = all(column in nodes for column in COLUMNS)
    result: dict = {**(facts or {}), "samples": 0, "host_pressure": None, "relay_lag_s": None,
                    "saturated_share": 0.0, "saturated_spans": [], "throttled_nodes": {},
                    "marked": False, "reasons": []}
    if not times or not measured:
        if not measured:
            result["reasons"] = ["the nodes table has no fidelity columns (a run of a "
                                 "version that did not sample them)"]
        return result
    # Host values repeat on every node's row of a sample: one per time.
    by_time: dict[float, tuple] = {}
    per_node: dict[str, list[tuple[float, float]]] = {}
    for t, node, up, pressure, lag, throttled in zip(
            times, nodes["node"], nodes.get("up", [True] * len(times)), nodes["host_pressure"],
            nodes["relay_lag"], nodes["throttled"], strict=True):
        by_time.setdefault(t, (pressure, lag))
        if up and throttled is not None and not math.isnan(float(throttled)):
            per_node.setdefault(str(node), []).append((t, float(throttled)))
    order = sorted(by_time)
    pressures = [by_time[t][0] for t in order]
    lags = [by_time[t][1] for t in order]
    pressure_values, lag_values = _finite(pressures), _finite(lags)
    hot_pressure = [v is not None and not math.isnan(v) and v >= SATURATED_PRESSURE
                    for v in pressures]
    hot_lag = [v is not None and not math.isnan(v) and v >= SATURATED_LAG_S for v in lags]
    saturated = [a or b for a, b in zip(hot_pressure, hot_lag, strict=True)]
    count = len(order)
    result.update(samples=count, host_pressure=_stats(pressure_values),
                  relay_lag_s=_stats(lag_values),
                  saturated_share=sum(saturated) / count,
                  saturated_spans=_spans(order, saturated, sample))
    reasons = []
    if sum(hot_pressure) / count >= MARK_SHARE:
        during = [v for v, hot in zip(pressures, hot_pressure, strict=True) if hot]
        reasons.append(f"host saturated: CPU pressure {sum(during) / len(during):.0%} for "
                       f"{sum(hot_pressure) / count:.0%} of the run")
    if sum(hot_lag) / count >= MARK_SHARE:
        reasons.append(f"link relays late: timers up to {max(lag_values) * 1000:.0f} ms late, "
                       f"over {SATURATED_LAG_S * 1000:.0f} ms for {sum(hot_lag) / count:.0%} "
                       "of the run")
    for node, rows in sorted(per_node.items()):
        held = [share for _, share in rows if share >= THROTTLED_SHARE]
        if rows and len(held) / len(rows) >= MARK_SHARE:
            reason = (f"{node} at its CPU limit: throttled in {sum(held) / len(held):.0%} "
                      f"of its CPU periods for {len(held) / len(rows):.0%} of the run")
            result["throttled_nodes"][node] = {
                "share_of_run": len(held) / len(rows),
                "throttled_mean": sum(share for _, share in rows) / len(rows), "reason": reason}
            reasons.append(reason)
    if host_cpu:
        result["machinery_share_of_run"] = host_cpu.get("machinery_share_of_run")
        if reason := machinery_reason(host_cpu):
            reasons.append(reason)
    result["reasons"] = reasons
    result["marked"] = bool(reasons)
    return result


def saturated_at(times: Sequence[float], spans: Sequence[Sequence[float]]) -> list[bool]:
    """Whether each time falls in one of the spans (from `assess`)."""
    starts = [span[0] for span in spans]
    found = []
    for t in times:
        i = bisect.bisect_right(starts, t) - 1
        found.append(i >= 0 and t <= spans[i][1])
    return found
