"""An operator instance's checkpoints in ZooKeeper (`OperatorConfig.checkpoint`), and the
last one read back by the instance that replaces it after a crash (workloads.recovery).

Every `checkpoint` seconds (half a period off the run's grid: CHECKPOINT_PHASE), the
scheduler takes the instance's state as a migration moves it (emu.agent.instance_state: the
keys its input session saw last, and the operator's snapshot) and a writer thread puts it
into ZooKeeper under `CHECKPOINTS/<key>`
(the instance's session name, `checkpoint_key`): the chunks first (znodes
`<key>/<version>-<i>`, at most CHUNK_MAX bytes each, ZooKeeper's znode limit), then the
commit, the parent's data (the version, its chunks and bytes, and the snapshot's time), then
the previous version's chunks go. A reader takes the commit and then its chunks, so a
checkpoint half written is never read. A write still going when the next is due makes the
next wait for it; a later one replaces a waiting one (the store keeps up with the latest,
never a backlog).

A checkpoint holds the window open when it was taken; that window may close, and go
downstream, before the crash. So each window an instance sends on is marked too
(`<key>/closed`, its number), and the instance restored drops the open windows numbered up to
the mark: their events went out in a window already (what came after the mark is rolled
back with the rest).
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from emu.agent.instance_state import pack
from emu.agent.zookeeper import NodeExistsError, NoNodeError, ZooKeeper, ZooKeeperError, connect

if TYPE_CHECKING:
    from emu.agent.operators import Operator
    from emu.agent.parts import AgentSurface

CHECKPOINTS = "/foglab/checkpoints"
# ZooKeeper refuses a request over its jute.maxbuffer (1 MiB - 1): a chunk with its path
# and framing fits below it.
CHUNK_MAX = 1024 * 1024 - 4096
SESSION_TIMEOUT = 10.0
# Checkpoints fall this far into each period of the run's grid (epoch + (k + PHASE) * period):
# between the closes of windows aligned on the grid, never at one, where a snapshot taken
# just before the close would restore a window already sent on. workloads.recovery has the
# same for the model (a test keeps the two equal; the agent's image carries no pydantic).
CHECKPOINT_PHASE = 0.5


def checkpoint_key(config) -> str:
    """An instance's checkpoints are its input session's (one per instance, and the session
    an instance restored elsewhere takes over), else its operator's."""
    return config.session or config.name


def checkpoint_path(key: str) -> str:
    return f"{CHECKPOINTS}/{key}"


def write(zk: ZooKeeper, operator: str, state: bytes, t: float, chunk: int = CHUNK_MAX,
          previous: dict | None = None) -> dict:
    """One checkpoint of `operator`: its chunks, then the commit, then the old chunks go.
    `previous`: the last commit, when the writer knows it (else it is read)."""
    path = checkpoint_path(operator)
    if previous is None:
        try:
            data = zk.get(path)
            previous = json.loads(data) if data else {}
        except NoNodeError:
            zk.create(path, b"", makepath=True)
            previous = {}
    version = int(previous.get("version", 0)) + 1
    pieces = [state[i:i + chunk] for i in range(0, len(state), chunk)] or [b""]
    for number, piece in enumerate(pieces):
        with contextlib.suppress(ZooKeeperError):  # left by a writer that died mid-way
            zk.delete(f"{path}/{version}-{number}")
        zk.create(f"{path}/{version}-{number}", piece)
    commit = {"version": version, "chunks": len(pieces), "bytes": len(state), "t": t}
    zk.set(path, json.dumps(commit).encode())
    for number in range(int(previous.get("chunks", 0))):
        with contextlib.suppress(ZooKeeperError):
            zk.delete(f"{path}/{previous['version']}-{number}")
    return commit


def mark_closed(zk: ZooKeeper, operator: str, window: int) -> None:
    """Note the number of the last window `operator` sent on."""
    path = f"{checkpoint_path(operator)}/closed"
    try:
        zk.set(path, str(window).encode())
    except NoNodeError:
        # The instance's znode first, its own (not a SHARED parent: it writes the commit
        # there); a recovery's target is handed both (emu.features.recovery).
        with contextlib.suppress(NodeExistsError):
            zk.create(checkpoint_path(operator), b"", makepath=True)
        zk.create(path, str(window).encode())


def read(zk: ZooKeeper, operator: str) -> tuple[bytes, dict] | None:
    """The last committed checkpoint of `operator` and its commit, with `closed`, the last
    window it marked sent (None: none); None when it has no checkpoint."""
    path = checkpoint_path(operator)
    try:
        data = zk.get(path)
    except NoNodeError:
        return None
    if not data:
        return None
    commit = json.loads(data)
    try:
        commit["closed"] = int(zk.get(f"{path}/closed"))
    except NoNodeError:
        commit["closed"] = None
    state = b"".join(zk.get(f"{path}/{commit['version']}-{number}")
                     for number in range(commit["chunks"]))
    if len(state) != commit["bytes"]:
        raise ValueError(f"checkpoint {path} version {commit['version']}: {len(state)} bytes, "
                         f"its commit says {commit['bytes']}")
    return state, commit


class Checkpoints:
    """The node's checkpointing instances: the timers on the scheduler, the writes on a
    thread with a ZooKeeper session of its own (opened at the first write)."""

    def __init__(self, agent: AgentSurface) -> None:
        self.agent = agent
        self._due: dict[str, tuple[bytes, float]] = {}  # operator -> latest state waiting
        self._closed: dict[str, int] = {}  # operator -> the last window sent, to mark
        self._commits: dict[str, dict] = {}  # operator -> its last commit (the writer's)
        # operator -> the instance and token its timer runs for
        self._armed: dict[str, tuple[Operator, int]] = {}
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.written = 0
        self.errors: list[str] = []

    def arm(self, operator: Operator) -> None:
        """From now, checkpoint the instance on the run's grid (epoch + k * period)."""
        period = operator.config.checkpoint
        if not period or self.agent.epoch is None or not self.agent.drivers.started:
            return
        armed = self._armed.get(operator.name)
        if armed is not None and armed[0] is operator and armed[1] == operator.token:
            return  # its timer runs already
        self._armed[operator.name] = (operator, operator.token)
        key = checkpoint_key(operator.config)
        # Another node may have written its checkpoints since this one last did (a move away
        # and back): the writer reads the last commit again before its next write.
        self._commits.pop(key, None)
        if operator.window is not None:
            operator.window.on_closed = lambda window: self._mark(key, window)
        now = self.agent.clock()
        epoch = self.agent.epoch
        k = max(0, math.floor((now - epoch) / period - CHECKPOINT_PHASE) + 1)
        self.agent.scheduler.at(epoch + (k + CHECKPOINT_PHASE) * period, self._take, operator,
                                operator.token, k)

    def _take(self, operator: Operator, token: int, k: int) -> None:
        """On the scheduler: the instance's state now, for the writer; the next timer."""
        agent = self.agent
        if agent.operators.get(operator.name) is not operator or token != operator.token:
            return  # moved away, paused or uninstalled: its next owner checkpoints it
        session = agent.sessions.get(operator.name)
        seen = session.last_seen() if session is not None else []
        self._hand(checkpoint_key(operator.config), pack(seen, operator.snapshot()),
                   agent.clock())
        period = operator.config.checkpoint
        agent.scheduler.at(agent.epoch + (k + 1 + CHECKPOINT_PHASE) * period, self._take,
                           operator, token, k + 1)

    def _mark(self, name: str, window: int) -> None:
        with self._wake:
            self._closed[name] = window
            self._start()
            self._wake.notify()

    def _hand(self, name: str, state: bytes, t: float) -> None:
        with self._wake:
            self._due[name] = (state, t)
            self._start()
            self._wake.notify()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_all, name="foglab-checkpoints",
                                            daemon=True)
            self._thread.start()

    def _write_all(self) -> None:
        zk: ZooKeeper | None = None
        try:
            while True:
                with self._wake:
                    while not self._due and not self._closed and not self._stopping:
                        self._wake.wait()
                    if self._stopping:
                        return
                    # A window's mark first: it is due at once, a state only by the next.
                    mark = self._closed.popitem() if self._closed else None
                    due = self._due.popitem() if mark is None else None
                try:
                    if zk is None:
                        zk = connect(self.agent.config.zookeeper, SESSION_TIMEOUT)
                    if mark is not None:
                        mark_closed(zk, *mark)
                    else:
                        name, (state, t) = due
                        self._commits[name] = write(zk, name, state, t,
                                                    previous=self._commits.get(name))
                        self.written += 1
                except (ZooKeeperError, OSError, TimeoutError) as error:
                    self.errors.append(f"{(mark or due)[0]}: {error}")
                    if zk is not None:
                        with contextlib.suppress(Exception):
                            zk.close()
                    zk = None
        finally:
            if zk is not None:
                with contextlib.suppress(Exception):
                    zk.close()

    def close(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(2.0)


def restore_from(hosts: str, operator: str, done: Callable[..., None]) -> None:
    """Read the operator's last checkpoint on a thread; `done(state, commit, error)` after."""

    def run() -> None:
        try:
            zk = connect(hosts, SESSION_TIMEOUT)
            try:
                found = read(zk, operator)
            finally:
                zk.close()
        except (ZooKeeperError, OSError, TimeoutError, ValueError) as error:
            done(None, None, f"reading the checkpoint of {operator!r}: {error}")
            return
        done(*(found or (None, None)), None)

    threading.Thread(target=run, name="foglab-restore", daemon=True).start()

