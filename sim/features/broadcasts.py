"""Control-message broadcasts in the model: the scenario's `broadcasts` (workloads.broadcast)
sent through the nodes' CPUs and the network the model already has.

A sender holding the message sends it to its children one after the other: each send is a job
of the broadcast's `cost` on the sender's CPU (sim.stations.Cpu, so at the node's speed and
behind whatever else it runs), the next send admitted when the previous one is done (one
thread sends; an event at each send's end, so links and CPU see jobs in time order), and each
message then crosses the links of its route (sim.network, so serialisation at the links'
bandwidth, latency, jitter and loss as every other message; QoS 1: a lost leg is sent again
after RETRY). A worker forwards (tree) as soon as the message arrives.
Recorded: the `broadcasts` table (a row per worker reached) and, in the run's facts, each
broadcast's completion (the latency of its last worker).
"""

from __future__ import annotations

from sim.features.base import Feature
from sim.message import Message
from workloads.broadcast import Planned, resolve, results

RETRY = 1.0  # s: a QoS 1 control message's resend timeout after a loss


class Broadcasts(Feature):
    """Runs a model's (sim.model.Model) broadcasts and records what reached whom, when."""

    def __init__(self, model, broadcasts: list):
        super().__init__(model, broadcasts)
        self.env = model.env
        self.planned: list[Planned] = resolve(broadcasts, model.topology,
                                              model.settings.duration)
        self.rows: list[tuple] = []
        self._in_flight: set[int] = set()  # id() of messages on their way
        self._deliver = [lambda m, plan=plan: self._received(plan, m) for plan in self.planned]
        for plan in self.planned:
            self.env.event_at(plan.at).callbacks.append(lambda _, plan=plan: self._forward(plan, 0))

    def _forward(self, plan: Planned, i: int) -> None:
        """Node i of the plan (0: the sender) sends to its children, one after the other."""
        children = plan.children(i)
        if children:
            self.env.process(self._send(plan, i, children))

    def _send(self, plan: Planned, i: int, children: range):
        model = self.model
        node = plan.source if i == 0 else plan.workers[i - 1]
        cpu = model.cpus[node]
        for child in children:
            # The send's CPU job, admitted now (behind what the node already runs); the
            # message goes on the links when it is done, and the next send starts then.
            yield self.env.event_at(cpu.admit(self.env.now, plan.cost))
            target = plan.workers[child - 1]
            msg = Message(plan.index, -1, model.node_index[node], plan.at, plan.size, 1, RETRY,
                          f"broadcast/{plan.index}")
            msg.sn = child
            self._in_flight.add(id(msg))
            model.network.send(msg, model.path(node, target), self._deliver[plan.index])

    def _received(self, plan: Planned, msg: Message) -> None:
        self._in_flight.discard(id(msg))
        now = self.env.now
        i = msg.sn
        self.rows.append((plan.index, plan.mode, plan.fanout, plan.workers[i - 1],
                          plan.depth(i), plan.at, now, now - plan.at))
        self._forward(plan, i)

    def finish(self, tables: dict, facts: dict) -> None:
        """Add the `broadcasts` table and each broadcast's completion to the facts
        (workloads.broadcast.results); take out control messages still being resent (so no
        other part records them as lost)."""
        in_flight = self._in_flight
        self.env.withdraw(lambda event: id(event) in in_flight)
        tables["broadcasts"], facts["broadcasts"] = results(self.planned, self.rows)
