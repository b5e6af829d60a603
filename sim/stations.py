"""FIFO servers computed arithmetically: a node's CPU cores and one direction of a link.

A server knows when it is next free, so a message's start, finish and arrival follow from
arithmetic at the moment it arrives; only its arrival at the next node is a SimPy event.
Both keep running totals (work admitted, bytes) from which the sampler derives utilisation.

Loss. A link's loss means two things. On a device's radio to its gateway (the gateway's agent
emulates it, emu.agent.drivers) a lost message is gone. Every other link carries TCP (MQTT,
ZooKeeper): a lost packet is retransmitted, so the message arrives one retransmission timeout
late and the later messages of its connection wait behind it (head-of-line blocking), as the
emulation's link relay (emu.links.relay) does it: a message of `size` bytes is ceil(size / MSS)
packets, any of them lost (probability `loss` each) holds it back by Linux's minimum RTO,
whatever the number lost; the retransmission takes no bandwidth.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from heapq import heapreplace

# As emu.links.shaping (RETRANSMISSION_STALL_S, MSS): a test keeps them equal.
RTO_MIN = 0.2  # seconds: Linux's minimum retransmission timeout
MSS = 1460  # bytes of payload per TCP segment


class Cpu:
    """A node's cores as a FIFO multi-server queue; costs are scaled by the node's speed."""

    __slots__ = ("name", "cores", "speed", "free", "_heap", "work", "starts", "capacity",
                 "_beside")

    def __init__(self, name: str, cores: int, speed: float, capacity: float | None = None):
        """`capacity`: the cores (of this CPU's speed) its utilisation is a share of, when not
        its own `cores` (sim.costs: a calibrated node's container limit on the emulation)."""
        self.name = name
        self.cores = cores
        self.speed = speed
        self.capacity = cores if capacity is None else capacity
        self.free = 0.0  # single core: when it is next free
        self._heap = [0.0] * cores  # several cores: when each is next free (a heap)
        self.work = 0.0  # seconds of service admitted so far
        self.starts: list[float] = []  # start times not yet reached by the sampler
        self._beside: list[tuple[float, float, float]] = []  # (start, end, cores) not done

    def beside(self, now: float, service: float, threads: int) -> None:
        """Work that holds no core from the queue (a Spark batch: sim.operators), done from
        now over `threads` at once: it counts in the CPU's work as it is done, not at once,
        so that no sampling interval takes a whole batch that runs past its end."""
        self.work += service
        self._beside.append((now, now + service / threads, float(threads)))

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
            queued = self.free - t if self.free > t else 0.0
        else:
            queued = sum(f - t for f in self._heap if f > t)
        if self._beside:
            self._beside = [job for job in self._beside if job[1] > t]
            queued += sum((end - max(start, t)) * threads
                          for start, end, threads in self._beside)
        return queued

    def drop(self, now: float) -> None:
        """The node crashed: what it had admitted and not done is gone, its cores idle now."""
        self.work -= self.backlog(now)
        self.free = now
        self._heap = [now] * self.cores
        self.starts.clear()
        self._beside.clear()

    def queue_length(self, t: float) -> int:
        """Jobs waiting or in service at time t (FIFO start times never decrease)."""
        starts = self.starts
        started = bisect_right(starts, t)
        del starts[:started]  # the sampler asks at increasing times: these are done with
        busy = (1 if self.free > t else 0) if self.cores == 1 else sum(f > t for f in self._heap)
        return len(starts) + busy


class Channel:
    """One direction of a link: serialisation at its bandwidth, FIFO, propagation, jitter, loss
    (a drop, or on a `tcp` link a retransmission delay: see the module's docstring)."""

    __slots__ = ("index", "src", "dst", "latency", "jitter", "bits_per_s", "loss", "free",
                 "last_arrival", "rng", "seed", "bytes", "messages", "delay_sum", "busy",
                 "run_start", "lead", "tcp", "stall", "stalls", "held")

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
        # When the current run of back-to-back serialisations began: a message handed over
        # for a later time (a stalled broker's send) leaves the link idle until then, which
        # is not queued work (sim.sampler counts what lies after a sample as not done yet).
        self.run_start = 0.0
        # Added to the propagation of a leg that starts here: a calibrated link layer's own
        # delay (sim.costs.Costs.lead); the Network passes it for a leg's first link only.
        self.lead = 0.0
        # Whether the link carries TCP (sim.network.Network decides): its loss then delays.
        self.tcp = False
        self.stall = RTO_MIN  # what a retransmission costs
        self.stalls = 0  # messages held back by a retransmission so far
        # Per connection, the arrival of its last message here: made at the first stall, from
        # when the connection's later messages wait behind it (head-of-line blocking).
        self.held: dict | None = None

    def transmit(self, now: float, size: int, lead: float = 0.0,
                 connection: object = None) -> float:
        """Send `size` bytes now; returns the arrival time at the far end, or -1.0 if lost.
        `lead`: a delay added to the propagation (see `lead`). `connection`: the TCP
        connection the bytes go on (a leg's path; None: the link's only one), whose order a
        retransmission holds."""
        if self.bits_per_s is None:
            done = now
        else:
            serialise = size * 8 / self.bits_per_s
            if self.free > now:
                start = self.free
            else:
                start = self.run_start = now
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
        if self.tcp:
            if self.loss or self.held is not None:
                arrival = self._retransmitted(arrival, size, connection)
        elif self.loss and (self.rng or self._draws()).random() < self.loss:
            self.bytes += size
            self.messages += 1
            self.delay_sum += arrival - now
            return -1.0
        self.bytes += size
        self.messages += 1
        self.delay_sum += arrival - now
        return arrival

    def _retransmitted(self, arrival: float, size: int, connection: object) -> float:
        """A TCP link's arrival: one RTO later if a packet of the message is lost, and never
        before the connection's previous message (it waits behind a retransmission)."""
        if self.loss:
            loss = self.loss if size <= MSS else 1.0 - (1.0 - self.loss) ** math.ceil(size / MSS)
            if (self.rng or self._draws()).random() < loss:
                arrival += self.stall
                self.stalls += 1
                if self.held is None:
                    self.held = {}
        held = self.held
        if held is not None:
            last = held.get(connection, 0.0)
            if arrival < last:
                arrival = last
            held[connection] = arrival
        return arrival

    def _draws(self) -> random.Random:
        self.rng = random.Random(self.seed)
        return self.rng

    def backlog(self, t: float) -> float:
        """Serialisation seconds queued but not yet sent at time t (of the current run of
        sends: see `run_start`)."""
        return self.free - max(t, self.run_start) if self.free > t else 0.0
