"""The emulation's actions, carried out off the model's thread, in order per subject.

The model's thread must never wait for a container: it decides (a handover, a link's new
values, a migration) and queues the action here. Workers carry them out; the actions of one
subject (a device, an operator, the links' batches) go to one worker, in the order they were
decided, so a device's handovers never overtake each other, while different devices' run side
by side: with 200 users handing over among 5 gateways (benchmarks/hybrid_lag.py), the p95
from decision to action was 1.9 s with one worker for all, 0.78 s with 8 and 12 ms with 32
(a command to a QEMU agent takes 50-200 ms; the queue was the wait). Each action is recorded: when
it was decided (model time and wall clock), when it began and ended, and how it went;
`decision_to_action` is the time from the decision to the start of the action's first
step on the containers, on `clock`: a hybrid run gives the emulated run's clock
(emu.agent.timebase), so at a dilation K it is in emulated seconds (host seconds / K).
An action that never began (still queued when the run ended) has no start: its
`decision_to_action` is NaN, not a sample (experiments.hybrid.figures). A failed action keeps
its cause (`cause`: TIMEOUT, NOT_OK, NOT_BEGUN, a coupling's own, or the exception's type) and
the node it was sent to; `failures` counts them by cause, with examples, for the run's facts.
"""

from __future__ import annotations

import queue
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TIMEOUT = "timeout"        # the node's agent did not answer within the request's timeout
NOT_OK = "not ok"          # the agent answered with an error (the message is the error)
NOT_BEGUN = "not begun"    # still queued when the run ended: never carried out


class ActionFailed(RuntimeError):
    """An action the containers did not carry out, with its cause (TIMEOUT, NOT_OK, or one a
    coupling names) and the node it was sent to."""

    def __init__(self, message: str, cause: str, node: str = "") -> None:
        super().__init__(message)
        self.cause, self.node = cause, node


@dataclass
class Action:
    kind: str            # "link", "handover", "migration"
    subject: str         # the device or operator
    t_model: float       # model time of the decision
    t_decided: float     # the clock's time of the decision (emulated in a run)
    run: Callable[[Action], Any]
    t_begun: float = float("nan")
    t_done: float = float("nan")
    ok: bool = False
    error: str = ""
    cause: str = ""      # why it failed (see ActionFailed); "" when it went well
    node: str = ""       # the node a failed action's request went to, when known
    result: dict = field(default_factory=dict)

    @property
    def decision_to_action(self) -> float:
        return self.t_begun - self.t_decided


class Actions:
    """Queues of actions and their workers; `close()` waits for what is queued."""

    def __init__(self, clock: Callable[[], float] = time.time, workers: int = 32) -> None:
        self.clock = clock
        self.done: list[Action] = []
        self._lock = threading.Lock()
        self._abandon = threading.Event()  # close() ran out of time: skip what is queued
        self._queues = [queue.SimpleQueue() for _ in range(workers)]
        self._threads = [threading.Thread(target=self._work, args=(q,), daemon=True,
                                          name=f"foglab-actions-{i}")
                         for i, q in enumerate(self._queues)]
        for thread in self._threads:
            thread.start()

    def put(self, kind: str, subject: str, t_model: float,
            run: Callable[[Action], Any]) -> Action:
        action = Action(kind, subject, t_model, self.clock(), run)
        self._queues[zlib.crc32(f"{kind}:{subject}".encode()) % len(self._queues)].put(action)
        return action

    def _work(self, actions: queue.SimpleQueue) -> None:
        while True:
            action = actions.get()
            if action is None:
                return
            if self._abandon.is_set():  # the run is over: no action on containers going down
                action.error = "not carried out: the run ended before its turn"
                action.cause = NOT_BEGUN
                action.t_done = self.clock()
                with self._lock:
                    self.done.append(action)
                continue
            action.t_begun = self.clock()
            try:
                action.result = action.run(action) or {}
                action.ok = True
            except ActionFailed as error:
                action.error, action.cause, action.node = str(error), error.cause, error.node
            except Exception as error:  # noqa: BLE001 - recorded; the run goes on
                action.error = f"{type(error).__name__}: {error}" if not isinstance(
                    error, RuntimeError) else str(error)
                action.cause = type(error).__name__  # ConnectionRefusedError, TimeoutError...
            action.t_done = self.clock()
            with self._lock:
                self.done.append(action)

    def pending(self) -> int:
        return sum(q.qsize() for q in self._queues)

    def close(self, timeout: float = 30.0, grace: float = 5.0) -> list[Action]:
        """Carry out what is queued (at most `timeout` seconds more), then stop: what is still
        queued then is recorded as not carried out, never run against containers that are
        going down (an action under way finishes; `grace` seconds more are waited for it)."""
        for actions in self._queues:
            actions.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in self._threads):
            self._abandon.set()
            deadline = time.monotonic() + grace
            for thread in self._threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            return sorted(self.done, key=lambda action: action.t_decided)


def failures(done: list[Action], examples: int = 3) -> dict[str, dict]:
    """The failed actions by cause, the most frequent first: {cause: {"count": n,
    "examples": the first few as {"t": model time of the decision, "action", "subject",
    "node", "error"}}}."""
    found: dict[str, dict] = {}
    for action in sorted((a for a in done if not a.ok), key=lambda a: a.t_decided):
        cause = found.setdefault(action.cause or "unknown", {"count": 0, "examples": []})
        cause["count"] += 1
        if len(cause["examples"]) < examples:
            cause["examples"].append({"t": round(action.t_model, 3), "action": action.kind,
                                      "subject": action.subject, "node": action.node or None,
                                      "error": action.error})
    return dict(sorted(found.items(), key=lambda item: -item[1]["count"]))
