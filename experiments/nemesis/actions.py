"""The nemesis's host-level actions, and the thread that carries a schedule's out.

- `pause`: the docker SDK's `container.pause()` (the cgroup freezer: every process of the
  node stopped, as SIGSTOP) for the fault's span, then `unpause()`;
- `cpu_hog`: 2 x os.cpu_count() busy-loop processes for the span, ended by their pids;
- `disk_burst`: a process writing 1 MiB blocks to a temporary file with fsync after each
  (the file kept under 64 MiB) for the span; the process ended by pid, the file removed;
- `broker_restart`: `container.restart()` of the broker (SIGTERM, Mosquitto writes its
  persistence file, then start), at its time (a migration's, for the move scenarios).

The run's containers are found by their labels: the owner (this process, as emu's cluster
writes it: emu.engines.docker.inventory.owner_token) and the topology's name, which the nemesis
makes unique per run. Times are seconds from the run's epoch, which the thread reads from
the first reading the devices recorded (the earliest `t_sent` of the records folder the
containers' `foglab.records` label names, less the scenario's `first_reading`): the
records are flushed each second, so the thread learns the epoch up to a second late and
waits from it. `stop()` ends every process
it started (by pid), unpauses every container it paused and removes its files, whatever
happened; `Nemesis` is a context manager that does so on the way out (an error, Ctrl-C).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from emu.engines.docker.inventory import OWNER, owner_token, records_of_run

POLL_S = 0.1
FIND_TIMEOUT_S = 600.0  # the cluster's start, images included, on a loaded host
BURST_BLOCK = 1 << 20
BURST_LIMIT = 64 << 20
RESTART_GRACE_S = 10

_HOG = "while True: pass"
_BURST = f"""
import os, sys
block = os.urandom({BURST_BLOCK})
with open(sys.argv[1], "wb", buffering=0) as f:
    while True:
        if f.tell() >= {BURST_LIMIT}:
            f.seek(0)
            f.truncate()
        f.write(block)
        os.fsync(f.fileno())
"""


class CpuHog:
    """`processes` busy loops (default 2 per CPU), each a process of its own."""

    def __init__(self, processes: int | None = None) -> None:
        self.count = processes or 2 * (os.cpu_count() or 1)
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        for _ in range(self.count):
            self.processes.append(subprocess.Popen(
                [sys.executable, "-c", _HOG], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def stop(self) -> None:
        _end(self.processes)
        self.processes = []


class DiskBurst:
    """A process writing and fsyncing a temporary file; `stop` ends it and removes the file
    (and its folder)."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.process: subprocess.Popen | None = None

    @property
    def path(self) -> Path | None:
        return None if self.folder is None else self.folder / "burst.bin"

    def start(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="foglab-nemesis-disk-"))
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BURST, str(self.path)], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.process is not None:
            _end([self.process])
            self.process = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def _end(processes: list[subprocess.Popen]) -> None:
    """SIGKILL each of our processes by its pid, and reap it."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


class Nemesis(threading.Thread):
    """Carries out a schedule's host-level actions (experiments.nemesis.schedule.Fault,
    `host`) on the run of `topology` that this process brings up. Afterwards `done` has a
    line per action carried out (what, when from the epoch), `errors` what failed."""

    def __init__(self, client, topology: str, actions: list, first_reading: float = 0.0,
                 timeout: float = FIND_TIMEOUT_S) -> None:
        super().__init__(name=f"nemesis-{topology}", daemon=True)
        self.client = client
        self.topology = topology
        self.actions = sorted(actions, key=lambda a: a.at)
        self.timeout = timeout
        self.first_reading = first_reading
        self.epoch: float | None = None
        self.done: list[str] = []
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._paused: dict[str, object] = {}  # container id -> container
        self._hogs: list[CpuHog] = []
        self._bursts: list[DiskBurst] = []
        self._timers: list[tuple[float, str, object]] = []  # (end, what, undo)

    # -- the thread ----------------------------------------------------------------------

    def run(self) -> None:
        try:
            if self.actions:
                self._carry_out()
        except _Stopped:
            pass
        except Exception as error:  # noqa: BLE001 - reported with the run, not lost
            self.errors.append(f"nemesis: {type(error).__name__}: {error}")
        finally:
            self._undo_all()

    def _carry_out(self) -> None:
        records = self._records_folder()
        self.epoch = self._epoch(records)
        pending = list(self.actions)
        while pending or self._timers:
            now = time.time() - self.epoch
            while pending and pending[0].at <= now:
                self._begin(pending.pop(0), now)
            for entry in [e for e in self._timers if e[0] <= now]:
                self._timers.remove(entry)
                self._finish(entry)
            if self._halt.wait(POLL_S):
                raise _Stopped

    def _begin(self, action, now: float) -> None:
        span = action.span or 0.0
        try:
            if action.kind == "pause":
                container = self._container(action.target)
                container.pause()
                with self._lock:
                    self._paused[container.id] = container
                undo = ("unpause", container)
            elif action.kind == "cpu_hog":
                hog = CpuHog()
                with self._lock:
                    self._hogs.append(hog)
                hog.start()
                undo = ("hog", hog)
            elif action.kind == "disk_burst":
                burst = DiskBurst()
                with self._lock:
                    self._bursts.append(burst)
                burst.start()
                undo = ("burst", burst)
            elif action.kind == "broker_restart":
                self._container(action.target).restart(timeout=RESTART_GRACE_S)
                self.done.append(f"broker_restart {action.target} at {now:.2f} s, back at "
                                 f"{time.time() - self.epoch:.2f} s")
                return
            else:
                raise ValueError(f"not a host action: {action.kind}")
        except Exception as error:  # noqa: BLE001 - one action's failure, the rest go on
            self.errors.append(f"{action.kind} {action.target} at {now:.2f} s: {error}")
            return
        self.done.append(f"{action.kind} {action.target} at {now:.2f} s".replace("  ", " "))
        self._timers.append((action.at + span, action.kind, undo))

    def _finish(self, entry: tuple) -> None:
        _, kind, (how, thing) = entry
        try:
            self._undo(how, thing)
            self.done.append(f"{kind} ended at {time.time() - self.epoch:.2f} s")
        except Exception as error:  # noqa: BLE001
            self.errors.append(f"ending {kind}: {error}")

    def _undo(self, how: str, thing) -> None:
        if how == "unpause":
            with self._lock:
                self._paused.pop(thing.id, None)
            _unpause(thing)
        else:  # a CpuHog or a DiskBurst
            thing.stop()

    def _undo_all(self) -> None:
        """Whatever is still in force: unpaused, ended, removed."""
        with self._lock:
            paused, self._paused = list(self._paused.values()), {}
            hogs, self._hogs = self._hogs, []
            bursts, self._bursts = self._bursts, []
        for container in paused:
            try:
                _unpause(container)
            except Exception as error:  # noqa: BLE001
                self.errors.append(f"unpausing {container.name}: {error}")
        for hog in hogs:
            hog.stop()
        for burst in bursts:
            burst.stop()
        self._timers = []

    def stop(self, wait: float = 30.0) -> None:
        """End the thread and everything it started; also from another thread on Ctrl-C."""
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(wait)
        self._undo_all()

    def __enter__(self) -> Nemesis:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- finding the run -----------------------------------------------------------------

    def _container(self, node: str):
        labels = [f"{OWNER}={owner_token()}", f"foglab.topology={self.topology}",
                  f"foglab.node={node}"]
        found = self.client.containers.list(all=True, filters={"label": labels})
        if not found:
            raise LookupError(f"no container of node {node} in this run")
        return found[0]

    def _records_folder(self) -> Path:
        deadline = time.monotonic() + self.timeout
        while True:
            found = records_of_run(self.client, self.topology)
            if found is not None:
                return found
            self._tick(deadline, "no container of the run appeared")

    def _epoch(self, records: Path) -> float:
        deadline = time.monotonic() + self.timeout
        while True:
            first = [t for path in records.glob("*/sent.csv") if (t := _first_sent(path))]
            if first:
                return min(first) - self.first_reading
            self._tick(deadline, f"no device of the run sent anything under {records}")

    def _tick(self, deadline: float, why: str) -> None:
        if self._halt.wait(POLL_S * 2):
            raise _Stopped
        if time.monotonic() > deadline:
            raise TimeoutError(f"{why} within {self.timeout:.0f} s")


class _Stopped(Exception):
    pass


def _unpause(container) -> None:
    container.reload()
    if container.status == "paused":
        container.unpause()


def _first_sent(path: Path) -> float | None:
    """The t_sent of a sent.csv's first row (emu.agent.records.SENT), or None."""
    try:
        with path.open() as rows:
            header = rows.readline().strip().split(",")
            line = rows.readline()
    except OSError:
        return None
    if not line.endswith("\n"):
        return None
    try:
        return float(line.split(",")[header.index("t_sent")])
    except (ValueError, IndexError):
        return None
