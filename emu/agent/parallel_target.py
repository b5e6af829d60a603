"""A parallel migration's target: its instance fed by the source's mirror, and the consistency
checker that decides which window outputs, the source's or its own, go downstream
(emu.agent.parallel says the steps)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emu.agent.operators import Operator
from emu.agent.parallel_link import MigrationLink, topics
from emu.agent.protocol import Envelope

if TYPE_CHECKING:
    from emu.agent.parts import AgentSurface

class ParallelTarget:
    """A parallel migration's target: its instance fed by the mirror, and the consistency
    checker that decides which window outputs, the source's or its own, go downstream."""

    def __init__(self, agent: AgentSurface, operator: Operator, tag: str, sync: int, migration: int,
                 ready: Callable[[], None], source: str = "") -> None:
        from workloads.migration import Side, Synchroniser  # only a target loads it

        self.agent = agent
        self.operator = operator
        self.migration = migration
        self.side = Side
        self.checker = Synchroniser(sync)
        self.topics = topics(tag, source, agent.node)
        self.link = MigrationLink(agent, f"foglab-mirror-{tag}-target",
                          [self.topics["input"], self.topics["old"]], self._mirrored, ready)
        self.mirror_sn = 0       # the last SN taken from the mirror
        self.first_sn: int | None = None
        self.gaps = 0            # SNs the mirror skipped (none, with QoS 1 and a session)
        self.old_sn = -1         # the last source output's SN (a redelivered copy is dropped)
        self.covered = 0
        self.offered: dict[tuple[str, int], tuple[Envelope, tuple]] = {}
        self.forwarded = {"old": 0, "new": 0, "adjusted": 0}
        self.t_first_mirrored: float | None = None
        self.t_sync: float | None = None
        self.on_sync: Callable[..., None] | None = None  # a sync request's answer
        self.waiting: tuple[int, Callable[[], None]] | None = None  # a resume, for an SN
        self.error: str | None = None
        window = operator.window
        assert window is not None
        window.divert = self._new

    def report(self) -> dict[str, Any]:
        checker = self.checker
        return {"mode": checker.mode.value if checker.mode else "", "offset": checker.offset,
                "suppressed_old": checker.suppressed_old,
                "suppressed_new": checker.suppressed_new, "forwarded": dict(self.forwarded),
                "t_sync": self.t_sync, "t_first_mirrored": self.t_first_mirrored,
                "first_sn": self.first_sn, "mirror_sn": self.mirror_sn, "gaps": self.gaps}

    def _mirrored(self, topic: str, payload: bytes, qos: int) -> None:
        if topic == self.topics["old"]:
            self._old(payload)
            return
        try:
            envelope = Envelope.decode(payload)
        except ValueError:
            self.agent.unreadable += 1
            return
        sn = envelope.sn
        if sn is None or sn <= self.mirror_sn:
            return  # a copy sent again
        if self.first_sn is None:
            self.first_sn, self.t_first_mirrored = sn, self.agent.clock()
        elif sn != self.mirror_sn + 1:
            self.gaps += sn - self.mirror_sn - 1
        self.mirror_sn = sn
        # The source has this input on record (received.csv): the target's copy is not.
        self.agent.take(self.operator, envelope, qos, record=False)
        if self.waiting is not None and sn >= self.waiting[0]:
            go = self.waiting[1]
            self.waiting = None
            go()

    def _old(self, payload: bytes) -> None:
        try:
            data = json.loads(payload)
            row, output = tuple(data["row"]), Envelope.decode(data["message"])
        except (ValueError, TypeError, KeyError):
            self.agent.unreadable += 1
            return
        if row[7] <= self.old_sn:
            return  # a copy sent again
        self.old_sn = row[7]
        self._offer(self.side.OLD, output, row)

    def _new(self, output: Envelope, row: tuple) -> None:
        self._offer(self.side.NEW, output, row)

    def _offer(self, side: Any, output: Envelope, row: tuple) -> None:
        checker = self.checker
        self.offered[side.value, row[7]] = (output, row)
        try:
            decided = checker.offer(side, (row[7], row[8]))
        except ValueError as error:
            self.error = f"consistency checker: {error}"
            on_sync, self.on_sync = self.on_sync, None
            if on_sync is not None:
                on_sync(error=self.error)
            return
        for forwarded in decided:
            sn = forwarded.sn
            if forwarded.adjusted and forwarded.side is self.side.OLD:
                sn += checker.offset  # Alg. 6.4 moved its SN by the offset
            original, original_row = self.offered.pop((forwarded.side.value, sn))
            now = self.agent.clock()
            window = self.operator.window
            assert window is not None
            self.agent.emit(self.operator, window.forwarded(
                original, original_row, now, forwarded.sn, forwarded.count, self.migration,
                forwarded.adjusted))
            self.forwarded[forwarded.side.value] += 1
            self.forwarded["adjusted"] += int(forwarded.adjusted)
            if forwarded.sn > self.covered:
                self.covered = forwarded.sn
                self.link.publish(self.topics["covered"], json.dumps(
                    {"covered": self.covered}).encode())
        if not checker.synchronised:
            return
        self.offered.clear()  # from now each output is forwarded or dropped as it comes
        if self.t_sync is None:
            self.t_sync = self.agent.clock()
            on_sync, self.on_sync = self.on_sync, None
            if on_sync is not None:
                on_sync(self.report())

    def finish(self) -> None:
        """The checker's work is over: outputs leave as the instance's own."""
        window = self.operator.window
        if window is not None:
            window.divert = None
        self.link.close()
