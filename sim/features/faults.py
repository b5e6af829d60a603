"""Faults in the model: the scenario's schedule (workloads.faults) applied as SimPy processes.

Each fault acts through the parts the model already has, changing their state for a while:
- crash: the node drops what it holds (the jobs on its CPU, a window operator's open window,
  what a sink had not finished) and serves nothing until it returns; a message arriving at it
  or crossing it is lost, as a link's loss loses it (QoS 0: a `lost` row; QoS 1: the leg's
  sender sends it again after its `retry`), except a device's reading at its crashed gateway,
  which is lost whatever its QoS (on emu the gateway emulates its devices);
- partition: a message whose leg runs from one group to the other is lost at the far side;
- delay, loss: the links' channels take the added latency and jitter, or the added loss rate;
- slow: the node's CPU speed is divided by the factor (jobs admitted meanwhile take longer);
- restart: the broker process is down: QoS 0 messages it had queued are lost, QoS 1 ones
  (persistent sessions) are kept and served when it is back; what publishers send it
  meanwhile is lost at QoS 0 and sent again at QoS 1.
A QoS 1 message still being sent again when the run ends (to a node crashed for good) is
recorded lost then. The arrival check is installed only for a run with faults
(sim.network.Network.check_arrivals), so other runs pay nothing for it. Other features hear
of a crash through sim.model.Model.on_crash, and see the nodes down in `model.down`.
"""

from __future__ import annotations

import math

import numpy as np

from sim.features.base import Feature
from sim.sampler import row_starts
from workloads.faults import Injected, columns, resolve


class FaultSchedule(Feature):
    """Injects a run's faults into a model (sim.model.Model) and records the `faults` table."""

    dynamic = True  # a crash drops work and loses what crosses the node
    changes_links = True  # delay and loss faults

    def __init__(self, model, faults: list):
        super().__init__(model, faults)
        self.env = model.env
        self.injected: list[Injected] = resolve(faults, model.topology,
                                                model.settings.duration)
        self.recorded: list[Injected] = []
        self.down: set[str] = model.down  # crashed nodes
        self.restarting: set[str] = set()  # brokers whose process is down
        self.cuts: list[tuple[frozenset, frozenset]] = []  # partitions in force
        self.held: dict[str, list] = {}  # a restarting broker's QoS 1 messages
        self.crashes: dict[str, list[list[float]]] = {}  # node -> [start, end] spans
        self._kinds = {name: node.kind for name, node in model.topology.nodes.items()}
        self._arrived = model.network.check_arrivals(self._check)
        for fault in self.injected:
            self.env.process(self._run(fault))

    # -- the schedule ---------------------------------------------------------------------

    def _run(self, fault: Injected):
        yield self.env.event_at(fault.t_start)
        self.recorded.append(fault)
        undo = getattr(self, f"_{fault.kind}")(fault)
        if fault.t_end is not None:
            yield self.env.event_at(fault.t_end)
            undo()

    def _crash(self, fault: Injected):
        now = self.env.now
        for node in fault.nodes:
            self.crashes.setdefault(node, []).append([now, math.inf])
            # Down, and the listeners told (sim.features.recovery: what its operators had,
            # first).
            self.model.crashed(node, now)
            self._drop_held_work(node, now)

        def heal():
            for node in fault.nodes:
                self.down.discard(node)
                self.crashes[node][-1][1] = self.env.now
        return heal

    def _partition(self, fault: Injected):
        cut = (frozenset(fault.groups[0]), frozenset(fault.groups[1]))
        self.cuts.append(cut)
        return lambda: self.cuts.remove(cut)

    def _delay(self, fault: Injected):
        added, jitter = fault.params["latency"], fault.params["jitter"]
        saved = [(c, c.latency, c.jitter) for c in self._channels(fault)]
        for channel, latency, own in saved:
            channel.latency = latency + added
            channel.jitter = math.hypot(own, jitter)  # independent variations add in variance

        def heal():
            for channel, latency, own in saved:
                channel.latency, channel.jitter = latency, own
        return heal

    def _loss(self, fault: Injected):
        rate = fault.params["rate"]
        saved = [(c, c.loss) for c in self._channels(fault)]
        for channel, own in saved:
            channel.loss = 1.0 - (1.0 - own) * (1.0 - rate)

        def heal():
            for channel, own in saved:
                channel.loss = own
        return heal

    def _slow(self, fault: Injected):
        factor = fault.params["factor"]
        saved = [(self.model.cpus[node], self.model.cpus[node].speed) for node in fault.nodes]
        for cpu, speed in saved:
            cpu.speed = speed / factor

        def heal():
            for cpu, speed in saved:
                cpu.speed = speed
        return heal

    def _restart(self, fault: Injected):
        for name in fault.nodes:
            broker = self.model.brokers[name]
            self.restarting.add(name)
            kept = self.held.setdefault(name, [])
            for msg in self.env.withdraw(
                    lambda event, serving=broker.completions: event.callbacks is serving):
                if msg.qos:
                    kept.append(msg)
                else:
                    self.model.log.lost(msg, self.env.now)

        def heal():
            for name in fault.nodes:
                self.restarting.discard(name)
                broker = self.model.brokers[name]
                for msg in self.held.pop(name, []):
                    broker.receive(msg)
        return heal

    def _channels(self, fault: Injected) -> list:
        channels = self.model.network.channels
        return [channels[pair] for a, b in fault.links for pair in ((a, b), (b, a))]

    # -- what a crashed node held ---------------------------------------------------------

    def _drop_held_work(self, node: str, now: float) -> None:
        """The node's jobs in progress are lost, its CPU is idle, its open windows empty."""
        model = self.model
        instances = [i for g in model.every_group()
                     for i in (*g.instances, *((g.mirror,) if g.mirror else ())) if i.node == node]
        owners = {id(i.completions) for i in instances}
        driver = model.drivers.get(node)
        if driver is not None:
            owners.add(id(driver.completions))
        if node in model.brokers:
            owners.add(id(model.brokers[node].completions))
        for msg in self.env.withdraw(lambda event: id(event.callbacks) in owners):
            model.log.lost(msg, now)
        for instance in instances:
            instance.crash()
        self._unfinish(model.node_index[node], now)
        cpu = model.cpus.get(node)
        if cpu is not None:
            cpu.drop(now)

    def _unfinish(self, sink: int, now: float) -> None:
        """A sink's messages logged with a finish after the crash (a sink records its finish
        when it admits the job) did not finish: lost."""
        log = self.model.log
        sinks = np.frombuffer(log.sink, dtype=np.int32)
        received = np.frombuffer(log.t_received, dtype=np.float64)
        rows = np.flatnonzero((sinks == sink) & (received > now))
        for row in rows.tolist():
            log.sink[row] = -1
            log.t_received[row] = math.nan
        del sinks, received  # the arrays grow again: no view may outlive this

    # -- the arrival check ------------------------------------------------------------------

    def _check(self, msg) -> None:
        path = msg.path
        channel = path[msg.leg]
        dst = channel.dst
        if dst in self.down:
            if self._kinds[path[0].src] == "device" and self._kinds[dst] == "gateway":
                self.model.log.lost(msg, self.env.now)  # the gateway emulates its devices
            else:
                self.model.network.lose(msg, channel, self.env.now)
            return
        if dst in self.restarting and msg.leg == len(path) - 1 and (
                msg.deliver == self.model.brokers[dst].receive):
            self.model.network.lose(msg, channel, self.env.now)
            return
        if self.cuts:
            origin = path[0].src
            for a, b in self.cuts:
                if (origin in a and dst in b) or (origin in b and dst in a):
                    self.model.network.lose(msg, channel, self.env.now)
                    return
        self._arrived(msg)

    # -- the tables -----------------------------------------------------------------------

    def finish(self, tables: dict, facts: dict) -> None:
        """Add the `faults` table; record as lost the QoS 1 messages still being sent again
        when the run ended (to a node crashed for good, say); mark crashed nodes down in the
        `nodes` table's samples that fall wholly inside a crash."""
        tables["faults"] = columns(self.recorded)
        model = self.model
        unsent = model.network.take_resending()
        for msg in unsent:
            model.log.lost(msg, self.env.now)
        nodes = tables["nodes"]
        if not self.crashes or not len(nodes["t"]):
            return
        t = np.asarray(nodes["t"], dtype=float)
        began = row_starts(t)
        up = np.asarray(nodes["up"], dtype=bool).copy()
        for name, spans in self.crashes.items():
            mine = nodes["node"] == name
            for start, end in spans:
                up[mine & (began >= start - 1e-9) & (t <= end + 1e-9)] = False
        nodes["up"] = up
