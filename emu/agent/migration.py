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

Parallel migration (thesis chapter 6) runs through the same requests, with `parallel` in
their arguments, and two of its own (`migrate.divert`, `migrate.sync`): this module
dispatches them to emu.agent.parallel, which says how the source mirrors its input and
the target's consistency checker decides what goes downstream; an `InputSession` there
stamps and mirrors each input (`mirror`) before the instance processes it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from emu.agent.mqtt import (
    RECONNECT_DELAYS_S,
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
from emu.agent.zookeeper import (
    HANDED,
    LOST,
    NODE_DELETED,
    OWN,
    NoNodeError,
    ZooKeeper,
    ZooKeeperError,
    connect,
)

if TYPE_CHECKING:
    from emu.agent.agent import Agent
    from emu.agent.config import AgentConfig, OperatorConfig

# The requests answered when they are over (a drain, a transfer), not at once.
COMMANDS = tuple(c for c in ALL_COMMANDS if c.startswith("migrate.")) + ("replica.retire",)
# ZooKeeper refuses a request bigger than its jute.maxbuffer (1 MiB - 1 by default) as a
# whole: path, framing and the tag byte must fit beside the chunk.
CHUNK_MAX = 1024 * 1024 - 1024
DATA, END = b"D", b"E"
# Keys of the last messages an instance processed, kept to drop redelivered copies: more
# than the QoS 1 messages a broker has in flight to one client (Mosquitto: 20 by default).
SEEN = 1024
RESUME_QUIET_S = 1.0
KEEPALIVE = 30
# A paused session's client stops before it would connect again (its loop ends in 1 s steps).
PAUSED_RECONNECT_S = 3600
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


def session_address(node: AgentConfig, operator: OperatorConfig) -> str:
    """The address, from this node, of the broker holding an instance's input session
    (OperatorConfig.broker): the node's own broker, or another it has a link to
    (AgentConfig.other_brokers); a ValueError naming both when the node reaches it not."""
    broker = operator.broker
    if not broker or broker == node.broker:  # None or "": the node's own
        return node.mqtt
    if broker in node.other_brokers:
        return node.other_brokers[broker]
    reached = ", ".join(sorted({node.broker or "its own", *node.other_brokers}))
    raise ValueError(f"operator {operator.name!r} reads through its input session "
                     f"{operator.session} on broker {broker}, and node {node.node} has no link "
                     f"to {broker} (it reaches {reached}): the cluster's plan gives a node "
                     "links to the brokers of the instances that may move to it")


def _key(topic: str, envelope: Envelope) -> tuple:
    return (topic, envelope.id, envelope.sn)


class InputSession:
    """An operator instance's own persistent MQTT session (client id = config.session)."""

    def __init__(self, agent: Agent, operator: Operator) -> None:
        self.agent = agent
        self.name = operator.name
        self.client_id = operator.config.session
        # The broker holding the session, which may be another than the node's (a target
        # behind another broker takes it over there).
        self.address = session_address(agent.config, operator.config)
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
        host, port = broker_address(self.address)
        self.client.reconnect_delay_set(*RECONNECT_DELAYS_S)
        self.client.connect_async(host, port, keepalive=self.agent.keepalive, **session_args())
        self.client.loop_start()

    def pause(self, done: Callable[[], None]) -> None:
        """Leave the broker without ending the session: it holds the input from now on.

        A half-close, not a DISCONNECT packet: the client shuts its socket's sending side and
        reads on until the broker, seeing the end, closes its own. A message the broker wrote
        before it saw the end is read and processed here (a QoS 0 message lost on the wire
        otherwise: it has no acknowledgement to bring it again); everything after the end the
        broker holds in the session. `done` runs on the scheduler behind the last message read.
        """
        self.on_disconnected = done
        # Paho would connect again after its reconnect delay: not before this loop is stopped.
        self.client.reconnect_delay_set(min_delay=PAUSED_RECONNECT_S,
                                        max_delay=PAUSED_RECONNECT_S)
        sock = self.client.socket()
        try:
            if sock is None:
                raise OSError("not connected")
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # not connected now: the broker holds everything already
            self.on_disconnected = None
            self.agent.scheduler.call(done)

    def leave(self, done: Callable[[], None]) -> None:
        """Unsubscribe from every filter; `done` on the scheduler behind the last message the
        broker sent before (the UNSUBACK follows them on the connection)."""
        self.client.on_unsubscribe = lambda *args: self.agent.scheduler.call(done)
        result, _ = self.client.unsubscribe(self.filters)
        if result != 0:  # not connected: nothing comes any more
            self.agent.scheduler.call(done)

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
        # A new session (or one the broker lost): subscribe; a held one kept them, but for
        # its shared subscriptions: Mosquitto 2.0 restores a session from its database after
        # a restart without them (measured on 2.0.11: session present, nothing delivered;
        # the nemesis's replication runs lost every reading after a broker restart).
        wanted = (self.filters if not self.present else
                  [f for f in self.filters if f.startswith("$share/")])
        if wanted:
            client.subscribe([(f, 1) for f in wanted])  # _on_subscribe: ready
        else:
            self.subscribed.set()
            self.agent.scheduler.call(self.agent.session_ready)

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
        # Parallel migrations' parts, source and target (imported here, not at the top:
        # emu.agent.parallel builds on this module's InputSession).
        from emu.agent.parallel import ParallelSteps

        self.parallel = ParallelSteps(agent)

    def handle(self, command: str, args: dict[str, Any], answer: Callable[..., None]) -> None:
        step = {"migrate.prepare": self._prepare, "migrate.pause": self._pause,
                "migrate.resume": self._resume, "migrate.rollback": self._rollback,
                "migrate.release": self._release, "migrate.divert": self._divert,
                "migrate.sync": self.parallel.sync, "migrate.recover": self._recover,
                "replica.retire": self._retire}[command]
        step(args, answer)

    def close(self) -> None:
        """The agent stops: end the parallel migrations' own sessions."""
        self.parallel.close()

    # Role assignment --------------------------------------------------------------------------

    def _prepare(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        agent = self.agent
        if args.get("role") == "source":
            operator = agent.operator(operator_name(args))
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
        operator = self._instance(args.get("config"))
        config = operator.config
        if args.get("parallel") is not None:
            self.parallel.prepare(operator, args["parallel"], answer)
            return
        path = args.get("path")
        prepared = self.prepared[config.name] = _Prepared(operator, bool(path))
        if path:
            if not agent.config.zookeeper:
                raise ValueError(f"{agent.node} has no ZooKeeper to retrieve the state from")
            threading.Thread(target=self._retrieve, name="foglab-retrieve", daemon=True,
                             args=(prepared, path, _host_timeout(agent, args))).start()
        answer({"t": agent.clock()})

    def _divert(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        self.parallel.divert(args, answer, self.paused)

    # Source -----------------------------------------------------------------------------------

    def _pause(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        agent = self.agent
        operator = agent.operator(operator_name(args))
        session = agent.sessions.get(operator.name)
        if session is None:
            raise ValueError(f"operator {operator.name!r} has no input session on {agent.node}")
        if operator.name in self.paused:
            raise ValueError(f"operator {operator.name!r} is paused already")
        path = args.get("path")
        chunk = min(int(args.get("chunk", CHUNK_MAX)), CHUNK_MAX)
        timeout = _host_timeout(agent, args)
        done: dict[str, Any] = {"t_pause": agent.clock()}
        self.paused[operator.name] = done

        parallel = operator.name in self.parallel.diverted

        def drained() -> None:
            # Everything the client handed over is processed: the state is final.
            done["t_drained"] = agent.clock()
            done["processed"] = operator.processed
            agent.set_running(operator.name, False)
            if parallel:  # the input handover: no state moves, the target has it all
                done.update(self.parallel.handed_over(operator, session))
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
        handed, path = path, state_path(path)
        try:
            with _session(agent.config.zookeeper) as zk:
                zk_make_parents(zk, path, handed)
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
        name = operator_name(args)
        self.agent.operator(name)
        # A parallel migration's source: mirroring stops, what did not go downstream goes.
        if not self.parallel.take_back(name, args.get("covered"),
                                       lambda taken: self._take_up(name, taken, answer)):
            if name not in self.paused:
                raise ValueError(f"operator {name!r} is not paused on {self.agent.node}")
            self._take_up(name, None, answer)

    def _take_up(self, name: str, taken: dict[str, Any] | None,
                 answer: Callable[..., None]) -> None:
        """The rest of a rollback on the source: a paused session is taken up again."""
        agent = self.agent
        result = taken or {}
        if self.paused.pop(name, None) is None:
            answer({"t": agent.clock(), **result})
            return
        operator = agent.operator(name)
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
        path = state_path(path)
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
        name = operator_name(args)
        if args.get("parallel") is not None:
            self.parallel.handover(name, args["parallel"], answer)
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
                seen = _restore(operator, state)
            except (ValueError, KeyError) as error:
                answer(error=f"restoring operator {name!r}: {error}")
                return
            del self.prepared[name]
            self._take_over(operator, seen, answer, {
                "t_restore": t_restore, "t_restored": agent.clock(), "chunks": prepared.chunks,
                "t_retrieved": prepared.t_retrieved, "state_bytes": len(state)})

        if prepared.transfer and not prepared.done.is_set():
            prepared.waiting = go
        else:
            go()

    def _instance(self, config: Any) -> Operator:
        """A target's instance, not yet installed, from the OperatorConfig a request gives."""
        agent = self.agent
        if not isinstance(config, dict):
            raise ValueError("a target needs 'config', the instance's OperatorConfig")
        config = operator_config(config)
        if not config.session:
            raise ValueError(f"operator {config.name!r} has no input session to take over")
        if config.name in agent.operators:
            raise ValueError(f"operator {config.name!r} runs on {agent.node} already")
        if config.records is not None:
            config.records = agent.config.records
        session_address(agent.config, config)  # refused now, before the source pauses
        return Operator(config, agent.node, agent.epoch)

    def _take_over(self, operator: Operator, seen: list, answer: Callable[..., None],
                   result: dict[str, Any]) -> None:
        """A restored instance starts and takes its input session over: the broker hands it
        what it held; `answer(result, ...)` once that is processed (watch_resume)."""
        agent = self.agent
        session = InputSession(agent, operator)
        session.remember(seen)
        watch_resume(agent, session, answer, result)
        agent.sessions[operator.name] = session
        agent.install(operator)  # connects the session: the broker hands the input over
        agent.arm(operator)

    def _recover(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        """A crashed node's instance started here (workloads.recovery): built from its config,
        restored from its last checkpoint in ZooKeeper (emu.agent.checkpoint; none yet: it
        starts empty), then connected to its input session, which the broker held since the
        crash (taking it over ends the dead connection). Answers as a resume does, once the
        held input is processed, with the checkpoint's time and size."""
        from emu.agent.checkpoint import checkpoint_key, restore_from

        agent = self.agent
        operator = self._instance(args.get("config"))
        config = operator.config
        t_read = agent.clock()

        def restore(state: bytes | None, commit: dict | None, error: str | None) -> None:
            if error is not None:
                answer(error=error)
                return
            seen: list = []
            dropped = 0
            if state is not None:
                try:
                    seen = _restore(operator, state)
                except (ValueError, KeyError) as failed:
                    answer(error=f"restoring operator {config.name!r}: {failed}")
                    return
                if operator.window is not None and commit.get("closed") is not None:
                    # windows the crashed instance sent on after the checkpoint: not again
                    dropped = operator.window.window.drop_through(commit["closed"])
            if config.name in agent.operators:
                answer(error=f"operator {config.name!r} runs on {agent.node} already")
                return
            self._take_over(operator, seen, answer, {
                "t_read": t_read, "t_restored": agent.clock(),
                "state_bytes": len(state) if state is not None else 0,
                "t_checkpoint": commit["t"] if commit else None,
                "version": commit["version"] if commit else 0, "dropped_window": dropped})

        restore_from(agent.config.zookeeper, checkpoint_key(config),
                     lambda *found: agent.scheduler.call(restore, *found))

    def _retire(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        """A replica leaves its operator's shared subscription (workloads.replication): its
        session unsubscribes (the broker sends it nothing more; what it sent before comes
        first, on the same connection), it processes what came, then it goes, its session
        ended. Answers how many inputs it processed in all."""
        agent = self.agent
        name = operator_name(args)
        operator = agent.operator(name)
        session = agent.sessions.get(name)
        if session is None:
            raise ValueError(f"operator {name!r} reads through the node's session on "
                             f"{agent.node}: only an instance with its own can retire")

        def drained() -> None:
            processed = operator.processed
            agent.uninstall(name)
            answer({"t": agent.clock(), "processed": processed})

        session.leave(drained)

    # Housekeeping -----------------------------------------------------------------------------

    def _release(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        agent = self.agent
        name = operator_name(args)
        released = self.parallel.release(name, bool(args.get("abort")))
        if released is not None:  # a parallel migration's target
            answer(released)
            return
        if args.get("abort"):
            prepared = self.prepared.pop(name, None)
            if prepared is not None:
                prepared.cancelled.set()
            answer({"t": agent.clock(), "dropped": prepared is not None})
            return
        if self.paused.pop(name, None) is None:
            raise ValueError(f"operator {name!r} is not paused on {agent.node}")
        self.parallel.stop(name)
        # The session stays on the broker: it is the target's now.
        agent.sessions.pop(name, None)
        agent.uninstall(name)
        answer({"t": agent.clock()})



def watch_resume(agent: Agent, session: InputSession, answer: Callable[..., None],
                 result: dict[str, Any]) -> None:
    """A target resumes on `session` (the state restored, or the mirror taken up to the
    source's last SN): answer `result` and what the session took once the held input is
    processed: at the first message sent after the connection, or RESUME_QUIET_S after it
    when none comes."""
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


def _restore(operator: Operator, state: bytes) -> list:
    """Restore the operator from a moved or checkpointed state; the keys it had seen."""
    seen, snapshot = unpack(state)
    operator.restore(snapshot)
    return seen


def operator_name(args: dict[str, Any]) -> str:
    name = args.get("operator")
    if not isinstance(name, str) or not name:
        raise ValueError("args need 'operator', the operator's name")
    return name


@contextlib.contextmanager
def _session(hosts: str, timeout: float = 10.0):
    """A ZooKeeper session for one transfer, closed after it."""
    zk = connect(hosts, timeout)
    try:
        yield zk
    finally:
        zk.close()


def state_path(path: str) -> str:
    """The znode a state transfer's chunks take turns at, under the migration's `path`: the
    source makes `path` (HANDED: on a closed cluster only it creates there, the run may
    read and delete, so the target deletes each chunk it took and no other node can put
    one in its place)."""
    return f"{path}/state"


def zk_make_parents(zk: ZooKeeper, path: str, handed: str | None = None) -> None:
    """`path`'s parent made (with its own, SHARED); `handed` (an ancestor of path, its
    parent by default) HANDED."""
    parent = path.rsplit("/", 1)[0]
    if parent and zk.exists(parent) is None:
        with contextlib.suppress(ZooKeeperError):
            zk.create(parent, b"", makepath=True, acl=HANDED if handed == parent else OWN)


def _host_timeout(agent: Agent, args: dict[str, Any]) -> float:
    """A request's `timeout` (emulated seconds, 30 by default) as the threads that wait on
    ZooKeeper count it: host seconds (K times longer at dilation K)."""
    return agent.host_seconds(float(args.get("timeout", 30.0)))


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


__all__ = ["COMMANDS", "InputSession", "Migrations", "NoNodeError", "operator_name", "pack",
           "session_address", "unpack", "watch_resume"]
