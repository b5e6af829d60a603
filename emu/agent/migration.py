"""The agent's part of operator migration: each step of a move, on the scheduler thread.

An instance that may move reads its input through a persistent session of its own, which the
broker holds while the instance moves and the target takes over (emu.agent.input_session says
why a session per instance, and how it drops the copies it processed already).

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
  message sent after the resume arrives, or RESUME_QUIET_S after the connection with none
  (emu.agent.input_session.watch_resume).
- `migrate.rollback` (to the source, after a failure): starts the instance again from where it
  stopped and reconnects its session, which still holds the input: nothing is lost.
- `migrate.release` (housekeeping): the source drops its stopped instance, keeping the
  session; with `abort` the target drops what it prepared.

Exactly once across the move: QoS 1 is at least once, and a message the source processed
whose acknowledgement had not left when it disconnected comes again to the target. The state
the source hands over (emu.agent.instance_state.pack) carries the keys (topic, id, serial
number) of the last SEEN messages it processed (emu.agent.input_session), and an instance
drops an input whose key it saw (the same drops the copies Mosquitto sends per overlapping
subscription). Order is the broker's: one session, queued in order, and the target reads
nothing else before the held messages.

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
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from emu.agent.checkpoint import checkpoint_key, restore_from
from emu.agent.input_session import InputSession, session_address, watch_resume
from emu.agent.instance_state import pack, restore
from emu.agent.operators import Operator, operator_config
from emu.agent.parallel import ParallelSteps
from emu.agent.protocol import COMMANDS as ALL_COMMANDS
from emu.agent.protocol import operator_name
from emu.agent.zookeeper import (
    HANDED,
    LOST,
    NODE_DELETED,
    OWN,
    ZooKeeper,
    ZooKeeperError,
    connect,
)

if TYPE_CHECKING:
    from emu.agent.parts import AgentSurface

# The requests answered when they are over (a drain, a transfer), not at once.
COMMANDS = tuple(c for c in ALL_COMMANDS if c.startswith("migrate.")) + ("replica.retire",)
# ZooKeeper refuses a request bigger than its jute.maxbuffer (1 MiB - 1 by default) as a
# whole: path, framing and the tag byte must fit beside the chunk.
CHUNK_MAX = 1024 * 1024 - 1024
DATA, END = b"D", b"E"


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

    def __init__(self, agent: AgentSurface) -> None:
        self.agent = agent
        self.prepared: dict[str, _Prepared] = {}
        self.paused: dict[str, dict[str, Any]] = {}  # source: operator -> what the pause did
        # Parallel migrations' parts, source and target.
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
                seen = restore(operator, state)
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
        agent = self.agent
        operator = self._instance(args.get("config"))
        config = operator.config
        t_read = agent.clock()

        def restored(state: bytes | None, commit: dict | None, error: str | None) -> None:
            if error is not None:
                answer(error=error)
                return
            seen: list = []
            dropped = 0
            if state is not None:
                try:
                    seen = restore(operator, state)
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
                     lambda *found: agent.scheduler.call(restored, *found))

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


def _host_timeout(agent: AgentSurface, args: dict[str, Any]) -> float:
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


__all__ = ["CHUNK_MAX", "COMMANDS", "Migrations", "state_path", "zk_make_parents"]
