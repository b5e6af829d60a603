"""One relayed TCP connection, carried across a shaped link (emu.links.shaping) by callbacks;
the relay (emu.links.relay) listens, accepts and hands each connection to ``Connections``.

Why callbacks: the relays are most of the testbed's own CPU (docs/host-cpu.md), and their cost
is per message. A stream reader, a queue, a delivery task and a sleep per chunk cost a few
futures and task switches each; here a chunk read (``data_received``) is given its arrival time
at once and queued, and one timer per direction, armed for the head of its queue, writes every
chunk that is due when it fires in one ``transport.write``.

Back-pressure, as TCP's flow control would exert it: a direction stops reading its sender
(``pause_reading``) while a chunk waits for the link's capacity (the token bucket), while
``IN_FLIGHT_CHUNKS`` chunks are on the link, and while the receiver's transport is full
(``pause_writing``); the client is not read until the upstream connection is made.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import cast

from emu.links.peers import Peers
from emu.links.shaping import Direction, Shaping

IN_FLIGHT_CHUNKS = 256
# Bytes read at most at once from a socket, as the stream relay did (emu.links.shaping.MAX_CHUNK).
READ_SIZE = 65536


class Flow:
    """One direction of one connection: chunks read from ``source`` cross the link to ``sink``."""

    __slots__ = ("shaping", "direction", "connection", "loop", "source", "sink", "pending",
                 "previous_arrival", "timer", "backlog", "holding", "held", "window_full",
                 "eof", "fin_sent", "finished", "sink_paused", "reading", "frames")

    def __init__(self, shaping: Shaping, direction: Direction, connection: Connection,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.shaping = shaping
        self.direction = direction
        self.connection = connection
        self.loop = loop
        self.source: asyncio.Transport | None = None
        self.sink: asyncio.Transport | None = None
        # (arrival, chunk) in order of arrival; a chunk of None is the FIN.
        self.pending: deque[tuple[float, bytes | None]] = deque()
        self.previous_arrival = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.backlog = b""  # read, not yet on the link: waits for the bucket or the window
        self.holding = False
        self.held: asyncio.TimerHandle | None = None  # the bucket's wait
        self.window_full = False
        self.eof = False  # the source's FIN was read
        self.fin_sent = False
        self.finished = False  # the FIN was delivered
        self.sink_paused = False
        self.reading = False
        # The sender's messages, counted from the first byte, when the relay draws loss per
        # segment the sender wrote (emu.links.framing): only a relay made lossy counts.
        self.frames = shaping.frames()

    def feed(self, data: bytes) -> None:
        """Bytes read from the source: onto the link now, or behind a held backlog."""
        if self.holding:
            self.backlog += data
        elif self.sink is None:  # read before upstream is connected (uvloop may read that soon)
            self._hold(data)
        else:
            self._transmit(data)

    def end(self) -> None:
        """The source's FIN: it crosses the link behind the data."""
        self.eof = True
        if not self.holding:
            self._send_fin()

    def _transmit(self, data: bytes) -> None:
        shaping, direction, pending = self.shaping, self.direction, self.pending
        now = self.loop.time()
        size, total, offset = shaping.chunk, len(data), 0
        while offset < total:
            if len(pending) >= IN_FLIGHT_CHUNKS:
                self.window_full = True
                self._hold(data[offset:])
                return
            # One read may hold seconds of traffic at a low rate: it crosses the link in chunks
            # of one grain, so the receiver sees a steady stream rather than bursts.
            chunk = data if total <= size else data[offset : offset + size]
            nbytes = len(chunk)
            offset += nbytes
            shape = shaping.installed
            departure = direction.reserve(nbytes, now)
            # Inline the common case (no jitter, no loss): no call, no draw, as delay and stall.
            arrival = departure + (shaping.delay(shape) if shape.jitter_s else shape.latency_s)
            frames = self.frames.count(chunk) if self.frames is not None else 0
            if shape.loss:
                arrival += shaping.stall(shape, nbytes, direction, frames)
            # TCP hands bytes over in order: a chunk never overtakes the one ahead of it.
            if arrival > self.previous_arrival:
                self.previous_arrival = arrival
            direction.bytes += nbytes
            direction.chunks += 1
            pending.append((self.previous_arrival, chunk))
            if self.timer is None:
                self.timer = self.loop.call_at(pending[0][0], self._deliver)
            if departure > now:  # the link is busy until then: read nothing more till then
                self._hold(data[offset:])
                self.held = self.loop.call_at(departure, self._release)
                return
        if self.eof:
            self._send_fin()

    def _hold(self, rest: bytes) -> None:
        self.backlog = rest
        self.holding = True
        self.update_reading()

    def _release(self) -> None:
        """The bucket's wait is over, or the window has room: carry on with the backlog."""
        self.held = None
        self.window_full = False
        data, self.backlog = self.backlog, b""
        self.holding = False
        self._transmit(data)
        self.update_reading()

    def _send_fin(self) -> None:
        if self.fin_sent:
            return
        self.fin_sent = True
        arrival = max(self.previous_arrival, self.loop.time() + self.shaping.installed.latency_s)
        self.pending.append((arrival, None))
        if self.timer is None:
            self.timer = self.loop.call_at(self.pending[0][0], self._deliver)

    def _deliver(self) -> None:
        """Write every chunk due now: the head the timer was armed for, and any due with it."""
        self.timer = None
        pending, sink = self.pending, self.sink
        assert sink is not None
        now = self.loop.time()
        chunks: list[bytes] = []
        chunk = pending.popleft()[1]  # due: the timer was armed for it
        while chunk is not None:
            chunks.append(chunk)
            if not pending or pending[0][0] > now:
                break
            chunk = pending.popleft()[1]
        if chunks:
            sink.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if chunk is None:
            self._finish()
            return
        if pending:
            self.timer = self.loop.call_at(pending[0][0], self._deliver)
        if self.window_full and len(pending) < IN_FLIGHT_CHUNKS:
            self._release()

    def _finish(self) -> None:
        sink = self.sink
        assert sink is not None
        self.finished = True
        if sink.can_write_eof():
            try:
                sink.write_eof()
            except OSError:  # the receiver is gone (ENOTCONN: many sessions closing at once)
                self.connection.close()
                return
        self.connection.finished()

    def update_reading(self) -> None:
        """Read the source unless something holds it back."""
        source = self.source
        if source is None or self.eof:
            return  # after a FIN, resume_reading would read the FIN again
        want = self.sink is not None and not self.holding and not self.sink_paused
        if want != self.reading:
            self.reading = want
            if want:
                source.resume_reading()
            else:
                source.pause_reading()

    def stop(self) -> None:
        for handle in (self.timer, self.held):
            if handle is not None:
                handle.cancel()
        self.timer = self.held = None
        self.pending.clear()
        self.backlog = b""


class Side(asyncio.BufferedProtocol):
    """One socket of a connection: what it reads feeds one flow, what it is sent comes from the
    other.

    It reads into a buffer of its own (``recv_into``): a plain Protocol is handed a fresh bytes
    object per read, which asyncio allocates at 256 KiB, above glibc's mmap threshold, then
    shrinks: an mmap, an mremap and a munmap (TLB shootdowns across threads) per message."""

    def __init__(self, connection: Connection, reads: Flow, writes: Flow) -> None:
        self.connection = connection
        self.reads = reads
        self.writes = writes
        self.buffer: memoryview | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is one without being a subclass of asyncio.Transport).
        self.connection.made(self, cast(asyncio.Transport, transport))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.buffer is None:
            self.buffer = memoryview(bytearray(READ_SIZE))
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        assert self.buffer is not None
        self.reads.feed(self.buffer[:nbytes].tobytes())

    def eof_received(self) -> bool:
        self.reads.end()
        return True  # half-closed: the other direction goes on

    def pause_writing(self) -> None:
        self.writes.sink_paused = True
        self.writes.update_reading()

    def resume_writing(self) -> None:
        self.writes.sink_paused = False
        self.writes.update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        # A reset, a write error or our own close: the connection ends both ways, as on a link.
        self.connection.close()


class Connections:
    """The connections one relay carries: the link they cross, where they go, who may open one
    (emu.links.peers; None: anyone), the live ones and how many were let through.
    ``refuse(host)`` is the relay's: it counts and logs a connection from other than its client."""

    def __init__(self, shaping: Shaping, upstream: tuple[str, int], peers: Peers | None,
                 refuse: Callable[[str], None]) -> None:
        self.shaping = shaping
        self.upstream = upstream
        self.peers = peers
        self.refuse = refuse
        self.live: set[Connection] = set()
        self.opened = 0


class Connection:
    """A client's connection through the relay and the relay's own connection upstream."""

    def __init__(self, connections: Connections, loop: asyncio.AbstractEventLoop) -> None:
        self.connections = connections
        self.loop = loop
        shaping = connections.shaping
        self.up = Flow(shaping, shaping.up, self, loop)
        self.down = Flow(shaping, shaping.down, self, loop)
        self.client = Side(self, reads=self.up, writes=self.down)
        self.upstream = Side(self, reads=self.down, writes=self.up)
        self.transports: list[asyncio.Transport] = []
        self.connecting: asyncio.Task[None] | None = None
        self.closed = False

    def made(self, side: Side, transport: asyncio.Transport) -> None:
        if self.closed:
            transport.close()
            return
        self.transports.append(transport)
        side.reads.source = side.writes.sink = transport
        if side is self.client:
            connections = self.connections
            admitted = True
            if connections.peers is not None:  # only the link's client (emu.links.peers)
                host = transport.get_extra_info("peername")[0]
                admitted = connections.peers.check(host)
                if admitted is False:
                    connections.refuse(host)
                    self.close()
                    return
            transport.pause_reading()  # until upstream is connected
            connections.live.add(self)
            if admitted:
                connections.opened += 1
                self.connecting = self.loop.create_task(self._connect())
            else:  # from the client's network, not its known address: look it up first
                self.connecting = self.loop.create_task(self._confirm_then_connect(host))
        else:
            self.down.reading = True  # a new transport reads
            if self.up.holding and self.up.held is None and not self.up.window_full:
                self.up._release()  # what was read before upstream was connected
            self.up.update_reading()

    async def _confirm_then_connect(self, host: str) -> None:
        connections = self.connections
        assert connections.peers is not None
        if not await connections.peers.confirm(host):
            connections.refuse(host)
            self.connecting = None
            self.close()
            return
        connections.opened += 1
        await self._connect()

    async def _connect(self) -> None:
        try:
            await self.loop.create_connection(lambda: self.upstream, *self.connections.upstream)
        except OSError:
            self.connecting = None
            self.close()  # a refused upstream ends the client's connection, as on a link
        else:
            self.connecting = None

    def finished(self) -> None:
        if self.up.finished and self.down.finished:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.up.stop()
        self.down.stop()
        for transport in self.transports:
            transport.close()
        if self.connecting is not None:
            self.connecting.cancel()
        self.connections.live.discard(self)
