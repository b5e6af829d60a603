"""Operator instances and gateway drivers: a service cost on their node's CPU, then onward."""

from __future__ import annotations

import math

from sim.message import Message
from sim.stations import Cpu


class OperatorInstance:
    """One instance of a pipeline operator on one node; without `writes` it is a sink."""

    # Slots: a run may have an instance per moving user, and compact objects cache better.
    __slots__ = ("env", "node", "node_index", "cpu", "cost", "selectivity", "out_topic",
                 "out_size", "_publish", "_log", "_credit", "_at", "_on_processed", "processed",
                 "pending", "drained", "first_processed", "latencies")

    def __init__(self, env, node: str, node_index: int, cpu: Cpu, cost: float,
                 selectivity: float, out_topic: str | None, out_size: int | None, publish, log):
        self.env = env
        self.node = node
        self.node_index = node_index
        self.cpu = cpu
        self.cost = cost
        self.selectivity = selectivity
        self.out_topic = out_topic
        self.out_size = out_size
        self._publish = publish
        self._log = log
        self._credit = 0.0
        self._at = env.at
        self._on_processed = [self._processed]
        self.processed = 0
        self.pending = 0  # sent to this instance by a broker and not yet processed
        self.drained = None  # a migration's event, fired when nothing is pending any more
        self.first_processed = math.inf  # for a migration's downtime
        # (finish, finish - emission) of each input, while sim.features.replication watches
        # the instance
        self.latencies: list[tuple[float, float]] | None = None

    @property
    def completions(self) -> list:
        """The callback list of this instance's job finishes: a queued event that has it is
        an input in progress here (sim.features.faults takes them back at a crash)."""
        return self._on_processed

    @property
    def log(self):
        """Where the instance records the inputs it consumed (None: it records none)."""
        return self._log

    def receive(self, msg: Message) -> None:
        now = self.env._now
        done = self.cpu.admit(now, self.cost) if self.cost else now
        if self.latencies is not None:
            self.latencies.append((done, done - msg.t_sent))
        if self.out_topic is None:
            # Nothing follows a sink: its finish is recorded now, with no event for it.
            self._settle(done)
            if self._passes():
                self._log.delivered(msg, self.node_index, done)
            else:
                self._log.filtered(msg, done)
        elif done > now:
            msg.callbacks = self._on_processed
            self._at(msg, done)
        else:
            self._processed(msg)

    def crash(self) -> None:
        """Its node crashed: what it was sent is gone (sim.features.faults takes the jobs
        back), and a migration waiting for it to drain goes on."""
        self.pending = 0
        if self.drained is not None:
            self.drained.succeed()
            self.drained = None

    def _settle(self, t: float) -> None:
        """A message processed at t: one less pending (a migration may wait for none)."""
        self.processed += 1
        self.pending -= 1
        if self.drained is not None and self.pending <= 0:
            self.drained.succeed()
            self.drained = None
        if t < self.first_processed:
            self.first_processed = t

    def _passes(self) -> int:
        """Selectivity as a running credit: 0.25 passes every fourth message, 2 doubles each."""
        if self.selectivity == 1.0:
            return 1
        self._credit += self.selectivity
        # The epsilon keeps float sums exact enough: ten times 0.1 must pass one message.
        outputs = int(self._credit + 1e-9)
        self._credit -= outputs
        return outputs

    def _processed(self, msg: Message) -> None:
        self._settle(self.env._now)
        outputs = self._passes()
        if not outputs:
            self._log.filtered(msg, self.env._now)
            return
        for k in range(outputs):
            out = msg if k == outputs - 1 else msg.copy()
            out.topic = self.out_topic
            if self.out_size is not None:
                out.size = self.out_size
            self._publish(self.node, out)


class Driver:
    """A gateway's device driver: converts each reading (a CPU cost) and publishes it."""

    def __init__(self, env, node: str, cpu: Cpu, cost: float, publish):
        """`publish(node, msg, at=None)`: where converted readings go (sim.model.Model
        sets another when the driver's session moves to another broker)."""
        self.env = env
        self.node = node
        self.cpu = cpu
        self.cost = cost
        self.publish = publish
        self._at = env.at
        self._on_converted = [self._converted]
        self.direct = False  # publish at the finish time, without an event
        self.in_place = False  # publish at once when nothing else happens before the finish

    @property
    def completions(self) -> list:
        """The callback list of this driver's conversions (see OperatorInstance's)."""
        return self._on_converted

    def receive(self, msg: Message) -> None:
        now = self.env._now
        done = self.cpu.admit(now, self.cost) if self.cost else now
        if self.direct:
            self.publish(self.node, msg, done)
        elif done > now:
            if self.in_place and self.env.skip_to(done):
                # The conversion's event would be the next one, and a message's arrival does
                # nothing after handing it over: finishing here changes no order.
                self.publish(self.node, msg)
            else:
                msg.callbacks = self._on_converted
                self._at(msg, done)
        else:
            self.publish(self.node, msg)

    def _converted(self, msg: Message) -> None:
        self.publish(self.node, msg)


def spark_batches(env, instance: OperatorInstance, cost: float, trigger: float, end: float,
                  threads: int = 1, per_message: float = 0.0):
    """A Spark operator's micro-batches (a SimPy process): at every trigger interval that had
    input, the job's fixed cost per batch (planning, scheduling, its state store: sim.costs,
    from the calibration) on the instance's node, beside the per-message `cost` the instance
    charges, and `per_message` for each message the batch read (a calibration's measured
    part per message, which then stands for the instance's). The batch lasts its cost spread
    over the job's `threads` (local[N]: the cores it sees), and one that outlasts its interval
    delays the next, which starts when it ends (Spark's processing-time trigger: never two
    batches at once).

    The batch counts in the node's CPU but holds no core from the messages: on emu a Spark
    operator's message is recorded where it reaches the query (the agent takes it before the
    JVM's batch), so the batch's planning delays no latency the emulation measures, and in
    the model it must not either (four cores busy with a batch would hold every message).
    An instance a migration replaced has no input any more, so it stops charging; its
    successor, made by sim.assembly.instance too, has a process of its own."""
    cpu = instance.cpu
    seen = instance.processed
    t = (math.floor(env.now / trigger) + 1) * trigger  # the job's triggers: every interval
    while t <= end:
        yield env.timeout(t - env.now)
        t += trigger
        if instance.processed != seen:
            read, seen = instance.processed - seen, instance.processed
            service = (cost + per_message * read) / cpu.speed
            cpu.beside(env.now, service, threads)
            done = env.now + service / threads
            if done > t:
                t = done
