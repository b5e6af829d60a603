"""Re-placement at run time on the containers (`placement.replace` on emu): every period the
gateways are asked what their drivers sent, the rates go to the re-placement's planner
(workloads.placement.replace.Replanner), and the moves it decides go by
emu.features.moves.dispatch, as the energy offload's do.

The observation is the model's (sim.features.replacement): each stream's rate at each gateway
(the messages its drivers emitted over the period, per stream: the agents' `sent_by_stream`,
read by a ping), the nodes that did not answer the ping (down), the moves that failed since.
Times are the run's (emulated seconds from its epoch, emu.agent.timebase); a period's rate
is over the emulated time between its two pings. The moves are made on a thread of their
own, one at a time, in the order decided (the watcher keeps observing meanwhile); a move whose
turn comes at or after the run's end is recorded refused. The planner comes ready from the
experiment layer (experiments.placement), handed to the run by the backend
(experiments.backends), not by a scenario key.
"""

from __future__ import annotations

import queue
import threading
from types import SimpleNamespace

from emu.features.base import Feature, Run, Setup
from emu.features.migrations import check_targets
from emu.features.moves import dispatch
from topologies.errors import SpecError
from workloads.placement.replace import Move, Observation, Replanner

PING_TIMEOUT_S = 5.0


class ReplacementFeature(Feature):
    """The planner asked every `period` of the run; its moves made by the agents."""

    key = "replacement"

    def __init__(self, spec: Replanner) -> None:
        super().__init__(spec)
        self.planner = spec
        self.period = spec.settings.period
        self.settings = None
        self.strategy = "pause_transfer"
        self.records: list = []
        self.errors: list[str] = []
        self.failed: list[Move] = []
        self.deployed: dict[str, tuple[str, ...]] = dict(spec.current)  # before any move
        self._lock = threading.Lock()  # the planner: the watcher steps, the mover ends moves
        self._stop = threading.Event()
        self._moves: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []

    def prepare(self, setup: Setup) -> None:
        self.settings = setup.scenario.get("migration")
        self.strategy = (self.planner.settings.strategy
                         or getattr(self.settings, "strategy", "pause_transfer"))
        # Their input sessions are their own: a move's target takes them over.
        setup.moving |= set(self.planner.movable)
        if len(setup.topology.of_kind("broker")) > 1:
            setup.checks.append(self._targets)

    def _targets(self, cluster, configs: dict) -> None:
        """Every candidate a movable operator may go to reachable from its input session's
        broker (emu.features.migrations.check_targets), the refusal at placement.replace."""
        plans = [SimpleNamespace(operator=op.name, source=None, target=node,
                                 strategy=self.strategy)
                 for op in self.planner.problem.operators if op.name in self.planner.movable
                 for node in op.candidates]
        try:
            check_targets(plans, self.settings, cluster, configs)
        except SpecError as error:
            raise SpecError(("placement", "replace"), error.value,
                            f"{error.expected} (narrow the operator's among, or use "
                            "pause_transfer)") from None

    def start(self, run: Run, epoch: float) -> None:
        self.run, self.epoch = run, epoch
        self.gateways = [node.name for node in run.topology.of_kind("gateway")]
        for target, name in ((self._watch, "foglab-replace-watch"),
                             (self._move, "foglab-replace-moves")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _sent(self) -> tuple[dict[tuple[str, str], int], frozenset[str]]:
        """(stream, gateway) -> messages its drivers sent so far; the gateways that did not
        answer."""
        result = self.run.control.ping(self.gateways, timeout=PING_TIMEOUT_S)
        counts = {}
        for gateway, reply in result.replies.items():
            if reply.ok and isinstance(reply.result, dict):
                for stream, count in reply.result.get("sent_by_stream", {}).items():
                    counts[(stream, gateway)] = int(count)
        return counts, frozenset(self.gateways) - {
            g for g, reply in result.replies.items() if reply.ok}

    def _watch(self) -> None:
        clock, duration = self.run.clock, self.run.timing.duration
        last, _ = self._sent()
        then = clock.now() - self.epoch
        due = self.period
        while due < duration:  # nothing is decided at the run's end
            now = clock.now() - self.epoch
            if due > now and clock.wait(self._stop, due - now):
                return
            counts, down = self._sent()
            now = clock.now() - self.epoch
            span = max(now - then, 1e-9)
            rates = {key: (count - last.get(key, 0)) / span for key, count in counts.items()}
            last, then = {**last, **counts}, now
            with self._lock:
                observation = Observation(due, rates, down, tuple(self.failed))
                self.failed = []
                step = self.planner.step(observation)
            for move in step.moves:
                self._moves.put((move, self.epoch + due))
            due += self.period

    def _move(self) -> None:
        clock = self.run.clock
        while (item := self._moves.get()) is not None:
            move, decided = item
            if clock.now() - self.epoch >= self.run.timing.duration:  # its turn came too late
                record = dispatch.MigrationRecord.refused(
                    len(self.records), move.operator, self.strategy, move.source,
                    move.target, decided, clock.now())
            else:
                record = dispatch.attempt(self.run.control, move.operator, move.source,
                                          move.target, self.strategy, self.settings,
                                          record_id=len(self.records), clock=clock)
            if record.status != "done":
                self.errors.append(f"{move}: {record.error}")
            with self._lock:
                failed = self.planner.ended(move, record.status == "done")
                if failed is not None:
                    self.failed.append(failed)
            self.records.append(record)

    def stop(self) -> None:
        """Stop observing; wait for the moves already decided (a move begun is not cut)."""
        self._stop.set()
        if self._threads:
            self._threads[0].join()
            self._moves.put(None)
            self._threads[1].join()

    def left(self, node: str, incarnation: int) -> set[str]:
        """The operators deployed on `node` that the planner has elsewhere now."""
        with self._lock:
            return {op for op, nodes in self.deployed.items()
                    if node in nodes and node not in self.planner.current.get(op, ())}

    def migrations(self) -> list:
        return self.records

    def results(self, run: Run, tables: dict, facts: dict) -> None:
        self.planner.record(tables, facts, len(self.failed))
        facts["replacement"]["errors"] = list(self.errors)
