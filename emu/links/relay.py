"""A user-space TCP relay that shapes one emulated link where the kernel has no netem: it
listens, accepts, and hands each connection to emu.links.carry, which carries it across the
link's shaping (emu.links.shaping: the buckets, the delay and stall draws).

Timing model. The relay accepts connections on a listening address and carries each one to an
upstream address. Every byte it reads crosses the link in two steps, as on a real link:

1. Transmission: a token bucket per direction, shared by all the connections that cross the
   link, holds a chunk back until the link has capacity for it (``bandwidth_bps``). While a chunk
   waits, the relay reads nothing more from that sender, so TCP's own flow control slows the
   sender down, as a full link would. A relay that stands for a path of several hops may also
   be given the buckets of the hops it shares with other relays (``hops``): a chunk then also
   waits for capacity on each of them, so relays whose paths cross one backbone hop share its
   bandwidth. Each bucket is charged at once, as if the hops were one fluid pipe: a chunk's
   departure is the latest of theirs (store-and-forward delay per hop is not modelled).
2. Propagation: the chunk is then delivered after a one-way delay drawn from a normal
   distribution (mean ``latency_s``, standard deviation ``jitter_s``, clipped at 0). A chunk is
   never delivered before the one read ahead of it on the same connection: TCP hands bytes to
   the application in order, so jitter spreads delays but never reorders bytes.

Loss. The protocols carried (MQTT, ZooKeeper) run over TCP and never see a lost packet: they see
the retransmission. A chunk is treated as ceil(size / MSS) packets, or, when the relay knows the
protocol (``protocol``), as one per message that begins in it if that is more: a sender with
TCP_NODELAY writes each message as a segment of its own, which one read may gather
(emu.links.framing). If any of them is lost
(probability ``loss`` each) the chunk is held back by one retransmission timeout,
``RETRANSMISSION_STALL_S`` (200 ms, Linux's minimum RTO). Later chunks of that connection wait
behind it, which is TCP's head-of-line blocking. Every loss costs a full RTO: realistic for sparse
small messages (a lost tail segment), pessimistic for bulk transfers, where fast retransmit
recovers in about one round trip. Retransmitted bytes do not use up bandwidth.

Time dilation. A relay given ``dilation`` K stands for its shape in emulated time, where a
host second is 1/K of a second: it installs ``shape.dilated(K)`` (K times the delay and jitter,
1/K of the bandwidth, the same loss; emu.links.spec) and holds a lost chunk back K times its
retransmission timeout, so a loss costs Linux's minimum RTO in emulated time, as TCP's would.
``shape`` stays the emulated one (what reshape is given); ``installed`` is what the host runs.
The endpoints' own kernel TCP timers are not dilated: a retransmission the kernel itself makes
(none on loopback or a bridge, which lose nothing) would take 1/K of its time in emulated time.

Cost. The relays are most of the testbed's own CPU (docs/host-cpu.md), so a connection is
carried by callbacks, not tasks (emu.links.carry): a chunk read is given its arrival time at
once and queued, one timer per direction writes every chunk due when it fires in one write.
What is left per relayed message is two wake-ups of the loop (the read, the delivery), a recv
and a send (loopback TCP's receive path included), and a little Python: 133 against the stream
relay's 192 us of CPU per message on foglab's 2-core host (benchmarks/relay_cpu.py, 400
messages/s of 180 B; 0.59 to 0.72 of the stream relay's across runs). Raw sockets instead of
asyncio's transports saved nothing measurable; uvloop's loop 10 to 35 % more.

Limits.
- Delays are as precise as the event loop's timers: epoll waits whole milliseconds, rounded up,
  so a chunk arrives 0 to 1 ms late (0.5 ms on average), later on a busy host; never early.
  Chunks found due when a timer fires (a late timer, a busy loop) leave in one write.
- The bandwidth applies to payload bytes, not to TCP/IP headers, and is enforced at a 10 ms
  grain (``GRAIN_S``): a chunk and the bucket depth hold 10 ms of traffic (at least one MSS), so
  the rate holds over any longer window and traffic may burst within it.
- Connection set-up is not delayed: a client's connect completes at once (the relay accepts it);
  its first bytes still carry the one-way delay.
- At most ``IN_FLIGHT_CHUNKS`` chunks per direction and connection are in flight, like a TCP
  window: about 2.5 s of traffic at the configured rate, or 16 MiB when the link is unlimited;
  beyond it, and while the receiver does not read, the relay stops reading the sender.
- Randomness is seeded, but chunk boundaries depend on how the kernel delivers reads, so two
  runs with the same seed draw the same sequence of delays, not necessarily for the same bytes.
"""

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Self, TypeVar

from emu.links.carry import Connection, Connections
from emu.links.peers import Peers
from emu.links.shaping import RETRANSMISSION_STALL_S, Shaping, TokenBucket
from emu.links.spec import LinkShape

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RelayCounters:
    """What crossed the link so far: ``up`` is client to upstream, ``down`` the reverse."""

    connections: int
    bytes_up: int
    bytes_down: int
    chunks_up: int
    chunks_down: int
    stalls_up: int
    stalls_down: int
    refused: int = 0  # connections from other than the relay's client (emu.links.peers)


class LinkRelay:
    """Relay TCP connections from a listening address to an upstream one through a shaped link."""

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        shape: LinkShape,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        seed: int | None = None,
        stall_s: float = RETRANSMISSION_STALL_S,
        hops: Sequence[tuple[TokenBucket, TokenBucket]] = (),
        dilation: float = 1.0,
        protocol: str | None = None,
        peers: Peers | None = None,
    ) -> None:
        """``hops``: (toward upstream, toward the client) buckets of shared hops on the path,
        made with ``hop_bucket`` (at the dilation's host rate); the relay's own shape still
        applies on top of them. ``shape`` and ``stall_s`` are emulated; at ``dilation`` K the
        relay installs ``shape.dilated(K)`` and stalls K * ``stall_s`` host seconds.
        ``protocol`` ("mqtt", "zookeeper"): what the connections speak; a lossy relay then
        counts each chunk's messages as the sender's segments (emu.links.framing).
        ``peers``: who may connect (emu.links.peers); a connection from anyone else is closed
        at once, counted in ``refused`` and logged once per relay. None: anyone who reaches
        the listening address (loopback, the calibration's)."""
        self._listen = (listen_host, listen_port)
        self._shaping = Shaping(shape, dilation=dilation, seed=seed, stall_s=stall_s, hops=hops,
                                protocol=protocol)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._refused = 0
        # The connections it carries (emu.links.carry): the live ones, how many were let through.
        self.connections = Connections(self._shaping, (upstream_host, upstream_port), peers,
                                       self._refuse)

    @property
    def shape(self) -> LinkShape:
        """The emulated shape (what the topology says, or the last reshape)."""
        return self._shaping.shape

    @property
    def installed(self) -> LinkShape:
        """The shape the relay runs on the host's clock: ``shape.dilated(dilation)``."""
        return self._shaping.installed

    @property
    def dilation(self) -> float:
        return self._shaping.dilation

    @property
    def port(self) -> int:
        """The listening port (useful when the relay was given port 0)."""
        if self._server is None:
            raise RuntimeError("the relay is not started")
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> int:
        """Listen and return the listening port."""
        self._loop = asyncio.get_running_loop()
        self._server = await self._loop.create_server(self._accept, *self._listen)
        return self.port

    def reshape(self, shape: LinkShape) -> None:
        """Shape chunks read from now on; chunks already on the link keep their timing.
        ``shape`` is emulated, like the one the relay was made with."""
        now = self._loop.time() if self._loop is not None else 0.0
        self._shaping.reshape(shape, now)

    def counters(self) -> RelayCounters:
        up, down = self._shaping.up, self._shaping.down
        return RelayCounters(
            self.connections.opened, up.bytes, down.bytes, up.chunks, down.chunks, up.stalls,
            down.stalls, self._refused)

    async def close(self) -> None:
        """Stop listening and end every connection."""
        if self._server is not None:
            self._server.close()
        live = self.connections.live
        connecting = [c.connecting for c in live if c.connecting is not None]
        for connection in list(live):
            connection.close()
        await asyncio.gather(*connecting, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        await asyncio.sleep(0)  # let the transports' connection_lost run

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _accept(self) -> asyncio.Protocol:
        assert self._loop is not None
        return Connection(self.connections, self._loop).client

    def _refuse(self, host: str) -> None:
        """Count a connection from other than the client; log the first."""
        self._refused += 1
        if self._refused == 1:
            peers = self.connections.peers
            log.warning("relay to %s:%d (client %s) refused a connection from %s, not its "
                        "client (further refusals are counted, not logged)",
                        *self.connections.upstream, peers.name if peers else "?", host)


class LinkRelayThread:
    """Run a ``LinkRelay`` on its own event loop in a background thread, for synchronous callers."""

    def __init__(self, relay: LinkRelay) -> None:
        self.relay = relay
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.relay.port

    def start(self) -> int:
        """Start the loop thread and the relay; return the listening port."""
        if self._loop is not None:
            raise RuntimeError("the relay thread is already started")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="link-relay", daemon=True
        )
        self._thread.start()
        try:
            return self._run(self.relay.start())
        except BaseException:
            self._stop_loop()
            raise

    def stop(self) -> None:
        """Close the relay and end the loop thread; a no-op when not started."""
        if self._loop is None:
            return
        try:
            self._run(self.relay.close())
        finally:
            self._stop_loop()

    def reshape(self, shape: LinkShape) -> None:
        """Reshape on the loop thread; chunks read after this returns get the new shape."""
        self._on_loop(self.relay.reshape, shape)

    def counters(self) -> RelayCounters:
        """The relay's counters, also after stop() (the final figures of a run)."""
        if self._loop is None:
            return self.relay.counters()
        # Read on the loop thread so that all counters come from one moment.
        return self._on_loop(self.relay.counters)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _on_loop(self, function: Callable[..., T], *args: object) -> T:
        async def call() -> T:
            return function(*args)

        return self._run(call())

    def _run(self, coroutine: Coroutine[object, object, T]) -> T:
        if self._loop is None:
            coroutine.close()
            raise RuntimeError("the relay thread is not started")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _stop_loop(self) -> None:
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._loop = None
        self._thread = None
