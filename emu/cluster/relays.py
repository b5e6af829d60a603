"""Run many link relays on one event loop in one background thread, for synchronous callers.

A cluster has a relay per (client, service) pair: hundreds of them. One loop serves them all;
they are idle most of the time, and one thread keeps the host's two cores for the containers.

Every relayed chunk reaches its receiver by a timer on that loop (emu.links.carry: a timer
per direction delivers each chunk at its arrival time), so the loop's lateness is the links'
error beyond their shape. A probe on the loop measures it: a timer every LAG_PROBE_S, and how
late it fired (`lag`); the run records it with the nodes (emu.host.fidelity). At a time dilation K
the probe still ticks on the host's clock (its cost is the host's), and `lag` is given in
emulated seconds, the host's lateness divided by K: what a link's delay was off by in the
run's own time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Hashable
from concurrent.futures import Future
from typing import Self, TypeVar

from emu.links.lag import LAG_PROBE_S, LagProbe  # noqa: F401 - LAG_PROBE_S: re-exported
from emu.links.relay import LinkRelay, RelayCounters
from emu.links.spec import LinkShape, check_dilation

T = TypeVar("T")

class RelaySet:
    """Relays by key, all on one event loop thread; add, reshape, count and close them."""

    def __init__(self, name: str = "link-relays", dilation: float = 1.0) -> None:
        """`dilation`: the run's K, which `lag` converts by; the relays get their own."""
        self._name = name
        self._dilation = check_dilation(dilation)
        self._relays: dict[Hashable, LinkRelay] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._adding: list[Future] = []  # starts under way, which `stop` waits for
        self._probe = LagProbe()
        self._probing: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._relays)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._relays

    @property
    def running(self) -> bool:
        return self._loop is not None

    def start(self) -> Self:
        if self._loop is not None:
            raise RuntimeError("the relay set is already started")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=self._name,
                                        daemon=True)
        self._thread.start()

        async def probe() -> asyncio.Task[None]:
            return asyncio.get_running_loop().create_task(self._probe.run())

        self._probing = self._run(probe())
        return self

    def add(self, relays: dict[Hashable, LinkRelay]) -> dict[Hashable, int]:
        """Start relays; give each one's listening port. If one fails, none of these is kept.

        An interrupt (Ctrl-C) while they start leaves them starting on the loop: they are
        known from the first, and `stop` waits for their start before it closes them all."""
        for key in relays:
            if key in self._relays:
                raise KeyError(f"a relay for {key!r} is already running")

        async def start_all() -> dict[Hashable, int]:
            started: list[LinkRelay] = []
            try:
                ports = {}
                for key, relay in relays.items():
                    ports[key] = await relay.start()
                    started.append(relay)
                return ports
            except BaseException:
                await asyncio.gather(*(r.close() for r in started), return_exceptions=True)
                raise

        if self._loop is None:
            raise RuntimeError("the relay set is not started")
        self._relays.update(relays)
        future = asyncio.run_coroutine_threadsafe(start_all(), self._loop)
        self._adding.append(future)
        try:
            ports = future.result()
        except Exception:
            for key in relays:  # start_all closed the ones it had started
                self._relays.pop(key, None)
            raise
        self._adding.remove(future)
        return ports

    def relay(self, key: Hashable) -> LinkRelay:
        return self._relays[key]

    def reshape(self, key: Hashable, shape: LinkShape) -> None:
        """Reshape one relay on the loop thread; chunks read after this returns get the shape."""
        self._on_loop(self._relays[key].reshape, shape)

    def counters(self) -> dict[Hashable, RelayCounters]:
        """Every relay's counters, read on the loop thread so they come from one moment."""
        def read() -> dict[Hashable, RelayCounters]:
            return {key: relay.counters() for key, relay in self._relays.items()}

        return read() if self._loop is None else self._on_loop(read)

    def lag(self) -> float | None:
        """How late the loop's timers fired since the last call, at worst, in emulated seconds
        (the host's lateness / K); None before the first probe has fired or when the set is not
        running."""
        if self._loop is None:
            return None
        probes, _, worst = self._on_loop(self._probe.take)
        if not probes:
            return None
        return worst if self._dilation == 1 else worst / self._dilation

    def stop(self) -> None:
        """Close every relay and end the loop thread; a no-op when not started."""
        if self._loop is None:
            return
        try:
            for future in self._adding:
                with contextlib.suppress(Exception):  # its error was the caller's
                    future.result()
            self._adding.clear()
            self._run(self._close_all())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            assert self._thread is not None
            self._thread.join()
            self._loop.close()
            self._loop = None
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def _close_all(self) -> None:
        if self._probing is not None:
            self._probing.cancel()
            await asyncio.gather(self._probing, return_exceptions=True)
            self._probing = None
        await asyncio.gather(*(relay.close() for relay in self._relays.values()),
                             return_exceptions=True)

    def _on_loop(self, function: Callable[..., T], *args: object) -> T:
        async def call() -> T:
            return function(*args)

        return self._run(call())

    def _run(self, coroutine: Coroutine[object, object, T]) -> T:
        if self._loop is None:
            coroutine.close()
            raise RuntimeError("the relay set is not started")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()
