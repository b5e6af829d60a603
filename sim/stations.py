"""FIFO servers computed arithmetically: a node's CPU cores and one direction of a link.

A server knows when it is next free, so a message's start, finish and arrival follow from
arithmetic at the moment it arrives; only its arrival at the next node is a SimPy event.
Both keep running totals (work admitted, bytes) from which the sampler derives utilisation.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from heapq import heapreplace


class Cpu:
    """A node's cores as a FIFO multi-server queue; costs are scaled by the node's speed."""

    __slots__ = ("name", "cores", "speed", "free", "_heap", "work", "starts")

    def __init__(self, name: str, cores: int, speed: float):
        self.name = name
        self.cores = cores
        self.speed = speed
        self.free = 0.0  # single core: when it is next free
        self._heap = [0.0] * cores  # several cores: when each is next free (a heap)
        self.work = 0.0  # seconds of service admitted so far
        self.starts: list[float] = []  # start times not yet reached by the sampler

    def admit(self, now: float, cost: float) -> float:
        """Queue a job of `cost` reference-CPU seconds arriving now; returns its finish time."""
        service = cost / self.speed
        self.work += service
        if self.cores == 1:
            start = self.free if self.free > now else now
            self.free = done = start + service
        else:
            heap = self._heap
            start = heap[0] if heap[0] > now else now
            done = start + service
            heapreplace(heap, done)
        self.starts.append(start)
        return done

    def backlog(self, t: float) -> float:
        """Service seconds admitted but not yet done at time t."""
        if self.cores == 1:
            return self.free - t if self.free > t else 0.0
        return sum(f - t for f in self._heap if f > t)

    def drop(self, now: float) -> None:
        """The node crashed: what it had admitted and not done is gone, its cores idle now."""
        self.work -= self.backlog(now)
        self.free = now
        self._heap = [now] * self.cores
        self.starts.clear()

    def queue_length(self, t: float) -> int:
        """Jobs waiting or in service at time t (FIFO start times never decrease)."""
        starts = self.starts
        started = bisect_right(starts, t)
        del starts[:started]  # the sampler asks at increasing times: these are done with
        busy = (1 if self.free > t else 0) if self.cores == 1 else sum(f > t for f in self._heap)
        return len(starts) + busy


class Channel:
    """One direction of a link: serialisation at its bandwidth, FIFO, propagation, jitter, loss."""

    __slots__ = ("index", "src", "dst", "latency", "jitter", "bits_per_s", "loss", "free",
                 "last_arrival", "rng", "seed", "bytes", "messages", "delay_sum", "busy", "lead")

    def __init__(self, index: int, src: str, dst: str, latency: float, jitter: float,
                 bits_per_s: float | None, loss: float, seed: str):
        """`seed`: of this link's own random stream (jitter, loss), made on its first draw, so
        its draws do not depend on the order in which events elsewhere are processed."""
        self.index = index
        self.src = src
        self.dst = dst
        self.latency = latency
        self.jitter = jitter
        self.bits_per_s = bits_per_s
        self.loss = loss
        self.seed = seed
        self.rng: random.Random | None = None  # about 2.5 kB: only for links that draw
        self.free = 0.0
        self.last_arrival = 0.0
        self.bytes = 0
        self.messages = 0
        self.delay_sum = 0.0
        self.busy = 0.0  # seconds spent serialising
        # Added to the propagation of a leg that starts here: a calibrated link layer's own
        # delay (sim.costs.Costs.lead); the Network passes it for a leg's first link only.
        self.lead = 0.0

    def transmit(self, now: float, size: int, lead: float = 0.0) -> float:
        """Send `size` bytes now; returns the arrival time at the far end, or -1.0 if lost.
        `lead`: a delay added to the propagation (see `lead`)."""
        if self.bits_per_s is None:
            done = now
        else:
            serialise = size * 8 / self.bits_per_s
            start = self.free if self.free > now else now
            self.free = done = start + serialise
            self.busy += serialise
        if self.jitter:
            # Propagation varies around its mean (netem's "20ms 2ms"), never below zero.
            delay = (self.rng or self._draws()).gauss(self.latency, self.jitter)
            arrival = done + (delay if delay > 0.0 else 0.0) + lead
            # The link keeps order, as a TCP connection would: jitter never overtakes.
            if arrival < self.last_arrival:
                arrival = self.last_arrival
            self.last_arrival = arrival
        else:
            arrival = done + self.latency + lead
        self.bytes += size
        self.messages += 1
        self.delay_sum += arrival - now
        if self.loss and (self.rng or self._draws()).random() < self.loss:
            return -1.0
        return arrival

    def _draws(self) -> random.Random:
        self.rng = random.Random(self.seed)
        return self.rng

    def backlog(self, t: float) -> float:
        """Serialisation seconds queued but not yet sent at time t."""
        return self.free - t if self.free > t else 0.0
