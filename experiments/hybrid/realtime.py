"""The hybrid backend's model clock: SimPy in real time beside the emulation, and its lag.

The model (sim.mobile's movement, radio and handover, sim.policy) runs in a
`simpy.rt.RealtimeEnvironment`, not strict: an event is processed once the wall clock reaches
its time, and late when the model cannot keep up. How late is measured, not hidden: every
event's lag (wall clock at its processing minus its due time) is kept, and `Lag` gives the
p50/p99/max the manifest and summary show. Past `warn_s` at p99 the run warns; once the model
is `stop_s` behind, its thread stops and the run ends with a `LagError` naming the cause, so an
overloaded host never produces results that look fine.

The model's time 0 is the emulation's epoch (the run's start on its clock): `start(epoch)`
waits for it, so the model and the containers' drivers begin together.

At a dilation K (emu.agent.timebase, the emulated run's `clock`) the model runs K times slower
than the host's clock, as the containers do: one model second lasts K host seconds (simpy.rt's
factor times K), and its lag is reported, and bounded, in emulated seconds (host lag / K).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from simpy.rt import RealtimeEnvironment

from emu.agent.timebase import UNDILATED, TimeBase

WARN_S = 0.050   # p99 lag above this: the run warns
STOP_S = 2.0     # the model this far behind: the run stops


class LagError(RuntimeError):
    """The model fell too far behind the wall clock for its couplings to mean anything."""


@dataclass(frozen=True)
class Lag:
    """The model's lag behind the wall clock over a run, in seconds."""

    events: int
    p50: float
    p99: float
    max: float

    def facts(self) -> dict[str, float | str | None]:
        """p50/p99/max in ms over `events`; with no event, None and why (`lag_unmeasured`)."""
        if not self.events:
            return {"events": 0, "lag_p50_ms": None, "lag_p99_ms": None, "lag_max_ms": None,
                    "lag_unmeasured": "the model processed no event (it stopped before its "
                                      "first, or never started)"}
        return {"events": self.events, "lag_p50_ms": round(self.p50 * 1e3, 3),
                "lag_p99_ms": round(self.p99 * 1e3, 3), "lag_max_ms": round(self.max * 1e3, 3)}


class LaggingEnvironment(RealtimeEnvironment):
    """A real-time environment that notes each event's lag; `limit` stops it (LagError).
    `factor`: host seconds per model second (K at dilation K); the lags and `limit` are in
    model seconds (the emulated ones), a host lag divided by `factor`."""

    def __init__(self, factor: float = 1.0, limit: float = STOP_S) -> None:
        super().__init__(0.0, factor, strict=False)
        self.limit = limit
        self.lags: list[float] = []
        self.cause = "the model's processes (movement, radio, handover, policy)"

    def step(self) -> None:
        due = self.real_start + (self.peek() - self.env_start) * self.factor
        late = (time.monotonic() - due) / self.factor
        if late > 0.0:
            self.lags.append(late)
            if late > self.limit:
                raise LagError(
                    f"the real-time model is {late:.1f} s behind the wall clock (limit "
                    f"{self.limit:g} s) at model time {self.peek():.1f} s: {self.cause} take "
                    "more CPU than this host gives them; run fewer simulated users or devices, "
                    "or a longer mobility update")
        else:
            self.lags.append(0.0)
        super().step()


class RealTime:
    """The model on a thread of its own, from the epoch for `duration` seconds of model time.

    `build(env)` sets the model's processes up on the environment (called on the model's
    thread, before time 0). `stop()` ends it early; `join()` waits and raises what stopped it.
    `clock`: the emulated run's time base; the epoch is on it, and the model's seconds last
    `factor` times its K host seconds. `stop_s` and the lags are emulated seconds.
    """

    def __init__(self, build: Callable[[LaggingEnvironment], None], duration: float,
                 factor: float = 1.0, stop_s: float = STOP_S,
                 clock: TimeBase = UNDILATED) -> None:
        self.build = build
        self.duration = duration
        self.clock = clock
        self.env = LaggingEnvironment(factor * clock.dilation, stop_s)
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, epoch: float) -> None:
        self._thread = threading.Thread(target=self._run, args=(epoch,), name="foglab-model",
                                        daemon=True)
        self._thread.start()

    def _run(self, epoch: float) -> None:
        env = self.env
        try:
            self.build(env)
            stopped = env.event()

            def watch():  # between the model's events, so a stop needs no other thread
                while not self._stop.is_set():
                    yield env.timeout(0.1)
                stopped.succeed()

            env.process(watch())
            wait = self.clock.until(epoch)  # host seconds
            if wait > 0 and self._stop.wait(wait):
                return
            env.sync()
            env.run(until=env.any_of([env.timeout(self.duration), stopped]))
        except BaseException as error:  # noqa: BLE001 - handed to whoever joins
            self.error = error

    @property
    def failed(self) -> BaseException | None:
        return self.error

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> Lag:
        """Wait for the model's end (stopping it first with `stop()` if wanted), at most
        `timeout` emulated seconds; its lag."""
        if self._thread is not None:
            self._thread.join(None if timeout is None else self.clock.host_seconds(timeout))
        if self.error is not None:
            raise self.error
        return lag_of(self.env.lags)


def lag_of(lags: list[float]) -> Lag:
    if not lags:
        return Lag(0, 0.0, 0.0, 0.0)
    values = np.asarray(lags)
    return Lag(len(values), float(np.percentile(values, 50)), float(np.percentile(values, 99)),
               float(values.max()))
