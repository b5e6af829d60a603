"""CPU and memory of running containers, read from their cgroups (v1 or v2) without the engine.

`docker stats` takes about a second per container and call; the cgroup files the engine reads
take microseconds, so a run of hundreds of containers can sample them every second.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Usage:
    cpu_s: float        # CPU seconds used since the container started
    memory: int         # bytes in use now


def _first(candidates: list[Path]) -> Path | None:
    return next((path for path in candidates if path.exists()), None)


class ContainerCgroup:
    """A container's cgroup files: the cgroupfs (docker/<id>) or systemd (docker-<id>.scope)
    layouts, under cgroup v1 (cpuacct, memory) or v2 (unified)."""

    def __init__(self, container_id: str, root: Path = CGROUP_ROOT):
        names = [f"docker/{container_id}", f"system.slice/docker-{container_id}.scope"]
        self.cpu_file = _first([root / "cpuacct" / n / "cpuacct.usage" for n in names]
                               + [root / n / "cpu.stat" for n in names])
        self.memory_file = _first([root / "memory" / n / "memory.usage_in_bytes" for n in names]
                                  + [root / n / "memory.current" for n in names])
        if self.cpu_file is None or self.memory_file is None:
            raise FileNotFoundError(f"no cgroup found for container {container_id[:12]} "
                                    f"under {root}")

    def usage(self) -> Usage:
        text = self.cpu_file.read_text()
        if self.cpu_file.name == "cpu.stat":  # v2: usage_usec <n> on the first line
            cpu_s = int(text.split()[1]) / 1e6
        else:  # v1: nanoseconds
            cpu_s = int(text) / 1e9
        return Usage(cpu_s, int(self.memory_file.read_text()))


class NodeSampler:
    """Samples a set of containers: per node, CPU as a fraction of its cores since the last
    sample, and memory in bytes, as the simulator's `nodes` table has them."""

    def __init__(self, containers: dict[str, str], cores: dict[str, float], epoch: float,
                 root: Path = CGROUP_ROOT):
        self.cgroups = {node: ContainerCgroup(cid, root) for node, cid in containers.items()}
        self.cores = cores
        self.epoch = epoch
        self.last: dict[str, tuple[float, float]] = {}
        self.rows: dict[str, list] = {"t": [], "node": [], "cpu": [], "memory": [], "queue": []}

    def sample(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        for node, cgroup in self.cgroups.items():
            try:
                usage = cgroup.usage()
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue  # the container ended: it has no more samples
            if node in self.last:
                then, cpu_then = self.last[node]
                self.rows["t"].append(now - self.epoch)
                self.rows["node"].append(node)
                self.rows["cpu"].append((usage.cpu_s - cpu_then)
                                        / (self.cores[node] * max(now - then, 1e-9)))
                self.rows["memory"].append(float(usage.memory))
                # Queues inside the agents and Mosquitto are not visible from outside.
                self.rows["queue"].append(0)
            self.last[node] = (now, usage.cpu_s)
