"""The agent's one worker thread: timed actions from a heap, and work other threads hand it."""

from __future__ import annotations

import heapq
import itertools
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

_STOP = object()


class Scheduler:
    """Runs every action of the agent on one thread, so drivers, operators and records need no
    locks: device emissions, held messages and window ends wait in a heap of times (host
    clock); messages from the broker and requests arrive through `call` from any thread.

    An idle agent with nothing timed sleeps on its inbox without waking up. `clock` may be a
    run's emulated clock (emu.agent.timebase), `dilation` its K: a wait of w on it lasts K * w.
    """

    def __init__(self, clock: Callable[[], float] = time.time, dilation: float = 1.0) -> None:
        self.clock = clock
        self.dilation = dilation
        self._heap: list[tuple[float, int, Callable[..., Any], tuple]] = []
        self._order = itertools.count()  # ties run in the order they were set
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.failures = 0

    def at(self, t: float, action: Callable[..., Any], *args: Any) -> None:
        """Run action(*args) at time t of the clock; only from the scheduler's own thread."""
        heapq.heappush(self._heap, (t, next(self._order), action, args))

    def call(self, action: Callable[..., Any], *args: Any) -> None:
        """Run action(*args) on the scheduler's thread as soon as it can; from any thread."""
        self._inbox.put((action, args))

    def start(self, name: str = "foglab-scheduler") -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> bool:
        """Finish the action under way and stop; False if that took longer than timeout."""
        if self._thread is None:
            return True
        self._inbox.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def in_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def _run(self) -> None:
        heap, inbox, clock, dilation = self._heap, self._inbox, self.clock, self.dilation
        while True:
            now = clock()
            while heap and heap[0][0] <= now:
                _, _, action, args = heapq.heappop(heap)
                self._do(action, args)
            while True:  # what other threads handed over meanwhile
                try:
                    item = inbox.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    return
                self._do(*item)
            wait = None
            if heap:
                wait = heap[0][0] - clock()
                if wait <= 0:
                    continue
                wait *= dilation
            try:
                item = inbox.get(timeout=wait)
            except queue.Empty:
                continue
            if item is _STOP:
                return
            self._do(*item)

    def _do(self, action: Callable[..., Any], args: tuple) -> None:
        try:
            action(*args)
        except Exception:  # one bad action must not stop the node
            self.failures += 1
            if self.failures <= 10:
                print(f"foglab agent: {getattr(action, '__qualname__', action)} failed:\n"
                      f"{traceback.format_exc()}", file=sys.stderr, flush=True)
