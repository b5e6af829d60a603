"""The nodes and links tables: what the CPUs and infrastructure links did, every `interval`."""

from __future__ import annotations

from sim.recorder import SeriesLog


class Sampler:
    """CPU, memory and queue per node; bytes, utilisation and latency per link between
    infrastructure nodes (device links would swamp the table). Utilisation comes from the
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
        self.nodes_log = SeriesLog("t", "node", "cpu", "memory", "queue")
        self.links_log = SeriesLog("t", "link", "src", "dst", "bytes", "utilisation", "latency")

    def run(self):
        interval, nodes = self.interval, self.nodes
        done_work = {cpu.name: 0.0 for cpu in self.cpus}
        sent = {c.index: (0, 0, 0.0, 0.0) for c in self.channels}
        t = 0.0
        while t + interval <= self.until + 1e-9:
            yield self.env.timeout(interval)
            t = self.env.now
            for cpu in self.cpus:
                work = cpu.work - cpu.backlog(t)
                queue = cpu.queue_length(t)
                self.nodes_log.append(
                    t=t, node=cpu.name,
                    cpu=(work - done_work[cpu.name]) / (cpu.cores * interval),
                    memory=nodes[cpu.name].profile.base_memory + queue * self.mean_size,
                    queue=queue)
                done_work[cpu.name] = work
            for c in self.channels:
                busy = c.busy - c.backlog(t)
                last_bytes, last_messages, last_delay, last_busy = sent[c.index]
                count = c.messages - last_messages
                self.links_log.append(
                    t=t, link=f"{c.src}>{c.dst}", src=c.src, dst=c.dst,
                    bytes=c.bytes - last_bytes, utilisation=(busy - last_busy) / interval,
                    latency=(c.delay_sum - last_delay) / count if count else float("nan"))
                sent[c.index] = (c.bytes, c.messages, c.delay_sum, busy)
