"""The agent's part of operator migration: an instance's own input session, and each step.

Why a session per instance, taken over, and not a shared subscription handed from one member
to the other: a shared subscription ($share/g/...) holds nothing while it has no member (the
broker drops, or with one member left delivers to it, what comes during a gap), and Mosquitto
gives a member's in-flight messages to no one else when it leaves; so a pause would lose input
or need both instances subscribed at once. A persistent MQTT 5 session (no clean start, an
expiry) whose client disconnects without ending it is what a broker is made to hold input for:
Mosquitto queues its QoS 1 messages, in order, and gives them to the next connection with the
same client id, whichever node it comes from. So an operator instance with `session` set in
its OperatorConfig reads its input through a client of its own with that id (`InputSession`),
subscribed at QoS 1; the node's session no longer carries that input, and the node's drivers
publish what the instance reads to the broker (the instance may move away from them).

The steps, each a request answered like the others (emu.agent.management), in the thesis's
order (chapter 5, Fig. 5.4):

- `migrate.prepare` (role assignment): to the source, answers the instance's config; to the
  target, with that config, builds the instance (not yet reading) and, for a state transfer,
  starts retrieving (Alg. 5.2: watch the znode, read a chunk, delete it, until 'end').
- `migrate.pause` (pause-transfer, to the source): disconnects the instance's session without
  ending it (from then the broker holds the input), lets the scheduler finish what the client
  had handed over (drain), takes the snapshot and stops the instance; then, for a transfer,
  writes the state to the znode in chunks (Alg. 5.1: a chunk, wait until the target deleted
  it, the next, then 'end'); answers when the last chunk is taken, or with the small state in
  the answer when there is no transfer (pause_drain).
- `migrate.resume` (to the target): restores the state before anything else, starts the
  instance, connects with the session's client id: the broker hands over what it held, in
  order, then the live input. Answers once the held input is processed: when the first
  message sent after the resume arrives, or RESUME_QUIET_S after the connection with none.
- `migrate.rollback` (to the source, after a failure): starts the instance again from where it
  stopped and reconnects its session, which still holds the input: nothing is lost.
- `migrate.release` (housekeeping): the source drops its stopped instance, keeping the
  session; with `abort` the target drops what it prepared.

Exactly once across the move: QoS 1 is at least once, and a message the source processed
whose acknowledgement had not left when it disconnected comes again to the target. The state
the source hands over (`pack`) carries the keys (topic, id, serial number) of the last SEEN
messages it processed, and an instance drops an input whose key it saw (the same drops the
copies Mosquitto sends per overlapping subscription). Order is the broker's: one session,
queued in order, and the target reads nothing else before the held messages.

Parallel migration (thesis chapter 6), the steps in the order emu.migration sends them:

- `migrate.prepare` with `parallel` (to the target): builds and starts the instance on a
  client of its own (`_Link`) subscribed to the migration's mirror topic
  (`foglab/migration/<tag>/input`) and to the source's diverted outputs (`.../old`), with the
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
  and a paused session is taken up again; the target's part goes with `release` + `abort`.

Why the checker runs in the target's agent, not in the broker's node as in the thesis: the
broker here is Mosquitto, which runs no code of ours, and a third process would add a hop
to every output twice (to the checker, then downstream). In the target, its own outputs
reach the checker with no broker between, only the source's cross the broker (as they would
anyway), and once consistent the outputs leave from where the operator will run, so the
end of the migration changes nothing downstream.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from emu.agent.mqtt import (
    connected,
    end_session,
    new_client,
    no_delay,
    session_args,
    session_present,
)
from emu.agent.operators import Operator, operator_config
from emu.agent.protocol import COMMANDS as ALL_COMMANDS
from emu.agent.protocol import Envelope
from emu.agent.zookeeper import LOST, NODE_DELETED, NoNodeError, ZooKeeper, ZooKeeperError

if TYPE_CHECKING:
    from emu.agent.agent import Agent

COMMANDS = tuple(c for c in ALL_COMMANDS if c.startswith("migrate."))
# ZooKeeper refuses a request bigger than its jute.maxbuffer (1 MiB - 1 by default) as a
# whole: path, framing and the tag byte must fit beside the chunk.
CHUNK_MAX = 1024 * 1024 - 1024
DATA, END = b"D", b"E"
# Keys of the last messages an instance processed, kept to drop redelivered copies: more
# than the QoS 1 messages a broker has in flight to one client (Mosquitto: 20 by default).
SEEN = 1024
RESUME_QUIET_S = 1.0
KEEPALIVE = 30
# A parallel migration's topics and clients (`_Link`): their sessions outlive a dropped
# connection, and a dead agent's go after this long rather than hold mirrored input.
MIGRATION_TOPICS = "foglab/migration"
LINK_EXPIRY_S = 120
PACK_MAGIC = b"foglab-migration 1\n"


def pack(seen: list, snapshot: bytes) -> bytes:
    """What moves: a header line (the last keys seen) and the operator's snapshot."""
    header = json.dumps({"seen": seen, "snapshot": len(snapshot)}, separators=(",", ":"))
    return PACK_MAGIC + header.encode() + b"\n" + snapshot


def unpack(data: bytes) -> tuple[list, bytes]:
    if not data.startswith(PACK_MAGIC):
        raise ValueError(f"not a migration state (it starts {bytes(data[:20])!r})")
    end = data.index(b"\n", len(PACK_MAGIC))
    header = json.loads(data[len(PACK_MAGIC):end])
    snapshot = data[end + 1:]
    if len(snapshot) != header["snapshot"]:
        raise ValueError(f"the migration state is cut: {len(snapshot)} bytes of snapshot, its "
                         f"header says {header['snapshot']}")
    return header["seen"], snapshot


def _key(topic: str, envelope: Envelope) -> tuple:
    return (topic, envelope.id, envelope.sn)


class InputSession:
    """An operator instance's own persistent MQTT session (client id = config.session)."""

    def __init__(self, agent: Agent, operator: Operator) -> None:
        self.agent = agent
        self.name = operator.name
        self.client_id = operator.config.session
        self.filters = list(operator.filters)
        self.client = new_client(self.client_id, persistent=True)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.subscribed = threading.Event()
        self.seen: OrderedDict[tuple, None] = OrderedDict()
        self.dropped = 0        # copies already processed (redelivered, or overlapping filters)
        self.present = False    # the broker had the session at the last connection
        self.t_connected: float | None = None
        self.on_disconnected: Callable[[], None] | None = None
        self.on_taken: Callable[[Envelope], None] | None = None  # after each processed input
        # A parallel migration's source: stamps and mirrors each input before processing it.
        self.mirror: Callable[[Envelope], None] | None = None
        self.started = False

    def connect(self) -> None:
        """Connect in the background, once."""
        from emu.agent.agent import broker_address

        if self.started:
            return
        self.started = True
        host, port = broker_address(self.agent.config.mqtt)
        self.client.reconnect_delay_set(min_delay=1, max_delay=4)
        self.client.connect_async(host, port, keepalive=KEEPALIVE, **session_args())
        self.client.loop_start()

    def pause(self, done: Callable[[], None]) -> None:
        """Leave the broker without ending the session: it holds the input from now on."""
        self.on_disconnected = done
        self.client.disconnect()

    def stop_loop(self) -> None:
        """Stop the client's thread (never from its own callbacks)."""
        self.client.loop_stop()

    def close(self) -> None:
        """Leave for good, ending the session (the run is over, or the instance uninstalled)."""
        self.client.disconnect(properties=end_session())
        self.client.loop_stop()

    def remember(self, keys: list) -> None:
        for key in keys:
            self.note(tuple(key))

    def note(self, key: tuple) -> None:
        self.seen[key] = None
        if len(self.seen) > SEEN:
            self.seen.popitem(last=False)

    def last_seen(self) -> list:
        return [list(key) for key in self.seen]

    # MQTT client's thread ---------------------------------------------------------------------

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, *rest: Any) -> None:
        if not connected(rc):
            return
        no_delay(client)
        self.t_connected = self.agent.clock()
        self.present = session_present(flags)
        if self.present:
            self.subscribed.set()
            self.agent.scheduler.call(self.agent.session_ready)
        else:  # a new session (or one the broker lost): subscribe; a held one kept them
            client.subscribe([(f, 1) for f in self.filters])

    def _on_subscribe(self, *args: Any) -> None:
        self.subscribed.set()
        self.agent.scheduler.call(self.agent.session_ready)

    def _on_disconnect(self, client: Any, userdata: Any, *rest: Any) -> None:
        done, self.on_disconnected = self.on_disconnected, None
        if done is not None:
            # Behind every message the client handed over before: the drain.
            self.agent.scheduler.call(done)

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        self.agent.scheduler.call(self._take, message.topic, message.payload, message.qos)

    # Scheduler thread -------------------------------------------------------------------------

    def _take(self, topic: str, payload: bytes, qos: int) -> None:
        agent = self.agent
        operator = agent.operators.get(self.name)
        if operator is None or not operator.running or agent.sessions.get(self.name) is not self:
            return
        try:
            envelope = Envelope.decode(payload)
        except ValueError:
            agent.unreadable += 1
            return
        key = _key(topic, envelope)
        if key in self.seen:
            self.dropped += 1
            return
        self.note(key)
        if self.mirror is not None:
            self.mirror(envelope)
        agent.take(operator, envelope, qos)
        if self.on_taken is not None:
            self.on_taken(envelope)


def topics(tag: str) -> dict[str, str]:
    """A parallel migration's topics: the mirrored input, the source's diverted outputs, and
    the highest SN that went downstream (the checker's word to the source)."""
    return {part: f"{MIGRATION_TOPICS}/{tag}/{part}" for part in ("input", "old", "covered")}


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
        arguments["properties"].SessionExpiryInterval = LINK_EXPIRY_S
        host, port = broker_address(self.agent.config.mqtt)
        self.client.reconnect_delay_set(min_delay=1, max_delay=4)
        self.client.connect_async(host, port, keepalive=KEEPALIVE, **arguments)
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
    outputs to the checker, keeping those not yet covered downstream."""

    def __init__(self, agent: Agent, operator: Operator, session: InputSession, tag: str,
                 migration: int) -> None:
        self.agent = agent
        self.operator = operator
        self.session = session
        self.topics = topics(tag)
        self.migration = migration
        self.pending: list[tuple[Envelope, tuple]] = []  # diverted outputs not covered yet
        self.covered = 0  # the highest SN that went downstream, as the checker said
        self.mirrored = 0
        self.link = _Link(agent, f"foglab-mirror-{tag}-source", [self.topics["covered"]],
                          self._covered, lambda: None)

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

    def _covered(self, topic: str, payload: bytes, qos: int) -> None:
        try:
            covered = int(json.loads(payload)["covered"])
        except (ValueError, TypeError, KeyError):
            return
        if covered > self.covered:
            self.covered = covered
            self.pending = [(o, row) for o, row in self.pending if row[7] > covered]

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
                 ready: Callable[[], None]) -> None:
        from workloads.migration import Side, Synchroniser  # only a target loads it

        self.agent = agent
        self.operator = operator
        self.migration = migration
        self.side = Side
        self.checker = Synchroniser(sync)
        self.topics = topics(tag)
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


class _Prepared:
    """A target's instance waiting for its state: the retrieval's outcome when it is over."""

    def __init__(self, operator: Operator, transfer: bool) -> None:
        self.operator = operator
        self.transfer = transfer
        self.state: bytes | None = None
        self.chunks = 0
        self.error: str | None = None
        self.done = threading.Event()
        self.cancelled = threading.Event()
        self.waiting: Callable[[], None] | None = None  # a resume waiting for the state
        self.t_retrieved: float | None = None


class Migrations:
    """The migration requests of one agent (see the module docstring); on the scheduler thread.
    `answer(result=None, error=None)` answers a request, at once or later."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.prepared: dict[str, _Prepared] = {}
        self.paused: dict[str, dict[str, Any]] = {}  # source: operator -> what the pause did
        self.diverted: dict[str, _Diverted] = {}     # parallel, source: operator -> its part
        self.parallel: dict[str, _Parallel] = {}     # parallel, target: operator -> its part

    def handle(self, command: str, args: dict[str, Any], answer: Callable[..., None]) -> None:
        step = {"migrate.prepare": self._prepare, "migrate.pause": self._pause,
                "migrate.resume": self._resume, "migrate.rollback": self._rollback,
                "migrate.release": self._release, "migrate.divert": self._divert,
                "migrate.sync": self._sync}[command]
        step(args, answer)

    def close(self) -> None:
        """The agent stops: end the parallel migrations' own sessions."""
        for part in (*self.diverted.values(), *self.parallel.values()):
            part.link.close()

    # Role assignment --------------------------------------------------------------------------

    def _prepare(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        agent = self.agent
        if args.get("role") == "source":
            operator = agent.operator(_name(args))
            session = agent.sessions.get(operator.name)
            if session is None:
                raise ValueError(f"operator {operator.name!r} reads through the node's session "
                                 f"on {agent.node}: only an instance with its own input "
                                 "session (OperatorConfig.session) can move")
            window = operator.window
            answer({"config": asdict(operator.config), "stateful": operator.stateful,
                    "window": window is not None,
                    "epoch": window.epoch if window is not None else None, "t": agent.clock()})
            return
        if args.get("role") != "target":
            raise ValueError(f"'role' must be 'source' or 'target', not {args.get('role')!r}")
        config = args.get("config")
        if not isinstance(config, dict):
            raise ValueError("a target needs 'config', the instance's OperatorConfig")
        config = operator_config(config)
        if not config.session:
            raise ValueError(f"operator {config.name!r} has no input session to take over")
        if config.name in agent.operators:
            raise ValueError(f"operator {config.name!r} runs on {agent.node} already")
        if config.records is not None:
            config.records = agent.config.records
        operator = Operator(config, agent.node, agent.epoch)
        if args.get("parallel") is not None:
            self._prepare_parallel(operator, args["parallel"], answer)
            return
        path = args.get("path")
        prepared = self.prepared[config.name] = _Prepared(operator, bool(path))
        if path:
            if not agent.config.zookeeper:
                raise ValueError(f"{agent.node} has no ZooKeeper to retrieve the state from")
            threading.Thread(target=self._retrieve, name="foglab-retrieve", daemon=True,
                             args=(prepared, path, float(args.get("timeout", 30.0)))).start()
        answer({"t": agent.clock()})

    def _prepare_parallel(self, operator: Operator, parallel: Any,
                          answer: Callable[..., None]) -> None:
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
        if name in self.parallel:
            raise ValueError(f"operator {name!r} is in a parallel migration on {agent.node} "
                             "already")

        def ready() -> None:
            answer({"t": agent.clock()})

        part = self.parallel[name] = _Parallel(agent, operator, parallel["tag"], sync,
                                               int(parallel.get("migration", -1)), ready)
        agent.sessions[name] = part.link  # it reads the mirror, not the node's session
        try:
            agent.install(operator)  # connects the link
        except Exception:
            del self.parallel[name]
            agent.sessions.pop(name, None)
            part.link.close()
            raise

    def _divert(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        """A parallel migration's source starts mirroring its input and diverting its
        outputs, once its own client's subscription is confirmed."""
        agent = self.agent
        operator = agent.operator(_name(args))
        session = agent.sessions.get(operator.name)
        tag = args.get("tag")
        if not isinstance(session, InputSession):
            raise ValueError(f"operator {operator.name!r} has no input session on {agent.node}")
        if not isinstance(tag, str) or not tag:
            raise ValueError("args need 'tag', the migration's name for its topics")
        if operator.name in self.diverted or operator.name in self.paused:
            raise ValueError(f"operator {operator.name!r} is moving already")
        refused = parallel_refusal(operator, 0)
        if refused:
            raise ValueError(refused)
        part = self.diverted[operator.name] = _Diverted(agent, operator, session, tag,
                                                        int(args.get("migration", -1)))

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

    def _sync(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        """Answered when the target's checker is synchronised (at once if it is)."""
        name = _name(args)
        part = self.parallel.get(name)
        if part is None:
            raise ValueError(f"operator {name!r} is not a parallel migration's target on "
                             f"{self.agent.node}")
        if part.error:
            raise ValueError(part.error)
        if part.checker.synchronised:
            answer(part.report())
        else:
            part.on_sync = answer

    # Source -----------------------------------------------------------------------------------

    def _pause(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        agent = self.agent
        operator = agent.operator(_name(args))
        session = agent.sessions.get(operator.name)
        if session is None:
            raise ValueError(f"operator {operator.name!r} has no input session on {agent.node}")
        if operator.name in self.paused:
            raise ValueError(f"operator {operator.name!r} is paused already")
        path = args.get("path")
        chunk = min(int(args.get("chunk", CHUNK_MAX)), CHUNK_MAX)
        timeout = float(args.get("timeout", 30.0))
        done: dict[str, Any] = {"t_pause": agent.clock()}
        self.paused[operator.name] = done

        parallel = operator.name in self.diverted

        def drained() -> None:
            # Everything the client handed over is processed: the state is final.
            done["t_drained"] = agent.clock()
            done["processed"] = operator.processed
            agent.set_running(operator.name, False)
            if parallel:  # the input handover: no state moves, the target has it all
                window = operator.window
                assert window is not None
                done["last_sn"] = window.next_sn - 1
                done["mirrored"] = self.diverted[operator.name].mirrored
                done["seen"] = session.last_seen()
                done["last"] = done["seen"][-64:]
                threading.Thread(target=session.stop_loop, daemon=True).start()
                answer(done)
                return
            state = pack(session.last_seen(), operator.snapshot())
            done["t_snapshot"] = agent.clock()
            done["state_bytes"] = len(state)
            done["last"] = session.last_seen()[-64:]
            threading.Thread(target=session.stop_loop, daemon=True).start()
            if not path:
                if operator.stateful:
                    answer(error=f"operator {operator.name!r} holds state: pause_drain would "
                           "lose it; move it with pause_transfer")
                    return
                answer({**done, "state": base64.b64encode(state).decode()})
                return
            threading.Thread(target=self._send, name="foglab-send-state", daemon=True,
                             args=(state, path, chunk, timeout, done, answer)).start()

        session.pause(drained)

    def _send(self, state: bytes, path: str, chunk: int, timeout: float,
              done: dict[str, Any], answer: Callable[..., None]) -> None:
        """Alg. 5.1, on a thread of its own: each chunk written once the target has deleted
        the previous one, then the 'end' flag; answers on the scheduler thread."""
        agent = self.agent
        size = chunk - 1  # the tag byte
        pieces = [state[i:i + size] for i in range(0, len(state), size)] or [b""]
        chunks = 0
        try:
            with _session(agent.config.zookeeper) as zk:
                zk_make_parents(zk, path)
                for number, piece in enumerate(pieces + [None], start=1):
                    what = (f"chunk {number} of {len(pieces)}" if piece is not None
                            else "the 'end' flag")
                    _wait_deleted(zk, path, timeout, what)
                    if piece is None:
                        zk.create(path, END + json.dumps(
                            {"bytes": len(state), "chunks": len(pieces)}).encode())
                    else:
                        zk.create(path, DATA + piece)
                        chunks += 1
                done["t_written"] = agent.clock()
                # The target has read the end once the znode is gone: its state is complete.
                _wait_deleted(zk, path, timeout, "the 'end' flag, read")
        except (ZooKeeperError, OSError, TimeoutError) as error:
            with contextlib.suppress(Exception), _session(agent.config.zookeeper) as zk:
                zk.delete(path)
            agent.scheduler.call(answer, None, f"state transfer to {path} after {chunks} "
                                 f"chunks: {error}")
            return
        done["chunks"] = chunks
        done["t_sent"] = agent.clock()
        agent.scheduler.call(answer, done)

    def _rollback(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        agent = self.agent
        name = _name(args)
        operator = agent.operator(name)
        diverted = self.diverted.pop(name, None)
        result: dict[str, Any] = {}
        if diverted is not None:
            # Mirroring stops; what the checker did not cover goes downstream from here. The
            # host passes on what a live target said it covered: its last word to this agent
            # may still be on its way.
            diverted.stop()
            covered = args.get("covered")
            if isinstance(covered, int) and covered > diverted.covered:
                diverted.covered = covered
            result = {"taken_back": diverted.take_back(), "covered": diverted.covered}
        if self.paused.pop(name, None) is None:
            if diverted is not None:
                answer({"t": agent.clock(), **result})
                return
            raise ValueError(f"operator {name!r} is not paused on {agent.node}")
        old = agent.sessions[name]
        if old.on_disconnected is not None:  # the pause never finished: wait no more for it
            old.on_disconnected = None
        threading.Thread(target=old.stop_loop, daemon=True).start()
        session = InputSession(agent, operator)
        session.seen = old.seen
        agent.sessions[name] = session
        agent.set_running(name, True)
        session.connect()
        answer({"t": agent.clock(), **result})

    # Target -----------------------------------------------------------------------------------

    def _retrieve(self, prepared: _Prepared, path: str, timeout: float) -> None:
        """Alg. 5.2: watch the znode, read a chunk and delete it (the source may then write
        the next), until the 'end' flag."""
        parts: list[bytes] = []
        try:
            with _session(self.agent.config.zookeeper) as zk:
                while not prepared.cancelled.is_set():
                    created = threading.Event()
                    if zk.exists(path, watch=lambda event, e=created: e.set()) is None:
                        if not created.wait(timeout):
                            raise TimeoutError(f"no state came to {path} within {timeout} s")
                        continue
                    data = zk.get(path)
                    zk.delete(path)
                    if data[:1] == END:
                        end = json.loads(data[1:])
                        state = b"".join(parts)
                        if len(state) != end["bytes"] or len(parts) != end["chunks"]:
                            raise ValueError(f"state from {path}: {len(state)} bytes in "
                                             f"{len(parts)} chunks, the source sent "
                                             f"{end['bytes']} in {end['chunks']}")
                        prepared.state, prepared.chunks = state, len(parts)
                        break
                    parts.append(data[1:])
        except (ZooKeeperError, OSError, TimeoutError, ValueError) as error:
            prepared.error = f"retrieving the state from {path}: {error}"
        prepared.t_retrieved = self.agent.clock()
        self.agent.scheduler.call(self._retrieved, prepared)

    def _retrieved(self, prepared: _Prepared) -> None:
        prepared.done.set()
        waiting, prepared.waiting = prepared.waiting, None
        if waiting is not None:
            waiting()

    def _resume(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        agent = self.agent
        name = _name(args)
        if args.get("parallel") is not None:
            self._handover(name, args["parallel"], answer)
            return
        prepared = self.prepared.get(name)
        if prepared is None:
            raise ValueError(f"operator {name!r} was not prepared on {agent.node}")

        def go() -> None:
            if prepared.error:
                answer(error=prepared.error)
                return
            state = prepared.state
            if state is None:
                encoded = args.get("state")
                if not isinstance(encoded, str):
                    answer(error="no state: give 'state' (pause_drain) or prepare a transfer")
                    return
                state = base64.b64decode(encoded)
            operator = prepared.operator
            t_restore = agent.clock()
            try:
                seen, snapshot = unpack(state)
                operator.restore(snapshot)
            except (ValueError, KeyError) as error:
                answer(error=f"restoring operator {name!r}: {error}")
                return
            del self.prepared[name]
            t_restored = agent.clock()
            session = InputSession(agent, operator)
            session.remember(seen)
            self._watch_resume(session, answer, {
                "t_restore": t_restore, "t_restored": t_restored, "chunks": prepared.chunks,
                "t_retrieved": prepared.t_retrieved, "state_bytes": len(state)})
            agent.sessions[name] = session
            agent.install(operator)  # connects the session: the broker hands the input over
            agent.arm(operator)

        if prepared.transfer and not prepared.done.is_set():
            prepared.waiting = go
        else:
            go()

    def _handover(self, name: str, handover: Any, answer: Callable[..., None]) -> None:
        """A parallel migration's target takes the input session over once it has taken
        the mirror up to the source's last SN; it numbers on from there."""
        agent = self.agent
        part = self.parallel.get(name)
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
            self._watch_resume(session, answer, {
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

    def _watch_resume(self, session: InputSession, answer: Callable[..., None],
                      result: dict[str, Any]) -> None:
        """Answer once the held input is processed: at the first message sent after the
        connection, or RESUME_QUIET_S after it when none comes."""
        agent = self.agent
        counts = {"held": 0, "first": []}
        finished = threading.Event()

        def finish() -> None:
            if finished.is_set():
                return
            finished.set()
            session.on_taken = None
            answer({**result, "t_connected": session.t_connected, "present": session.present,
                    "held": counts["held"], "first": counts["first"],
                    "t_first": counts.get("t_first"), "dropped": session.dropped})

        def taken(envelope: Envelope) -> None:
            now = agent.clock()
            if session.t_connected is None or envelope.t < session.t_connected:
                counts["held"] += 1
                counts.setdefault("t_first", now)
                if len(counts["first"]) < 64:
                    counts["first"].append([envelope.id, envelope.sn])
                return
            counts.setdefault("t_first", now)
            finish()

        def quiet() -> None:
            if finished.is_set():
                return
            if session.t_connected is None or counts["held"]:
                agent.scheduler.at(agent.clock() + RESUME_QUIET_S / 4, quiet)
                return
            if agent.clock() - session.t_connected >= RESUME_QUIET_S:
                finish()
            else:
                agent.scheduler.at(session.t_connected + RESUME_QUIET_S, quiet)

        session.on_taken = taken
        agent.scheduler.at(agent.clock() + RESUME_QUIET_S / 4, quiet)

    # Housekeeping -----------------------------------------------------------------------------

    def _release(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        agent = self.agent
        name = _name(args)
        part = self.parallel.pop(name, None)
        if part is not None:  # a parallel migration's target
            part.finish()
            if args.get("abort"):
                if name in agent.operators:
                    agent.uninstall(name)
                answer({"t": agent.clock(), "dropped": True, "covered": part.covered})
            else:
                answer({"t": agent.clock(), **part.report()})
            return
        if args.get("abort"):
            prepared = self.prepared.pop(name, None)
            if prepared is not None:
                prepared.cancelled.set()
            answer({"t": agent.clock(), "dropped": prepared is not None})
            return
        if self.paused.pop(name, None) is None:
            raise ValueError(f"operator {name!r} is not paused on {agent.node}")
        diverted = self.diverted.pop(name, None)
        if diverted is not None:
            diverted.stop()
        # The session stays on the broker: it is the target's now.
        agent.sessions.pop(name, None)
        agent.uninstall(name)
        answer({"t": agent.clock()})


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


def _name(args: dict[str, Any]) -> str:
    name = args.get("operator")
    if not isinstance(name, str) or not name:
        raise ValueError("args need 'operator', the operator's name")
    return name


@contextlib.contextmanager
def _session(hosts: str, timeout: float = 10.0):
    """A ZooKeeper session for one transfer, closed after it."""
    if not hosts:
        raise ZooKeeperError(0, "no ZooKeeper configured on this node")
    zk = ZooKeeper(hosts, timeout)
    zk.start()
    try:
        if not zk.connected.wait(timeout):
            raise TimeoutError(f"ZooKeeper {hosts} did not answer within {timeout} s")
        yield zk
    finally:
        zk.close()


def zk_make_parents(zk: ZooKeeper, path: str) -> None:
    parent = path.rsplit("/", 1)[0]
    if parent and zk.exists(parent) is None:
        with contextlib.suppress(ZooKeeperError):
            zk.create(parent, b"", makepath=True)


def _wait_deleted(zk: ZooKeeper, path: str, timeout: float, what: str) -> None:
    """Until path is gone (the target took what was there), watched, not polled."""
    deadline = time.monotonic() + timeout
    while True:
        gone = threading.Event()
        events: list[int] = []

        def watch(event: int, events: list[int] = events, gone=gone) -> None:
            events.append(event)
            gone.set()

        if zk.exists(path, watch=watch) is None:
            return
        left = deadline - time.monotonic()
        if left <= 0 or not gone.wait(left):
            raise TimeoutError(f"the target did not take {what} within {timeout:g} s")
        if events and events[0] not in (NODE_DELETED, LOST):
            continue  # changed, not deleted: watch again


__all__ = ["COMMANDS", "InputSession", "Migrations", "NoNodeError", "pack", "parallel_refusal",
           "topics", "unpack"]
