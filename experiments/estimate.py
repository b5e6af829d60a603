"""What an experiment will cost before it runs: messages, wall time, peak memory and disk, from
its points' specs, and whether that is above what the host has (`foglab run` refuses then,
unless --yes).

The figures are estimates from constants measured on the development host (2 cores, Python
3.11; experiments/quickstart.yaml, record.messages all; /tmp probes kept in docs/experiments.md):

- SIM_S_PER_MESSAGE: the sim's wall time per reading emitted, 134 us (1 min simulated, 12,016
  readings, quiet) to 222 us (30 min, 360,154 readings, host load 6); 150 us is taken.
- PEAK_BYTES_PER_MESSAGE: what a sim run holds per reading until it ends: sim.recorder's
  MessageLog keeps every row (40 bytes in typed arrays; 48-57 measured as RSS growth while it
  runs) for the summary, whatever record.messages writes; at the end the table is built from
  it (object columns, a canonical sort, Arrow, the summary): a whole run's maxrss is 176 MB
  for 1 min (12,016 readings) and 325 MB for 30 min (360,154), 450 bytes a reading at the
  peak above BASE_BYTES.
- PARQUET_BYTES_PER_ROW: messages.parquet (zstd) of quickstart, 31 bytes a row, and
  OTHER_TABLES_BYTES for a run's other tables (nodes and links are sampled each second).

An emulation's (emu, hybrid) wall time is its duration times its dilation (run.dilation, when
a number) plus SETUP_S for the containers; its memory is the containers', not this process's,
and is not estimated here.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from experiments.backends import registered
from topologies.units import shown_duration
from workloads.rates import Constant

SIM_S_PER_MESSAGE = 150e-6
PEAK_BYTES_PER_MESSAGE = 450
BASE_BYTES = 170e6
PARQUET_BYTES_PER_ROW = 31
OTHER_TABLES_BYTES_PER_S = 400  # nodes, links: a row per node and link per sample
SETUP_S = 60.0
# Above these a run is refused (unless --yes): a share of the memory available now, the free
# space of the results folder's disk, and a wall time.
MEMORY_SHARE = 0.8
LONGEST_S = 24 * 3600.0
SHAPE_STEPS = 1000  # the grid a shaped stream's mean rate is taken over


@dataclass
class Cost:
    """An experiment's estimated cost: every point and repetition together, except memory:
    the largest single run's, as runs go one after the other (times `jobs` at once)."""

    messages: int
    wall_s: float
    memory_bytes: float
    disk_bytes: float
    runs: int

    def line(self) -> str:
        return (f"estimate: {self.runs} run(s), {self.messages:,} readings, about "
                f"{shown_duration(self.wall_s)} of wall time, {_bytes(self.memory_bytes)} of "
                f"memory at the peak, {_bytes(self.disk_bytes)} on disk")


def readings(spec, topology) -> int:
    """The readings a run's sources emit over its duration: per stream, its rate times the
    time it sends (duration - start) times its shape's mean factor, times its sources."""
    total = 0.0
    duration = spec.run.duration
    for stream in spec.workload.streams:
        sending = max(0.0, duration - stream.start)
        factor = 1.0
        if not isinstance(stream.shape, Constant) and sending > 0:
            step = sending / SHAPE_STEPS
            factor = sum(stream.shape.factor(stream.start + (i + 0.5) * step)
                         for i in range(SHAPE_STEPS)) / SHAPE_STEPS
        total += stream.rate * sending * factor * len(topology.select(stream.sources))
    return round(total)


def written_share(spec) -> float:
    """The share of the messages table a run writes (record.messages)."""
    record = spec.record.messages
    return 0.0 if record == "none" else 1.0 if record == "all" else float(record)


def estimate(points, jobs: int = 1) -> Cost:
    """The cost of every point and repetition (experiments.loader.RunPoint's)."""
    messages = wall = disk = 0.0
    peak = 0.0
    runs = 0
    for point in points:
        spec = point.spec
        count = readings(spec, point.topology)
        repetitions = spec.run.repetitions
        runs += repetitions
        messages += count * repetitions
        if registered(spec.run.backend).in_process:
            wall += count * SIM_S_PER_MESSAGE * repetitions
            peak = max(peak, BASE_BYTES + count * PEAK_BYTES_PER_MESSAGE)
        else:
            dilation = spec.run.dilation if isinstance(spec.run.dilation, int | float) else 1.0
            wall += (spec.run.duration * dilation + SETUP_S) * repetitions
        disk += (count * written_share(spec) * PARQUET_BYTES_PER_ROW
                 + spec.run.duration * OTHER_TABLES_BYTES_PER_S) * repetitions
    parallel = max(1, min(jobs, runs))
    return Cost(round(messages), wall / parallel, peak * parallel, disk, runs)


def available_memory() -> float | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def free_disk(folder: Path) -> float:
    """The free bytes of the disk `folder` is (or will be) on."""
    existing = next(p for p in (folder.absolute(), *folder.absolute().parents) if p.exists())
    return shutil.disk_usage(existing).free


def too_much(cost: Cost, out: Path, longest_s: float = LONGEST_S) -> list[str]:
    """What of the cost is above the host's bounds, each with what to change."""
    found = []
    memory = available_memory()
    if memory is not None and cost.memory_bytes > MEMORY_SHARE * memory:
        found.append(f"memory: {_bytes(cost.memory_bytes)} at the peak, above "
                     f"{MEMORY_SHARE:.0%} of the {_bytes(memory)} available; a sim run holds "
                     "every reading until it ends: shorten run.duration or lower the rates "
                     "(or fewer -j runs at once)")
    free = free_disk(out)
    if cost.disk_bytes > free:
        found.append(f"disk: {_bytes(cost.disk_bytes)} of tables, above the {_bytes(free)} "
                     f"free under {out}: record.messages a fraction (1%) or none, or a longer "
                     "run.sample")
    if cost.wall_s > longest_s:
        found.append(f"time: about {shown_duration(cost.wall_s)}, above "
                     f"{shown_duration(longest_s)}: "
                     "shorten run.duration, sweep fewer points, or -j N")
    return found


def _bytes(value: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


__all__ = ["Cost", "available_memory", "estimate", "free_disk", "readings", "too_much"]
