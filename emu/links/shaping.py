"""One relayed link's shaping, shared by every connection across it: the token buckets of each
direction and of the shared hops, and the delays and loss stalls drawn per chunk.

The timing model these figures serve is the relay's (emu.links.relay); the connections that
read them are carried by emu.links.carry.
"""

import math
import random
from collections.abc import Sequence

from emu.links.framing import frames
from emu.links.spec import LinkShape, check_dilation, host_rate

RETRANSMISSION_STALL_S = 0.2
MSS = 1460
GRAIN_S = 0.01
MAX_CHUNK = 65536


class TokenBucket:
    """Departure times for chunks on a link of a given rate; the bucket may go into debt."""

    def __init__(self, rate_bytes_s: float | None, now: float) -> None:
        self._rate = rate_bytes_s
        self._depth = _depth(rate_bytes_s)
        self._tokens = self._depth
        self._stamp = now

    def set_rate(self, rate_bytes_s: float | None, now: float) -> None:
        if self._rate is not None and rate_bytes_s is not None:
            self._refill(now)  # tokens earned so far count at the old rate; a debt stays owed
            self._tokens = min(self._tokens, _depth(rate_bytes_s))
        else:
            self._tokens = _depth(rate_bytes_s)
        self._rate = rate_bytes_s
        self._depth = _depth(rate_bytes_s)
        self._stamp = now

    def reserve(self, nbytes: int, now: float) -> float:
        """Take ``nbytes`` and return when they have left: ``now`` or later."""
        if self._rate is None:
            return now
        self._refill(now)
        # A debt queues later chunks, of any connection, behind this one: the link is FIFO.
        self._tokens -= nbytes
        return now if self._tokens >= 0 else now - self._tokens / self._rate

    def _refill(self, now: float) -> None:
        assert self._rate is not None
        self._tokens = min(self._depth, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now


def _depth(rate_bytes_s: float | None) -> float:
    return math.inf if rate_bytes_s is None else max(MSS, rate_bytes_s * GRAIN_S)


class Direction:
    """One direction of the link: its bucket and its counters, shared by all connections, and
    the buckets of shared hops the link crosses in this direction."""

    def __init__(self, rate_bytes_s: float | None, hops: Sequence[TokenBucket] = ()) -> None:
        # The loop clock is unknown before start: a bucket stamped at 0 is simply full.
        self.bucket = TokenBucket(rate_bytes_s, 0.0)
        self.hops = tuple(hops)
        self.bytes = 0
        self.chunks = 0
        self.stalls = 0

    def reserve(self, nbytes: int, now: float) -> float:
        """When a chunk of ``nbytes`` read now has left: the latest departure of every bucket."""
        departure = self.bucket.reserve(nbytes, now)
        for bucket in self.hops:
            departure = max(departure, bucket.reserve(nbytes, now))
        return departure


def hop_bucket(bandwidth_bps: float, dilation: float = 1.0) -> TokenBucket:
    """A bucket for one direction of a hop that several relays cross (see ``LinkRelay(hops=)``):
    ``bandwidth_bps`` emulated, carried at its host rate at ``dilation`` (emu.links.spec)."""
    rate = host_rate(bandwidth_bps, check_dilation(dilation))
    assert rate is not None
    return TokenBucket(rate / 8, 0.0)


def _bytes_per_second(shape: LinkShape) -> float | None:
    return None if shape.bandwidth_bps is None else shape.bandwidth_bps / 8


def _chunk_size(shape: LinkShape) -> int:
    rate = _bytes_per_second(shape)
    return MAX_CHUNK if rate is None else int(min(MAX_CHUNK, max(MSS, rate * GRAIN_S)))


class Shaping:
    """What every connection across one relay reads when it carries a chunk: the installed
    shape, the chunk size, both directions, and the seeded draws of delay and stall.

    ``shape`` and ``stall_s`` are emulated; at ``dilation`` K the link installs
    ``shape.dilated(K)`` and stalls K * ``stall_s`` host seconds. ``hops``: (toward upstream,
    toward the client) buckets of shared hops. ``protocol``: what the connections speak; a
    lossy link then counts each chunk's messages as the sender's segments (emu.links.framing).
    """

    def __init__(self, shape: LinkShape, *, dilation: float, seed: int | None, stall_s: float,
                 hops: Sequence[tuple[TokenBucket, TokenBucket]], protocol: str | None) -> None:
        self.dilation = check_dilation(dilation)
        self.shape = shape
        self.installed = shape.dilated(self.dilation)
        self.rng = random.Random(seed)
        self.stall_s = stall_s * self.dilation
        self.protocol = protocol if shape.loss else None
        frames(self.protocol)  # an unknown protocol is refused here, not per connection
        self.chunk = _chunk_size(self.installed)
        rate = _bytes_per_second(self.installed)
        self.up = Direction(rate, [up for up, _ in hops])
        self.down = Direction(rate, [down for _, down in hops])

    def reshape(self, shape: LinkShape, now: float) -> None:
        """Shape chunks read from now on (``shape`` emulated); the buckets change rate at
        ``now``, the loop's time."""
        self.shape = shape
        self.installed = shape.dilated(self.dilation)
        self.chunk = _chunk_size(self.installed)
        for direction in (self.up, self.down):
            direction.bucket.set_rate(_bytes_per_second(self.installed), now)

    def delay(self, shape: LinkShape) -> float:
        if not shape.jitter_s:
            return shape.latency_s
        return max(0.0, self.rng.gauss(shape.latency_s, shape.jitter_s))

    def frames(self):
        """A connection direction's frame counter, None to count segments by size alone."""
        return frames(self.protocol)

    def stall(self, shape: LinkShape, nbytes: int, direction: Direction,
              messages: int = 0) -> float:
        """A lost segment's stall: the chunk is ceil(nbytes / MSS) segments, or one per
        message that began in it when more (each written with TCP_NODELAY)."""
        if not shape.loss:
            return 0.0
        packets = max(-(-nbytes // MSS), messages)
        if self.rng.random() >= 1 - (1 - shape.loss) ** packets:
            return 0.0
        direction.stalls += 1
        return self.stall_s
