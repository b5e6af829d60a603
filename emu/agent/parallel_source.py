"""A parallel migration's source: it stamps and mirrors its input, diverts its window outputs
to the target's checker, and on a rollback sends downstream what the checker did not cover
(emu.agent.parallel says the steps)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from emu.agent.input_session import InputSession
from emu.agent.operators import Operator
from emu.agent.parallel_link import MigrationLink, topics
from emu.agent.protocol import Envelope

if TYPE_CHECKING:
    from emu.agent.parts import AgentSurface

# How long (emulated s) a rollback waits for its barrier to come back through the broker
# before it sends what it kept anyway (a broker that does not answer cannot take it either).
BARRIER_TIMEOUT_S = 2.0


class ParallelSource:
    """A parallel migration's source: it stamps and mirrors its input, and sends its window
    outputs to the checker, keeping those not yet covered downstream.

    What went downstream it learns from downstream itself: its link reads the target's output
    topic (`watch`, on the broker they share), where each window output says its last SN,
    besides the checker's `covered` word. The checker publishes that word after the output,
    from another client: a target killed between the two, or a word still on its way, would
    otherwise make a rollback send a window downstream twice. A rollback first sends itself a
    barrier through the broker: every output the broker took from the target before it comes
    back first (the broker hands one subscriber its messages in the order it took them)."""

    def __init__(self, agent: AgentSurface, operator: Operator, session: InputSession, tag: str,
                 migration: int, watch: str | None = None, target: str = "") -> None:
        self.agent = agent
        self.operator = operator
        self.session = session
        self.topics = topics(tag, agent.node, target)
        self.migration = migration
        self.watch = watch
        self.pending: list[tuple[Envelope, tuple]] = []  # diverted outputs not covered yet
        self.covered = 0  # the highest SN that went downstream, as the checker said
        self.mirrored = 0
        self.barrier: Callable[[], None] | None = None  # a rollback waiting for its barrier
        filters = [self.topics["covered"], self.topics["barrier"], *([watch] if watch else [])]
        self.link = MigrationLink(agent, f"foglab-mirror-{tag}-source", filters, self._heard,
                          lambda: None)

    def mirror(self, envelope: Envelope) -> None:
        """Stamp the input with the SN the window gives it and mirror it to the target."""
        window = self.operator.window
        assert window is not None
        if envelope.sn is None:
            envelope.sn = window.next_sn
        self.mirrored += 1
        self.link.publish(self.topics["input"], envelope.encode())

    def output(self, output: Envelope, row: tuple) -> None:
        """A closed window of the source: to the checker, kept until covered."""
        self.pending.append((output, row))
        self.link.publish(self.topics["old"], json.dumps(
            {"row": row, "message": output.encode().decode()}, separators=(",", ":")).encode())

    def _heard(self, topic: str, payload: bytes, qos: int) -> None:
        if topic == self.topics["barrier"]:
            go, self.barrier = self.barrier, None
            if go is not None:
                go()
            return
        try:
            if topic == self.watch:  # a window output of the target, as downstream has it
                covered = int(json.loads(Envelope.decode(payload).body)["last_sn"])
            else:
                covered = int(json.loads(payload)["covered"])
        except (ValueError, TypeError, KeyError):
            return
        self.cover(covered)

    def cover(self, covered: int) -> None:
        """Everything up to SN `covered` went downstream: what is kept below it goes."""
        if covered > self.covered:
            self.covered = covered
            self.pending = [(o, row) for o, row in self.pending if row[7] > covered]

    def hold(self, output: Envelope, row: tuple) -> None:
        """A window that closes while a rollback waits for its barrier: kept, to go
        downstream after the older ones kept, in order."""
        self.pending.append((output, row))

    def roll_back(self, then: Callable[[int], None]) -> None:
        """Mirroring stops; once the barrier came back through the broker (or after
        BARRIER_TIMEOUT_S), what was not covered goes downstream and outputs go straight
        there again; `then(how many went)` on the scheduler thread."""
        agent = self.agent
        self.session.mirror = None
        window = self.operator.window
        assert window is not None
        window.divert = self.hold

        def go() -> None:
            if self.barrier is not go and self.barrier is not None:
                return
            self.barrier = None
            sent = self.take_back()
            window.divert = None
            self.link.close()
            then(sent)

        self.barrier = go
        if not self.link.started or self.link.closed:
            go()
            return
        self.link.publish(self.topics["barrier"], b"{}")
        agent.scheduler.at(agent.clock() + BARRIER_TIMEOUT_S,
                           lambda: go() if self.barrier is go else None)

    def stop(self) -> None:
        self.session.mirror = None
        if self.operator.window is not None:
            self.operator.window.divert = None
        self.link.close()

    def take_back(self) -> int:
        """After a failure: send downstream what the checker did not cover, the partly
        covered output cut to the SNs above `covered`; how many went."""
        window = self.operator.window
        assert window is not None
        sent = 0
        for output, row in self.pending:
            last, count = row[7], row[8]
            if last <= self.covered:
                continue
            kept = min(count, last - self.covered)
            now = self.agent.clock()
            self.agent.emit(self.operator, window.forwarded(output, row, now, last, kept,
                                                            self.migration, kept != count))
            self.covered = last
            sent += 1
        self.pending = []
        return sent
