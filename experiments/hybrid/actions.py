"""The emulation's actions, carried out in order on a thread of their own.

The model's thread must never wait for a container: it decides (a handover, a link's new
values, a migration) and queues the action here. One worker carries them out in the order they
were decided, so a device's `leave` comes before its `join` and a link change reaches the
gateway the device is on by then. Each action is recorded: when it was decided (model time
and wall clock), when it began and ended, and how it went; `decision_to_action` is the wall
time from the decision to the start of the action's first step on the containers.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Action:
    kind: str            # "link", "handover", "migration"
    subject: str         # the device or operator
    t_model: float       # model time of the decision
    t_decided: float     # wall clock of the decision
    run: Callable[[Action], Any]
    t_begun: float = float("nan")
    t_done: float = float("nan")
    ok: bool = False
    error: str = ""
    result: dict = field(default_factory=dict)

    @property
    def decision_to_action(self) -> float:
        return self.t_begun - self.t_decided


class Actions:
    """A queue of actions and the worker that carries them out; `close()` waits for it."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.done: list[Action] = []
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="foglab-actions", daemon=True)
        self._thread.start()

    def put(self, kind: str, subject: str, t_model: float,
            run: Callable[[Action], Any]) -> Action:
        action = Action(kind, subject, t_model, self.clock(), run)
        self._queue.put(action)
        return action

    def _work(self) -> None:
        while True:
            action = self._queue.get()
            if action is None:
                return
            action.t_begun = self.clock()
            try:
                action.result = action.run(action) or {}
                action.ok = True
            except Exception as error:  # noqa: BLE001 - recorded; the run goes on
                action.error = f"{type(error).__name__}: {error}" if not isinstance(
                    error, RuntimeError) else str(error)
            action.t_done = self.clock()
            self.done.append(action)

    def pending(self) -> int:
        return self._queue.qsize()

    def close(self, timeout: float = 30.0) -> list[Action]:
        """Carry out what is queued (at most `timeout` seconds more), then stop."""
        self._queue.put(None)
        self._thread.join(timeout)
        return self.done
