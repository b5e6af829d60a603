"""The nodes and links tables: what the CPUs and infrastructure links did, every `interval`."""

from __future__ import annotations

import numpy as np

from sim.recorder import SeriesLog


def row_starts(times) -> np.ndarray:
    """Each row's start, from the rows' times: the sample before it (every interval, and the
    run's end when the interval does not divide it), 0 for the first."""
    times = np.asarray(times, dtype=float)
    samples = np.unique(times)
    starts = np.concatenate(([0.0], samples[:-1]))
    return starts[np.searchsorted(samples, times)]


class Sampler:
    """CPU, memory, queue and whether it is up (always, in the model), per node; bytes,
    utilisation and latency per link between infrastructure nodes (device links would swamp
    the table). Utilisation comes from the
    work the servers admitted less what they still had queued, so it is exact per interval."""

    def __init__(self, env, topology, cpus: list, channels: list, interval: float, until: float,
                 mean_size: float):
        self.env = env
        self.nodes = topology.nodes
        self.cpus = cpus
        self.channels = [c for c in channels if self.nodes[c.src].kind != "device"
                         and self.nodes[c.dst].kind != "device"]
        self.interval = interval
        self.until = until
        self.mean_size = mean_size
        self.nodes_log = SeriesLog("t", "node", "cpu", "memory", "queue", "up")
        self.links_log = SeriesLog("t", "link", "src", "dst", "bytes", "utilisation", "latency")

    def run(self):
        """A sample every `interval`, and one at the run's end for the part of an interval
        left when `interval` does not divide the run: the rows cover the run whole (a row's
        figures are over its own span, from the sample before it)."""
        interval, nodes = self.interval, self.nodes
        cpus = [(cpu, cpu.name, cpu.capacity, nodes[cpu.name].profile.base_memory)
                for cpu in self.cpus]
        # A CPU does at most its cores' work in a span: work admitted beside its queue (a Spark
        # batch, Cpu.beside) while every core is busy is done after, in the next spans.
        done_work = [0.0] * len(cpus)
        links = _LinkCounters(self.channels)
        node_row = self.nodes_log.add
        t = 0.0
        while t < self.until - 1e-9:
            span = interval if t + interval <= self.until + 1e-9 else self.until - t
            yield self.env.timeout(span)
            t = self.env.now
            for i, (cpu, name, capacity, base_memory) in enumerate(cpus):
                work = min(cpu.work - cpu.backlog(t), done_work[i] + cpu.cores * span)
                queue = cpu.queue_length(t)
                node_row(t, name, (work - done_work[i]) / (capacity * span),
                         base_memory + queue * self.mean_size, queue, True)
                done_work[i] = work
            links.sample(t, span, self.links_log)


class _LinkCounters:
    """The links' running totals at the last sample, to take differences from, for all links
    at once: a sample has a row per link direction, hundreds of them."""

    def __init__(self, channels: list):
        self.channels = channels
        self.names = [f"{c.src}>{c.dst}" for c in channels]
        self.src = [c.src for c in channels]
        self.dst = [c.dst for c in channels]
        self.bytes = np.zeros(len(channels), dtype=np.int64)
        self.messages = np.zeros(len(channels), dtype=np.int64)
        self.delay = np.zeros(len(channels))
        self.busy = np.zeros(len(channels))

    def sample(self, t: float, interval: float, log: SeriesLog) -> None:
        channels = self.channels
        sent = np.array([c.bytes for c in channels], dtype=np.int64)
        messages = np.array([c.messages for c in channels], dtype=np.int64)
        delay = np.array([c.delay_sum for c in channels], dtype=float)
        free = np.array([c.free for c in channels], dtype=float)
        # Serialisation still queued at t is not done yet (Channel.backlog, elementwise): from
        # t, or from the start of the link's current run of sends when that is later (a
        # message handed over for a later time, as a stalled broker's, leaves the link idle
        # until then). The time done never goes back: earlier runs also booked ahead are rare,
        # and all of it is counted once the link has no backlog.
        booked = np.array([c.busy for c in channels], dtype=float)
        began = np.maximum(np.array([c.run_start for c in channels], dtype=float), t)
        busy = np.maximum(booked - np.where(free > t, free - began, 0.0), self.busy)
        count = messages - self.messages
        latency = np.full(len(channels), np.nan)
        np.divide(delay - self.delay, count, out=latency, where=count > 0)
        log.extend([t] * len(channels), self.names, self.src, self.dst,
                   (sent - self.bytes).tolist(), ((busy - self.busy) / interval).tolist(),
                   latency.tolist())
        self.bytes, self.messages, self.delay, self.busy = sent, messages, delay, busy
