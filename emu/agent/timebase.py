"""Time dilation: emulated time runs K times slower than the host's clock.

One mapping, shared by the host and every agent of a run: a host time t (time.time()) is the
emulated time `anchor + (t - anchor) / K`. Everything foglab times runs on it: the agents'
clocks (their drivers' schedules, windows, records: the tables come out in emulated time with
no conversion), the link relays (a delay of d lasts K*d host seconds, a bandwidth of B carries
B/K bytes per host second), the host's run loop, the features' timers, and every timeout of
the real services foglab starts (scaled by K in their configs: emu.cluster.plan,
the agents' timers, on emu.agent.timebase). An emulated node with a CPU limit of c cores then gets
K*c host CPU seconds per emulated second: dilation buys the host time to keep up.

At K = 1 `now` is time.time itself and nothing is converted: an undilated run pays nothing.
What cannot be dilated: the kernel's TCP timers (a retransmission after 200 ms of the host's
time is 200/K ms of emulated time), the JVM's and Python's own pauses, the QEMU translation
cache's warm-up; docs/dilation.md measures their effect.

The DieCast (NSDI 2008) and time-warped network emulation (NSDI 2006) papers established the
technique on VMs; foglab scales the clocks it owns and the services' configs instead of
patching a kernel (notes: ../shared/notes/time-dilation.md, section 5).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class TimeBase:
    """K (`dilation`, at least 1) and the host time at which both clocks agree (`anchor`)."""

    dilation: float = 1.0
    anchor: float = 0.0

    def __post_init__(self) -> None:
        if not self.dilation >= 1.0:
            raise ValueError(f"a dilation is at least 1, not {self.dilation!r}")

    @classmethod
    def starting_now(cls, dilation: float = 1.0) -> TimeBase:
        """A time base anchored at this moment (a run's, made before its cluster is)."""
        return cls(float(dilation), time.time() if dilation != 1.0 else 0.0)

    @property
    def dilated(self) -> bool:
        return self.dilation != 1.0

    @property
    def now(self) -> Callable[[], float]:
        """The emulated clock, a function of no argument (time.time when undilated)."""
        if not self.dilated:
            return time.time
        anchor, k, clock = self.anchor, self.dilation, time.time
        return lambda: anchor + (clock() - anchor) / k

    def emulated(self, host_t: float) -> float:
        """The emulated time of a host time."""
        return self.anchor + (host_t - self.anchor) / self.dilation

    def host(self, emulated_t: float) -> float:
        """The host time of an emulated time."""
        return self.anchor + (emulated_t - self.anchor) * self.dilation

    def host_seconds(self, emulated_s: float) -> float:
        """How long an emulated span lasts on the host's clock."""
        return emulated_s * self.dilation

    def emulated_seconds(self, host_s: float) -> float:
        return host_s / self.dilation

    def sleep(self, emulated_s: float) -> None:
        if emulated_s > 0:
            time.sleep(emulated_s * self.dilation)

    def wait(self, event: threading.Event, emulated_s: float | None) -> bool:
        """event.wait for an emulated span (None: for ever); True if the event was set."""
        return event.wait(None if emulated_s is None else max(0.0, emulated_s) * self.dilation)

    def until(self, emulated_t: float) -> float:
        """Host seconds from now to an emulated time (negative: it has passed)."""
        return (emulated_t - self.now()) * self.dilation


UNDILATED = TimeBase()
