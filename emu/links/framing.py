"""How many packets a relayed chunk held when its sender wrote them: MQTT's and ZooKeeper's
framing, counted per direction of a connection, for the relay's loss.

A sender with TCP_NODELAY (every foglab client, and Mosquitto with `set_tcp_nodelay`) puts each
message it writes in a segment of its own; the relay reads whatever the kernel has gathered
since its last read, several messages at once when they were written together. Drawing the
loss once per MSS of such a chunk lost one draw per message that the kernel would have sent as
a segment: the emulation then stalled fewer messages than a real link (or the model, which
draws per message) loses. Counting the protocol's own frames gives the sender's segments back.

Each counter keeps where it is in its byte stream across chunks: the remaining bytes of the
frame under way, or a length header cut by a chunk's end. A stream it cannot follow (a
relay reshaped to lossy mid-connection starts none) is not guessed at: only relays made lossy
frame, from a connection's first byte.
"""

from __future__ import annotations


class MqttFrames:
    """MQTT control packets: a type byte, the remaining length (1 to 4 bytes of 7 bits, the
    high bit meaning more), then that many bytes."""

    __slots__ = ("skip", "in_length", "length", "shift")

    def __init__(self) -> None:
        self.skip = 0          # bytes of the current packet still to pass
        self.in_length = False  # reading the remaining length's bytes
        self.length = 0
        self.shift = 0

    def count(self, data: bytes) -> int:
        """The packets that begin in `data` (a chunk of the stream, in order)."""
        i, end, begun = 0, len(data), 0
        skip, in_length, length, shift = self.skip, self.in_length, self.length, self.shift
        while i < end:
            if skip:
                step = min(skip, end - i)
                i += step
                skip -= step
            elif not in_length:  # a packet's type byte
                begun += 1
                i += 1
                in_length, length, shift = True, 0, 0
            else:
                byte = data[i]
                i += 1
                length |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    in_length, skip = False, length
        self.skip, self.in_length, self.length, self.shift = skip, in_length, length, shift
        return begun


class LengthPrefixedFrames:
    """ZooKeeper's frames (jute): a 4-byte big-endian length, then that many bytes."""

    __slots__ = ("skip", "header")

    def __init__(self) -> None:
        self.skip = 0
        self.header = b""  # a length cut by a chunk's end

    def count(self, data: bytes) -> int:
        i, end, begun = 0, len(data), 0
        skip, header = self.skip, self.header
        while i < end:
            if skip:
                step = min(skip, end - i)
                i += step
                skip -= step
                continue
            if not header:
                begun += 1
            take = min(4 - len(header), end - i)
            header += data[i:i + take]
            i += take
            if len(header) == 4:
                skip, header = int.from_bytes(header, "big"), b""
        self.skip, self.header = skip, header
        return begun


FRAMES = {"mqtt": MqttFrames, "zookeeper": LengthPrefixedFrames}


def frames(protocol: str | None):
    """A fresh counter for one direction of a connection speaking `protocol` (a LinkPlan's
    role), or None when the relay should count segments by size alone."""
    if protocol is None:
        return None
    try:
        return FRAMES[protocol]()
    except KeyError:
        raise ValueError(f"no framing for protocol {protocol!r}: one of "
                         f"{', '.join(FRAMES)}") from None
