"""The agent's part of parallel migration (thesis chapter 6): the source as sequencer and
mirror, the target's consistency checker, and the divert, sync, handover and rollback steps.

emu.agent.migration receives every `migrate.*` request and holds an instance's input session
(`InputSession`) and the steps of chapter 5; a request with `parallel` (and `migrate.divert`,
`migrate.sync`) it hands to `ParallelSteps` here.

The steps, in the order emu.features.moves.by_agents sends them:

- `migrate.prepare` with `parallel` (to the target): builds and starts the instance on a
  client of its own (`_Link`) subscribed to the migration's mirror topic
  (`foglab/migration/<source>/<target>/<tag>/input`) and to the source's diverted outputs
  (`.../old`), with the
  consistency checker (workloads.migration.Synchroniser, S = `sync`); answers once the broker
  has confirmed those subscriptions, so nothing the source sends from then is missed.
- `migrate.divert` (to the source): from now the source is the sequencer. Mosquitto cannot
  stamp serial numbers (the thesis's broker interceptor, notes 4.5), and SNs made by each
  producer only work with one producer; so the source, which reads the one input session,
  gives each input it takes the SN its window uses anyway (the stamped one, else the next
  of its own count), and republishes it so stamped at QoS 1 on the mirror topic before it
  processes it. Both instances see one SN per event, in the source's order. Its window
  outputs go to `.../old` instead of downstream (and not to its windows.csv), and it keeps
  each until the checker says it is covered (`.../covered`: the highest SN that went
  downstream), to send what is not covered itself on a rollback.
- `migrate.sync` (to the target): answered when the checker is synchronised (mode, offset,
  suppressed outputs): then the target's outputs alone go downstream.
- `migrate.pause` with `parallel` (to the source): the input handover. The source leaves its
  session without ending it (the broker holds the input), drains, stops, and answers the last
  SN it stamped and the keys it saw; no state moves.
- `migrate.resume` with `parallel` (to the target): once the target has taken the mirror up
  to that SN, it drops the mirror, connects the input session with the same client id
  (dropping inputs whose keys the source saw), and numbers on from that SN + 1.
- `migrate.release`: the source's instance goes; on the target, with `parallel`, the checker
  goes and the outputs leave as the instance's own. `migrate.rollback` with `parallel` (to the
  source, on a failure): mirroring stops, outputs go downstream again, after the uncovered
  ones it kept (those partly covered cut to the SNs above `covered`, as Alg. 6.3 trims),
  once a barrier it sent itself came back through the broker (`_Diverted` says why), and a
  paused session is taken up again; the target's part goes with `release` + `abort`.

Why the checker runs in the target's agent, not in the broker's node as in the thesis: the
broker here is Mosquitto, which runs no code of ours, and a third process would add a hop
to every output twice (to the checker, then downstream). In the target, its own outputs
reach the checker with no broker between, only the source's cross the broker (as they would
anyway), and once consistent the outputs leave from where the operator will run, so the
end of the migration changes nothing downstream.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Any

from emu.agent.migration import InputSession, operator_name, watch_resume
from emu.agent.mqtt import (
    RECONNECT_DELAYS_S,
    connected,
    end_session,
    new_client,
    no_delay,
    session_args,
    session_present,
)
from emu.agent.operators import Operator
from emu.agent.protocol import Envelope, output_topic

if TYPE_CHECKING:
    from emu.agent.agent import Agent

# A parallel migration's topics and clients (`_Link`): their sessions outlive a dropped
# connection, and a dead agent's go after this long rather than hold mirrored input.
MIGRATION_TOPICS = "foglab/migration"
LINK_EXPIRY_S = 120


def topics(tag: str, source: str, target: str) -> dict[str, str]:
    """A parallel migration's topics: the mirrored input, the source's diverted outputs, the
    highest SN that went downstream (the checker's word to the source), and the source's
    rollback barrier (a message to itself through the broker). Each names its writer, then
    its reader (`<prefix>/<writer>/<reader>/<tag>/<part>`): a closed cluster's ACL lets a
    node write under its own name and read what is meant for it (emu.cluster.access), so no
    node forges a hand-off it is not part of."""
    ways = {"input": (source, target), "old": (source, target),
            "covered": (target, source), "barrier": (source, source)}
    return {part: f"{MIGRATION_TOPICS}/{writer}/{reader}/{tag}/{part}"
            for part, (writer, reader) in ways.items()}


# How long (emulated s) a rollback waits for its barrier to come back through the broker
# before it sends what it kept anyway (a broker that does not answer cannot take it either).
BARRIER_TIMEOUT_S = 2.0


class _Link:
    """A parallel migration's own MQTT client on one side: a persistent MQTT 5 session
    (client id per migration and side; the broker holds its QoS 1 messages across a dropped
    connection, and ends it LINK_EXPIRY_S after an agent died), subscribed at QoS 1 to
    `filters`; each message goes to `handle(topic, payload, qos)` on the scheduler thread,
    `ready()` is called there once the broker confirmed the subscriptions. On the target it
    stands in `agent.sessions` for the instance (so the node's session does not read the
    instance's input), hence `connect`, `subscribed` and `close` as an InputSession's."""

    def __init__(self, agent: Agent, client_id: str, filters: list[str],
                 handle: Callable[[str, bytes, int], None], ready: Callable[[], None]) -> None:
        self.agent = agent
        self.filters = filters
        self.handle = handle
        self.ready = ready
        self.client = new_client(client_id, persistent=True)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self.subscribed = threading.Event()
        self.started = self.closed = False

    def connect(self) -> None:
        from emu.agent.agent import broker_address

        if self.started:
            return
        self.started = True
        arguments = session_args()
        expiry = self.agent.host_seconds(LINK_EXPIRY_S)
        arguments["properties"].SessionExpiryInterval = round(expiry)
        host, port = broker_address(self.agent.config.mqtt)
        self.client.reconnect_delay_set(*RECONNECT_DELAYS_S)
        self.client.connect_async(host, port, keepalive=self.agent.keepalive, **arguments)
        self.client.loop_start()

    def publish(self, topic: str, payload: bytes) -> None:
        self.client.publish(topic, payload, qos=1)  # paho keeps it across a reconnection

    def close(self) -> None:
        """End the session (also from the scheduler thread: the client stops on its own)."""
        if self.closed:
            return
        self.closed = True
        threading.Thread(target=self._end, daemon=True).start()

    def _end(self) -> None:
        self.client.disconnect(properties=end_session())
        self.client.loop_stop()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, *rest: Any) -> None:
        if not connected(rc):
            return
        no_delay(client)
        if not session_present(flags) or not self.subscribed.is_set():
            client.subscribe([(f, 1) for f in self.filters])

    def _on_subscribe(self, *args: Any) -> None:
        if not self.subscribed.is_set():
            self.subscribed.set()
            self.agent.scheduler.call(self._ready)

    def _ready(self) -> None:
        if not self.closed:
            self.ready()
        self.agent.session_ready()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        self.agent.scheduler.call(self._deliver, message.topic, message.payload, message.qos)

    def _deliver(self, topic: str, payload: bytes, qos: int) -> None:
        if not self.closed:
            self.handle(topic, payload, qos)


class _Diverted:
    """A parallel migration's source: it stamps and mirrors its input, and sends its window
    outputs to the checker, keeping those not yet covered downstream.

    What went downstream it learns from downstream itself: its link reads the target's output
    topic (`watch`, on the broker they share), where each window output says its last SN,
    besides the checker's `covered` word. The checker publishes that word after the output,
    from another client: a target killed between the two, or a word still on its way, would
    otherwise make a rollback send a window downstream twice. A rollback first sends itself a
    barrier through the broker: every output the broker took from the target before it comes
    back first (the broker hands one subscriber its messages in the order it took them)."""

    def __init__(self, agent: Agent, operator: Operator, session: InputSession, tag: str,
                 migration: int, watch: str | None = None, target: str = "") -> None:
        self.agent = agent
        self.operator = operator
        self.session = session
        self.topics = topics(tag, agent.node, target)
        self.migration = migration
        self.watch = watch
        self.pending: list[tuple[Envelope, tuple]] = []  # diverted outputs not covered yet
        self.covered = 0  # the highest SN that went downstream, as the checker said
        self.mirrored = 0
        self.barrier: Callable[[], None] | None = None  # a rollback waiting for its barrier
        filters = [self.topics["covered"], self.topics["barrier"], *([watch] if watch else [])]
        self.link = _Link(agent, f"foglab-mirror-{tag}-source", filters, self._heard,
                          lambda: None)

    def mirror(self, envelope: Envelope) -> None:
        """Stamp the input with the SN the window gives it and mirror it to the target."""
        window = self.operator.window
        assert window is not None
        if envelope.sn is None:
            envelope.sn = window.next_sn
        self.mirrored += 1
        self.link.publish(self.topics["input"], envelope.encode())

    def output(self, output: Envelope, row: tuple) -> None:
        """A closed window of the source: to the checker, kept until covered."""
        self.pending.append((output, row))
        self.link.publish(self.topics["old"], json.dumps(
            {"row": row, "message": output.encode().decode()}, separators=(",", ":")).encode())

    def _heard(self, topic: str, payload: bytes, qos: int) -> None:
        if topic == self.topics["barrier"]:
            go, self.barrier = self.barrier, None
            if go is not None:
                go()
            return
        try:
            if topic == self.watch:  # a window output of the target, as downstream has it
                covered = int(json.loads(Envelope.decode(payload).body)["last_sn"])
            else:
                covered = int(json.loads(payload)["covered"])
        except (ValueError, TypeError, KeyError):
            return
        self.cover(covered)

    def cover(self, covered: int) -> None:
        """Everything up to SN `covered` went downstream: what is kept below it goes."""
        if covered > self.covered:
            self.covered = covered
            self.pending = [(o, row) for o, row in self.pending if row[7] > covered]

    def hold(self, output: Envelope, row: tuple) -> None:
        """A window that closes while a rollback waits for its barrier: kept, to go
        downstream after the older ones kept, in order."""
        self.pending.append((output, row))

    def roll_back(self, then: Callable[[int], None]) -> None:
        """Mirroring stops; once the barrier came back through the broker (or after
        BARRIER_TIMEOUT_S), what was not covered goes downstream and outputs go straight
        there again; `then(how many went)` on the scheduler thread."""
        agent = self.agent
        self.session.mirror = None
        window = self.operator.window
        assert window is not None
        window.divert = self.hold

        def go() -> None:
            if self.barrier is not go and self.barrier is not None:
                return
            self.barrier = None
            sent = self.take_back()
            window.divert = None
            self.link.close()
            then(sent)

        self.barrier = go
        if not self.link.started or self.link.closed:
            go()
            return
        self.link.publish(self.topics["barrier"], b"{}")
        agent.scheduler.at(agent.clock() + BARRIER_TIMEOUT_S,
                           lambda: go() if self.barrier is go else None)

    def stop(self) -> None:
        self.session.mirror = None
        if self.operator.window is not None:
            self.operator.window.divert = None
        self.link.close()

    def take_back(self) -> int:
        """After a failure: send downstream what the checker did not cover, the partly
        covered output cut to the SNs above `covered`; how many went."""
        window = self.operator.window
        assert window is not None
        sent = 0
        for output, row in self.pending:
            last, count = row[7], row[8]
            if last <= self.covered:
                continue
            kept = min(count, last - self.covered)
            now = self.agent.clock()
            self.agent.emit(self.operator, window.forwarded(output, row, now, last, kept,
                                                            self.migration, kept != count))
            self.covered = last
            sent += 1
        self.pending = []
        return sent


class _Parallel:
    """A parallel migration's target: its instance fed by the mirror, and the consistency
    checker that decides which window outputs, the source's or its own, go downstream."""

    def __init__(self, agent: Agent, operator: Operator, tag: str, sync: int, migration: int,
                 ready: Callable[[], None], source: str = "") -> None:
        from workloads.migration import Side, Synchroniser  # only a target loads it

        self.agent = agent
        self.operator = operator
        self.migration = migration
        self.side = Side
        self.checker = Synchroniser(sync)
        self.topics = topics(tag, source, agent.node)
        self.link = _Link(agent, f"foglab-mirror-{tag}-target",
                          [self.topics["input"], self.topics["old"]], self._mirrored, ready)
        self.mirror_sn = 0       # the last SN taken from the mirror
        self.first_sn: int | None = None
        self.gaps = 0            # SNs the mirror skipped (none, with QoS 1 and a session)
        self.old_sn = -1         # the last source output's SN (a redelivered copy is dropped)
        self.covered = 0
        self.offered: dict[tuple[str, int], tuple[Envelope, tuple]] = {}
        self.forwarded = {"old": 0, "new": 0, "adjusted": 0}
        self.t_first_mirrored: float | None = None
        self.t_sync: float | None = None
        self.on_sync: Callable[..., None] | None = None  # a sync request's answer
        self.waiting: tuple[int, Callable[[], None]] | None = None  # a resume, for an SN
        self.error: str | None = None
        window = operator.window
        assert window is not None
        window.divert = self._new

    def report(self) -> dict[str, Any]:
        checker = self.checker
        return {"mode": checker.mode.value if checker.mode else "", "offset": checker.offset,
                "suppressed_old": checker.suppressed_old,
                "suppressed_new": checker.suppressed_new, "forwarded": dict(self.forwarded),
                "t_sync": self.t_sync, "t_first_mirrored": self.t_first_mirrored,
                "first_sn": self.first_sn, "mirror_sn": self.mirror_sn, "gaps": self.gaps}

    def _mirrored(self, topic: str, payload: bytes, qos: int) -> None:
        if topic == self.topics["old"]:
            self._old(payload)
            return
        try:
            envelope = Envelope.decode(payload)
        except ValueError:
            self.agent.unreadable += 1
            return
        sn = envelope.sn
        if sn is None or sn <= self.mirror_sn:
            return  # a copy sent again
        if self.first_sn is None:
            self.first_sn, self.t_first_mirrored = sn, self.agent.clock()
        elif sn != self.mirror_sn + 1:
            self.gaps += sn - self.mirror_sn - 1
        self.mirror_sn = sn
        # The source has this input on record (received.csv): the target's copy is not.
        self.agent.take(self.operator, envelope, qos, record=False)
        if self.waiting is not None and sn >= self.waiting[0]:
            go = self.waiting[1]
            self.waiting = None
            go()

    def _old(self, payload: bytes) -> None:
        try:
            data = json.loads(payload)
            row, output = tuple(data["row"]), Envelope.decode(data["message"])
        except (ValueError, TypeError, KeyError):
            self.agent.unreadable += 1
            return
        if row[7] <= self.old_sn:
            return  # a copy sent again
        self.old_sn = row[7]
        self._offer(self.side.OLD, output, row)

    def _new(self, output: Envelope, row: tuple) -> None:
        self._offer(self.side.NEW, output, row)

    def _offer(self, side: Any, output: Envelope, row: tuple) -> None:
        checker = self.checker
        self.offered[side.value, row[7]] = (output, row)
        try:
            decided = checker.offer(side, (row[7], row[8]))
        except ValueError as error:
            self.error = f"consistency checker: {error}"
            on_sync, self.on_sync = self.on_sync, None
            if on_sync is not None:
                on_sync(error=self.error)
            return
        for forwarded in decided:
            sn = forwarded.sn
            if forwarded.adjusted and forwarded.side is self.side.OLD:
                sn += checker.offset  # Alg. 6.4 moved its SN by the offset
            original, original_row = self.offered.pop((forwarded.side.value, sn))
            now = self.agent.clock()
            window = self.operator.window
            assert window is not None
            self.agent.emit(self.operator, window.forwarded(
                original, original_row, now, forwarded.sn, forwarded.count, self.migration,
                forwarded.adjusted))
            self.forwarded[forwarded.side.value] += 1
            self.forwarded["adjusted"] += int(forwarded.adjusted)
            if forwarded.sn > self.covered:
                self.covered = forwarded.sn
                self.link.publish(self.topics["covered"], json.dumps(
                    {"covered": self.covered}).encode())
        if not checker.synchronised:
            return
        self.offered.clear()  # from now each output is forwarded or dropped as it comes
        if self.t_sync is None:
            self.t_sync = self.agent.clock()
            on_sync, self.on_sync = self.on_sync, None
            if on_sync is not None:
                on_sync(self.report())

    def finish(self) -> None:
        """The checker's work is over: outputs leave as the instance's own."""
        window = self.operator.window
        if window is not None:
            window.divert = None
        self.link.close()


class ParallelSteps:
    """The parallel migrations of one agent, as source (`diverted`) and as target (`targets`),
    each step as emu.agent.migration.Migrations hands it over; on the scheduler thread.
    `answer(result=None, error=None)` answers a request, at once or later."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.diverted: dict[str, _Diverted] = {}  # source: operator -> its part
        self.targets: dict[str, _Parallel] = {}   # target: operator -> its part

    def close(self) -> None:
        """The agent stops: end the parallel migrations' own sessions."""
        for part in (*self.diverted.values(), *self.targets.values()):
            part.link.close()

    # Role assignment --------------------------------------------------------------------------

    def prepare(self, operator: Operator, parallel: Any, answer: Callable[..., None]) -> None:
        """The target of a parallel migration starts on the mirror, beside its checker;
        answers once the broker has its subscriptions."""
        agent = self.agent
        if not isinstance(parallel, dict) or not isinstance(parallel.get("tag"), str) \
                or not parallel["tag"]:
            raise ValueError("'parallel' must be an object with the migration's 'tag'")
        sync = parallel.get("sync", 2)
        if isinstance(sync, bool) or not isinstance(sync, int) or sync < 0:
            raise ValueError(f"parallel 'sync' (the synchronisation factor S) must be a "
                             f"whole number >= 0, not {sync!r}")
        refused = parallel_refusal(operator, sync)
        if refused:
            raise ValueError(refused)
        epoch = parallel.get("epoch")
        if epoch is not None:
            if isinstance(epoch, bool) or not isinstance(epoch, (int, float)):
                raise ValueError(f"parallel 'epoch' must be the source window's epoch (host "
                                 f"clock), not {epoch!r}")
            # The two instances' windows must span the same times to be paired.
            operator.window.epoch = float(epoch)
        name = operator.name
        if name in self.targets:
            raise ValueError(f"operator {name!r} is in a parallel migration on {agent.node} "
                             "already")

        def ready() -> None:
            answer({"t": agent.clock()})

        source = parallel.get("source")
        if not isinstance(source, str) or not source:
            raise ValueError(f"parallel 'source' must name the migration's source node (its "
                             f"topics name it), not {source!r}")
        part = self.targets[name] = _Parallel(agent, operator, parallel["tag"], sync,
                                              int(parallel.get("migration", -1)), ready, source)
        agent.sessions[name] = part.link  # it reads the mirror, not the node's session
        try:
            agent.install(operator)  # connects the link
        except Exception:
            del self.targets[name]
            agent.sessions.pop(name, None)
            part.link.close()
            raise

    # Source -----------------------------------------------------------------------------------

    def divert(self, args: dict[str, Any], answer: Callable[..., None],
               paused: Container[str]) -> None:
        """A parallel migration's source starts mirroring its input and diverting its
        outputs, once its own client's subscription is confirmed (`paused`: the operators
        a pause has stopped, which cannot move again)."""
        agent = self.agent
        operator = agent.operator(operator_name(args))
        session = agent.sessions.get(operator.name)
        tag = args.get("tag")
        if not isinstance(session, InputSession):
            raise ValueError(f"operator {operator.name!r} has no input session on {agent.node}")
        if not isinstance(tag, str) or not tag:
            raise ValueError("args need 'tag', the migration's name for its topics")
        if operator.name in self.diverted or operator.name in paused:
            raise ValueError(f"operator {operator.name!r} is moving already")
        refused = parallel_refusal(operator, 0)
        if refused:
            raise ValueError(refused)
        target = args.get("target")
        if not isinstance(target, str) or not target:
            raise ValueError(f"args need 'target', the migration's target node (its topics "
                             f"name it), not {target!r}")
        watch = output_topic(operator.config.writes, target) if operator.config.writes else None
        part = self.diverted[operator.name] = _Diverted(agent, operator, session, tag,
                                                        int(args.get("migration", -1)), watch,
                                                        target)

        def start() -> None:
            window = operator.window
            assert window is not None
            if self.diverted.get(operator.name) is not part:
                return  # rolled back meanwhile
            session.mirror = part.mirror
            window.divert = part.output
            answer({"t": agent.clock(), "next_sn": window.next_sn})

        part.link.ready = start
        part.link.connect()

    def handed_over(self, operator: Operator, session: InputSession) -> dict[str, Any]:
        """The source has paused and drained (the input handover): what its pause answers,
        the last SN it stamped and the keys it saw; no state moves, the target has it all."""
        window = operator.window
        assert window is not None
        seen = session.last_seen()
        return {"last_sn": window.next_sn - 1,
                "mirrored": self.diverted[operator.name].mirrored,
                "seen": seen, "last": seen[-64:]}

    def take_back(self, name: str, covered: Any,
                  then: Callable[[dict[str, Any]], None]) -> bool:
        """A rollback on the source: mirroring stops and what did not go downstream goes from
        here, then `then(what the rollback answers)`; False (and `then` not called) if the
        operator was not diverted. The host passes on what a live target said it `covered`:
        its last word to this agent may still be on its way."""
        diverted = self.diverted.pop(name, None)
        if diverted is None:
            return False
        if isinstance(covered, int) and not isinstance(covered, bool):
            diverted.cover(covered)
        diverted.roll_back(lambda sent: then({"taken_back": sent,
                                              "covered": diverted.covered}))
        return True

    def stop(self, name: str) -> None:
        """The source's instance goes (release): it mirrors and diverts no more."""
        diverted = self.diverted.pop(name, None)
        if diverted is not None:
            diverted.stop()

    # Target -----------------------------------------------------------------------------------

    def sync(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        """Answered when the target's checker is synchronised (at once if it is)."""
        name = operator_name(args)
        part = self.targets.get(name)
        if part is None:
            raise ValueError(f"operator {name!r} is not a parallel migration's target on "
                             f"{self.agent.node}")
        if part.error:
            raise ValueError(part.error)
        if part.checker.synchronised:
            answer(part.report())
        else:
            part.on_sync = answer

    def handover(self, name: str, handover: Any, answer: Callable[..., None]) -> None:
        """A parallel migration's target takes the input session over once it has taken
        the mirror up to the source's last SN; it numbers on from there."""
        agent = self.agent
        part = self.targets.get(name)
        if part is None:
            raise ValueError(f"operator {name!r} is not a parallel migration's target on "
                             f"{agent.node}")
        if not isinstance(handover, dict) or not isinstance(handover.get("last_sn"), int):
            raise ValueError("'parallel' must be an object with the source's 'last_sn'")
        last_sn = handover["last_sn"]
        seen = handover.get("seen") or []
        timeout = float(handover.get("timeout", 30.0))
        t_asked = agent.clock()

        def go() -> None:
            operator = part.operator
            window = operator.window
            assert window is not None
            t_mirrored = agent.clock()
            part.link.close()  # the mirror ends: the source stamped nothing after last_sn
            window.next_sn = last_sn + 1
            session = InputSession(agent, operator)
            session.remember(seen)
            watch_resume(agent, session, answer, {
                "t_asked": t_asked, "t_mirrored": t_mirrored, **part.report()})
            agent.sessions[name] = session
            session.connect()

        def late() -> None:
            if part.waiting is not None and part.waiting[1] is go:
                part.waiting = None
                answer(error=f"the mirror reached SN {part.mirror_sn}, not the source's last "
                       f"{last_sn}, within {timeout:g} s")

        if part.mirror_sn >= last_sn:
            go()
        else:
            part.waiting = (last_sn, go)
            agent.scheduler.at(agent.clock() + timeout, late)

    def release(self, name: str, abort: bool) -> dict[str, Any] | None:
        """The target's part goes: the checker, and with `abort` the instance too; what the
        release answers, or None if the operator is no parallel migration's target here."""
        agent = self.agent
        part = self.targets.pop(name, None)
        if part is None:
            return None
        part.finish()
        if abort:
            if name in agent.operators:
                agent.uninstall(name)
            return {"t": agent.clock(), "dropped": True, "covered": part.covered}
        return {"t": agent.clock(), **part.report()}


def parallel_refusal(operator: Operator, sync: int) -> str:
    """Why the operator cannot move by parallel migration ('' if it can): the checker pairs
    the outputs of tumbling windows on time, whose SNs say which events each covered, and
    weak synchronisation adjusts counts by numbers of events (workloads.migration)."""
    name = operator.name
    window = operator.window
    if window is None:
        return (f"operator {name!r} has no window: parallel migration synchronises window "
                "outputs; move it with pause_drain or pause_transfer")
    config = window.config
    if config.kind != "tumbling" or config.basis != "time":
        return (f"operator {name!r} has a {config.kind} {config.basis} window: parallel "
                "migration pairs tumbling time windows (two instances count events from "
                "different starts); move it with pause_transfer")
    if config.aggregate != "count" and sync > 0:
        return (f"operator {name!r} computes a {config.aggregate}: weak synchronisation "
                f"adjusts counts only, so parallel migration needs sync 0 for it, not {sync}")
    return ""


__all__ = ["LINK_EXPIRY_S", "MIGRATION_TOPICS", "ParallelSteps", "parallel_refusal", "topics"]
