"""Which nodes of a running cluster are dead, and when its services were away (the engine's
view of the containers, polled while a run measures)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from emu.agent.timebase import UNDILATED, TimeBase

# The engine is asked for the containers' states at most this often (host seconds: the
# engine's answer costs the host the same at any dilation). Each listing costs the engine
# CPU that grows with the containers: at 0.5 s, 0.39 s of a minute on the quickstart and
# 0.73 s of 30 s with 25 gateways (docs/host-cpu.md); a crash is still seen within 1 s.
HEALTH_POLL_S = 1.0


@dataclass(frozen=True)
class Seen:
    """A container as the engine reports it: its state, status text, and (services only)
    when it last started and finished (time.time(); None if never or not asked)."""

    state: str
    status: str = ""
    started: float | None = None
    finished: float | None = None


class Health:
    """Which nodes of a running cluster are dead, and when its services were away.

    `states()` gives node -> Seen (the agents from one listing of the cluster's containers,
    the services from their inspection, for their start and finish times); it is asked at
    most every `interval` seconds. An agent whose container is not running is dead until
    the fault schedule starts it again with its agent (`revived`: a crash healed), for the
    rest of the run otherwise.
    A service (broker, ZooKeeper) away is an outage, from its container's finish to its next
    start, so a restart quicker than a poll shows too; `finish` fails a service still down.

    `timebase`: the run's (emu.agent.timebase). Its times (`epoch`, the failures' and outages'
    seconds) are emulated: the engine's start and finish times, on the host's clock, are
    converted; `clock` defaults to its emulated clock. `interval` stays host seconds.
    """

    def __init__(self, states: Callable[[], dict[str, Seen]], agents: list[str],
                 services: list[str], clock: Callable[[], float] | None = None,
                 interval: float = HEALTH_POLL_S, timebase: TimeBase = UNDILATED) -> None:
        self._states = states
        self.agents = list(agents)
        self.services = list(services)
        self.timebase = timebase
        clock = clock or timebase.now
        self.clock = clock
        self.interval = timebase.emulated_seconds(interval)
        self.epoch = clock()  # times are said as seconds since this (the run's epoch)
        self.failed: dict[str, str] = {}
        self._down: set[str] = set()  # agents failed for their container (not a request)
        self.outages: dict[str, list[list[float | None]]] = {}
        self._started: dict[str, float] = {}  # service -> its latest start seen
        self._last_poll = -float("inf")

    def observe(self, states: dict[str, Seen], now: float) -> None:
        """Take one report of the containers (a node missing from it was removed)."""
        gone = Seen("removed")
        for node in self.agents:
            seen = states.get(node, gone)
            if seen.state != "running" and node not in self.failed:
                self._down.add(node)
                self.failed[node] = (f"container {seen.state} at t={now - self.epoch:.1f} s"
                                     + (f" ({seen.status})" if seen.status else ""))
        for node in self.services:
            seen = states.get(node, gone)
            if self.timebase.dilated:
                seen = Seen(seen.state, seen.status, self._engine(seen.started),
                            self._engine(seen.finished))
            spans = self.outages.setdefault(node, [])
            open_span = bool(spans) and spans[-1][1] is None
            last_start = self._started.get(node)
            if seen.started is not None:
                self._started[node] = seen.started
            if seen.state != "running":
                if not open_span:
                    spans.append([self._t(seen.finished or now), None])
            elif open_span:
                spans[-1][1] = self._t(seen.started or now)
            elif last_start is not None and seen.started is not None and (
                    seen.started > last_start):
                # Stopped and started again between two polls.
                spans.append([self._t(seen.finished or seen.started), self._t(seen.started)])

    def revived(self, node: str) -> None:
        """An agent's container started again with its agent: alive from now, unless it
        failed otherwise (a request it did not answer)."""
        if node in self._down:
            self._down.discard(node)
            del self.failed[node]

    def _t(self, when: float) -> float:
        return round(when - self.epoch, 2)

    def _engine(self, when: float | None) -> float | None:
        """An engine time (the host's clock) on the run's clock."""
        if when is None or not self.timebase.dilated:
            return when
        return self.timebase.emulated(when)

    def poll(self) -> None:
        now = self.clock()
        if now - self._last_poll >= self.interval:
            self._last_poll = now
            self.observe(self._states(), now)

    def dead(self) -> set[str]:
        """The agents known dead, after asking the engine if the last answer is old."""
        self.poll()
        return set(self.failed)

    def finish(self) -> None:
        """Fail the services down now; called once the run's measurements are over."""
        self._last_poll = -float("inf")
        self.poll()
        for node, spans in self.outages.items():
            if spans and spans[-1][1] is None:
                self.failed[node] = f"down since t={spans[-1][0]:.1f} s, not back by the end"

    def facts(self) -> dict[str, list]:
        """Each service's outages, [down, up] in seconds since the epoch (up None: not back)."""
        return {node: spans for node, spans in self.outages.items() if spans}


def engine_time(text: str | None) -> float | None:
    """time.time() of an engine timestamp (RFC 3339, nanoseconds); None for its zero time."""
    if not text or text.startswith("0001-"):
        return None
    from datetime import datetime

    head, _, fraction = text.rstrip("Z").partition(".")
    stamp = datetime.fromisoformat(f"{head}.{(fraction + '000000')[:6]}+00:00")
    return stamp.timestamp()


def cluster_states(cluster, services: list[str]) -> dict[str, Seen]:
    """Every node's Seen: one listing for all, an inspection per service for its times."""
    states = {s.node: Seen(s.state, s.status) for s in cluster.status()}
    for node in services:
        try:
            state = cluster.node(node).state()
        except Exception:  # noqa: BLE001 - removed, or the engine busy: the listing stands
            continue
        states[node] = Seen(state.get("Status", ""), "", engine_time(state.get("StartedAt")),
                            engine_time(state.get("FinishedAt")))
    return states
