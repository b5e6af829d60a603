"""The relay's loss per message the sender wrote (emu.links.framing): frames counted across
chunk boundaries, and a lossy MQTT relay stalling a read of ten messages as ten segments."""

import asyncio

import pytest

from emu.links.framing import LengthPrefixedFrames, MqttFrames, frames
from emu.links.relay import LinkRelay
from emu.links.spec import LinkShape

from .loopback import HOST, run, sink_server


def publish(payload: bytes) -> bytes:
    """An MQTT PUBLISH at QoS 0 on topic "t" (its remaining length as MQTT encodes it)."""
    body = b"\x00\x01t" + payload
    length, encoded = len(body), b""
    while True:
        byte, length = length & 0x7F, length >> 7
        encoded += bytes([byte | (0x80 if length else 0)])
        if not length:
            return b"\x30" + encoded + body


def test_mqtt_frames_are_counted_where_they_begin_across_chunks() -> None:
    stream = publish(b"a" * 10) + publish(b"b" * 200) + publish(b"c" * 20_000) + b"\xc0\x00"
    assert len(publish(b"b" * 200)) == 1 + 2 + 203  # type, a two-byte remaining length, body
    whole = MqttFrames()
    assert whole.count(stream) == 4  # the PINGREQ (0xc0, length 0) too
    for cut in (1, 2, 13, 15, 16, 17, 220, 5000):
        parts = MqttFrames()
        counts = [parts.count(stream[:cut]), parts.count(stream[cut:])]
        assert sum(counts) == 4, cut
    one_by_one = MqttFrames()
    assert sum(one_by_one.count(stream[i:i + 1]) for i in range(len(stream))) == 4
    assert one_by_one.skip == 0 and not one_by_one.in_length


def test_zookeeper_frames_are_counted_with_their_length_split() -> None:
    stream = b"".join(len(body).to_bytes(4, "big") + body for body in (b"x" * 5, b"", b"y" * 70))
    for cut in range(len(stream) + 1):
        counter = LengthPrefixedFrames()
        assert counter.count(stream[:cut]) + counter.count(stream[cut:]) == 3, cut


def test_an_unknown_protocol_is_refused_by_name() -> None:
    assert frames(None) is None
    with pytest.raises(ValueError, match="'amqp'"):
        LinkRelay(HOST, 1, LinkShape(0.0, loss=0.1), protocol="amqp")


@pytest.mark.parametrize(("protocol", "low", "high"), [("mqtt", 0.28, 0.52), (None, 0.0, 0.12)])
def test_a_lossy_relay_draws_per_message_written(protocol, low, high) -> None:
    """Ten small PUBLISHes in one write are one read: at 5 % loss, as ten segments the read is
    stalled with probability 1 - 0.95 ** 10 = 0.40; as one segment (size alone), 0.05."""
    burst = publish(b"r" * 60) * 10

    async def scenario() -> tuple[int, int]:
        async with sink_server() as port, LinkRelay(HOST, port, LinkShape(0.0, loss=0.05),
                                                    seed=7, protocol=protocol) as relay:
            _, writer = await asyncio.open_connection(HOST, relay.port)
            for _ in range(300):
                writer.write(burst)
                await writer.drain()
                await asyncio.sleep(0.002)
            counters = relay.counters()
            writer.close()
            return counters.stalls_up, counters.chunks_up

    stalls, chunks = run(scenario(), timeout_s=30)
    assert 250 <= chunks <= 300
    assert low < stalls / chunks < high, (stalls, chunks)


def test_the_run_counts_stalls_per_link_direction_since_its_epoch() -> None:
    from emu.cluster.links import Links
    from emu.links.relay import RelayCounters

    class Counted:
        stalls = Links.stalls

        def __init__(self, now):
            self.now = now

        def counters(self):
            return self.now

    before = {("gw-1", "broker-1"): RelayCounters(1, 0, 0, 0, 0, 2, 0),
              ("gw-2", "broker-1"): RelayCounters(1, 0, 0, 0, 0, 1, 1)}
    after = {("gw-1", "broker-1"): RelayCounters(1, 0, 0, 0, 0, 5, 1),
             ("gw-2", "broker-1"): RelayCounters(1, 0, 0, 0, 0, 1, 1),
             ("gw-3", "zookeeper"): RelayCounters(1, 0, 0, 0, 0, 0, 4)}
    assert Counted(after).stalls(before) == {"gw-1>broker-1": 3, "broker-1>gw-1": 1,
                                             "zookeeper>gw-3": 4}
    assert Counted(after).stalls()["gw-1>broker-1"] == 5
