"""Parallel sweeps: a sweep's runs in N worker processes (`foglab run -j N`), each run whole in
one worker, what each run tells (started, progress, stage, finished) relayed to the parent's
Reporter, and a Ctrl-C or SIGTERM passed on to the runs under way, which mark themselves
interrupted as a serial run does, before the workers end.

Workers are forked (multiprocessing's "fork" start method, where the platform has it; else
"spawn"): the parent has imported numpy, pandas, pyarrow and SimPy and loaded and validated
the experiment, and a forked worker has them at once (20 ms to start two on the development
host, against 1.8 s with "forkserver" or "spawn", which import it all again and pickle the
experiment). Fork's hazard, a lock held by another thread at the fork, is kept away: the
workers start (all at once, as concurrent.futures does with fork) before the progress bars'
threads, and a worker never prints: it sends its events through a pipe.

Only a backend whose runs are in the process runs in parallel (experiments.backends'
`in_process`: sim): an emulation's containers, networks and ports are named by its topology
and hold the host's cores; two at once would collide.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ProcessPoolExecutor

from experiments.backends import BACKENDS, registered
from topologies.terminal import STOP_SIGNALS, Stop

START_METHOD = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
# How often a worker passes a run's progress on (a run's last second always is).
PROGRESS_EVERY_S = 0.1
# How long the runs under way have to mark themselves interrupted before they are killed.
GRACE_S = 30.0
# How often the parent looks for finished runs when no event comes.
POLL_S = 0.1


def check_jobs(points: Sequence, jobs: int) -> None:
    """`jobs` workers for these sweep points, or a ValueError naming the option and value."""
    if jobs < 1:
        raise ValueError(f"-j/--jobs {jobs}: the number of runs at once must be at least 1")
    if jobs == 1:
        return
    for point in points:
        if not registered(point.spec.run.backend).in_process:
            alone = ", ".join(name for name, found in BACKENDS.items() if found.in_process)
            raise ValueError(
                f"-j/--jobs {jobs}: sweep point p{point.index} runs on "
                f"{point.spec.run.backend} (run.backend); only {alone} runs in parallel: "
                "give -j 1, or sweep the sim points alone")


class Relay:
    """A worker's Reporter: each call sent to the parent as (key, pid, method, args)."""

    def __init__(self, key: Hashable, channel, lock):
        self.key, self.channel, self.lock = key, channel, lock
        self.sent = 0.0
        self.duration = 0.0

    def _send(self, method: str, *args) -> None:
        with self.lock:
            self.channel.send((self.key, os.getpid(), method, args))

    def start(self, total_runs: int, total_seconds: float = 0.0) -> None: ...

    def current_run(self, label: str) -> None: ...

    def run_started(self, label, folder, duration) -> None:
        self.duration = duration
        self._send("run_started", label, folder, duration)

    def progress(self, seconds: float) -> None:
        now = time.monotonic()
        if now - self.sent >= PROGRESS_EVERY_S or seconds >= self.duration:
            self.sent = now
            self._send("progress", seconds)

    def stage(self, text: str) -> None:
        self._send("stage", text)

    def run_finished(self, label, folder, summary, error) -> None:
        self._send("run_finished", label, folder, summary, error)

    def note(self, text: str) -> None:
        self._send("note", text)


# A worker's own state, set once when it starts (_start).
_worker: dict = {}


def _start(call: Callable, shared: tuple, channel, lock, stopping) -> None:
    """A worker's start: what every run needs, and the stop signals ignored while it waits
    (a Ctrl-C reaches every process of the terminal's group: an idle worker ends when the
    parent shuts the pool; a running one is interrupted in _work)."""
    _worker.update(call=call, shared=shared, channel=channel, lock=lock, stopping=stopping)
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)


def _interrupt(number: int, frame: object) -> None:
    """The first stop signal in a run interrupts it as in the parent (KeyboardInterrupt or
    Stop); the others (the terminal's and the parent's both come) are ignored."""
    for other in STOP_SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    if number == signal.SIGINT:
        raise KeyboardInterrupt
    raise Stop(number)


def _work(key: Hashable, args: tuple):
    """One run in a worker: `call(*shared, *args, reporter)`, a stop signal interrupting it."""
    if _worker["stopping"].is_set():  # the sweep stops: start nothing more
        raise KeyboardInterrupt
    for number in STOP_SIGNALS:
        signal.signal(number, _interrupt)
    try:
        return _worker["call"](*_worker["shared"], *args,
                               Relay(key, _worker["channel"], _worker["lock"]))
    finally:
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)


class Workers:
    """`jobs` worker processes that run `call(*shared, *args, reporter)`, one run each at a
    time; started when made (before any progress bar's thread: see the module's doc)."""

    def __init__(self, jobs: int, call: Callable, shared: tuple):
        context = multiprocessing.get_context(START_METHOD)
        self.events, channel = context.Pipe(duplex=False)
        self.stopping = context.Event()
        self.pool = ProcessPoolExecutor(jobs, context, initializer=_start, initargs=(
            call, shared, channel, context.Lock(), self.stopping))
        self.pool.submit(os.getpid)  # with fork, every worker starts now, together
        self.labels: dict[Hashable, str] = {}
        self.under_way: dict[Hashable, int] = {}  # key -> the worker's pid
        self.relaying = True

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *failure) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def run(self, items: Sequence[tuple[Hashable, tuple]], reporter) -> dict:
        """Each (key, args) run in a worker; key -> what the call returned. A run that raises
        (a stop signal: KeyboardInterrupt) stops the others, which mark themselves
        interrupted, and is raised here."""
        futures = {self.pool.submit(_work, key, args): key for key, args in items}
        results: dict[Hashable, object] = {}
        pending = set(futures)
        try:
            while pending:
                self.events.poll(POLL_S)
                finished = [future for future in pending if future.done()]
                self._relay(reporter)  # a run's events were sent before it returned
                for future in finished:
                    pending.discard(future)
                    results[futures[future]] = future.result()
        except BaseException as stop:
            self._stop(stop, pending, reporter)
            raise
        return results

    def _relay(self, reporter) -> None:
        while self.events.poll():
            key, pid, method, args = self.events.recv()
            if method == "run_started":
                self.labels[key] = args[0]
                self.under_way[key] = pid
            elif method == "run_finished":
                self.under_way.pop(key, None)
            if key in self.labels:
                reporter.current_run(self.labels[key])
            getattr(reporter, method)(*args)

    def _stop(self, stop: BaseException, pending: set, reporter) -> None:
        """The runs under way get the signal the parent got (SIGTERM for an error) and mark
        themselves interrupted; no run starts; the workers end."""
        self.stopping.set()
        for future in pending:
            future.cancel()
        number = (getattr(stop, "signal", signal.SIGINT) if isinstance(stop, KeyboardInterrupt)
                  else signal.SIGTERM)
        self._signal(number)
        deadline = time.monotonic() + GRACE_S
        while any(not future.done() for future in pending) and time.monotonic() < deadline:
            self.events.poll(POLL_S)
            self._drain(reporter)  # a worker blocked on a full pipe goes on
            # A run that began after the signal went out (its start was still in the pipe).
            self._signal(number)
        if any(not future.done() for future in pending):
            self._signal(signal.SIGKILL)
        self.pool.shutdown(wait=True, cancel_futures=True)
        self._drain(reporter)

    def _drain(self, reporter) -> None:
        """Relay while stopping; a message the interrupt cut in half ends the relaying (the
        runs still end: by the grace time's SIGKILL if one is stuck on a full pipe)."""
        if not self.relaying:
            return
        try:
            self._relay(reporter)
        except Exception:  # noqa: BLE001 - a broken message: read no more
            self.relaying = False

    def _signal(self, number: int) -> None:
        for key, pid in list(self.under_way.items()):
            with contextlib.suppress(ProcessLookupError):  # ended already
                os.kill(pid, number)
            if number == signal.SIGKILL:
                self.under_way.pop(key)
