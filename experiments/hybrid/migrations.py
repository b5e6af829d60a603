"""Coupling: the model's migration policy moves follow instances between real gateways.

A `follow: users` operator has an instance per moving device on the emulation
(emu.cluster.deployment: `<operator>@<device>`, on its own input session), started where the
policy places it (experiments.hybrid.plan). As users move, sim.policy.FollowPolicy decides on
the model's thread (latency threshold or nearest gateway, capacity, cloud fallback), exactly as
on `sim`; its `start` is this coupling's, which queues the move as an action:
emu.features.moves.dispatch's `migrate()` on the real containers, with the scenario's strategy and
settings. The policy hears how it went (`done(ok)`) back on the model's thread, at its next step, so
its room counts stay its own. A move whose turn in the queue comes after the run's end never begins:
its record says `refused` (its start the decision's time). Each move is a record of the
`migrations` table, with the emulation's definitions of downtime and output gap; the
decision's model time and the time from the decision to the move's first step (decision to
action) are in the action's record. The records' times are on the run's `clock`
(emu.agent.timebase: emulated at a dilation).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable

from emu.agent.timebase import UNDILATED, TimeBase
from experiments.hybrid.actions import ActionFailed


class PolicyMigrations:
    def __init__(self, mobility, actions, control, operator: str, where: dict[str, str],
                 settings, first_id: int, clock: TimeBase = UNDILATED,
                 until: float = math.inf) -> None:
        """`where`: each device's instance's node at the start; `first_id`: the first record
        id (after the scenario's scheduled migrations'); `clock`: the run's time base;
        `until`: the run's end on it (a move whose turn comes then is refused)."""
        self.clock = clock
        self.until = until
        self.mobility = mobility
        self.actions = actions
        self.control = control
        self.operator = operator
        self.where = {f"{operator}@{device}": node for device, node in where.items()}
        self.settings = settings
        self._next_id = first_id
        self.records: list = []
        self.moves: list = []  # the actions
        self._ended: deque = deque()  # (done, ok), for the model's thread
        self._begun: set[int] = set()  # the records whose turn came (_move ran)
        self._lock = threading.Lock()

    def start(self, user: int, target: str, strategy: str,
              done: Callable[[bool], None]) -> None:
        """FollowPolicy's `start`, on the model's thread: queue the move."""
        from emu.features.moves.dispatch import MigrationRecord

        name = f"{self.operator}@{self.mobility.devices[user]}"
        record_id, self._next_id = self._next_id, self._next_id + 1
        t = self.mobility.env.now
        # Recorded from its decision: a move still queued or under way when the run ends
        # (Actions.close waits a while, not for ever) may yet read on its target, whose
        # records the emulation then reads with it (emu.run.emulate reads every move's target).
        under_way = MigrationRecord(record_id, name, strategy, self.where[name], target,
                                    self.clock.now(),
                                    status="unfinished", error="under way when the run ended")
        with self._lock:
            self.records.append(under_way)
        self.moves.append(self.actions.put(
            "migration", name, t,
            lambda action: self._move(name, target, strategy, under_way, done)))

    def _move(self, name: str, target: str, strategy: str, under_way,
              done: Callable[[bool], None]) -> dict:
        from emu.features.moves.dispatch import MigrationRecord, attempt

        self._begun.add(under_way.id)
        source = under_way.source = self.where[name]
        now = self.clock.now()
        if now >= self.until:  # its turn came after the run's end: it never begins
            record = MigrationRecord.refused(under_way.id, name, strategy, source, target,
                                             under_way.start, now)
        else:
            record = attempt(self.control, name, source, target, strategy, self.settings,
                             record_id=under_way.id, clock=self.clock)
        ok = record.status == "done"
        with self._lock:
            self.records = [record if r is under_way else r for r in self.records]
            if ok:
                self.where[name] = target
        self._ended.append((done, ok))
        if not ok:
            raise ActionFailed(f"{name} {source} -> {target}: {record.error}",
                               f"migration {record.status}", target)
        return {"downtime": record.downtime, "source": source, "target": target}

    def closed(self) -> list:
        """The records once the actions' queue is closed: a move whose turn never came (the
        queue gave up waiting at the end) never began, so it is `refused`, not unfinished."""
        from emu.features.moves.dispatch import MigrationRecord

        now = self.clock.now()
        with self._lock:
            self.records = [
                MigrationRecord.refused(r.id, r.operator, r.strategy, r.source, r.target,
                                        r.start, now, "not begun: the run's queue of actions "
                                        "closed before its turn")
                if r.status == "unfinished" and r.id not in self._begun else r
                for r in self.records]
            return list(self.records)

    def settle(self, t: float = 0.0) -> None:
        """On the model's thread (each step, before the policy checks): tell the policy
        which moves ended."""
        while self._ended:
            done, ok = self._ended.popleft()
            done(ok)
