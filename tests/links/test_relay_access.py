"""A link relay takes connections from its client only (emu.links.peers), on loopback: a
connection from outside the client's network is closed before a byte reaches upstream, one
from a neighbour on the network is checked against the client's address and closed, the
client's is carried; a client that comes back at another address is found again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from emu.links import peers as peers_module
from emu.links.peers import Peers
from emu.links.relay import LinkRelay
from emu.links.spec import LinkShape

from .loopback import HOST, run

NETWORK = "127.0.0.0/30"  # the client's "bridge network": 127.0.0.0 to 127.0.0.3
CLIENT, NEIGHBOUR, OUTSIDER = "127.0.0.2", "127.0.0.3", "127.0.0.9"


class Upstream:
    """An echo server that counts the connections and bytes that reached it."""

    def __init__(self) -> None:
        self.connections = 0
        self.bytes = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while data := await reader.read(65536):
                self.bytes += len(data)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


@asynccontextmanager
async def upstream() -> AsyncIterator[tuple[Upstream, int]]:
    served = Upstream()
    server = await asyncio.start_server(served.handle, HOST, 0)
    try:
        yield served, server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def exchange(port: int, source: str, message: bytes = b"CONNECT me") -> bytes:
    """Connect to the relay from `source`, send `message`, and return what comes back before
    the relay closes (b"" when it refused)."""
    reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
    try:
        writer.write(message)
        await writer.drain()
        received = b""
        while len(received) < len(message):
            data = await asyncio.wait_for(reader.read(65536), 10)
            if not data:
                break
            received += data
        return received
    except ConnectionError:
        return b""
    finally:
        writer.close()


class Locator:
    """The engine's answer to "where is the client now", counted."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self.calls = 0

    def __call__(self) -> str | None:
        self.calls += 1
        return self.address


def test_a_connection_from_outside_the_clients_network_never_reaches_upstream(caplog) -> None:
    async def scenario() -> None:
        locate = Locator(CLIENT)
        peers = Peers([NETWORK], locate=locate, name="gw-1")
        async with upstream() as (served, port), \
                LinkRelay(HOST, port, LinkShape(0.0), peers=peers) as relay:
            for _ in range(5):
                assert await exchange(relay.port, OUTSIDER) == b""
            counters = relay.counters()
            assert (counters.refused, counters.connections, counters.bytes_up) == (5, 0, 0)
            assert (served.connections, served.bytes) == (0, 0)
            assert locate.calls == 0  # refused on its address alone, no lookup
            assert await exchange(relay.port, CLIENT) == b"CONNECT me"
            assert relay.counters().connections == 1 and served.connections == 1

    with caplog.at_level(logging.WARNING, logger="emu.links.relay"):
        run(scenario())
    refusals = [r for r in caplog.records if "refused a connection" in r.getMessage()]
    assert len(refusals) == 1 and OUTSIDER in refusals[0].getMessage()  # once per relay


def test_a_neighbour_on_the_network_is_refused_after_the_clients_address_is_looked_up() -> None:
    async def scenario() -> None:
        locate = Locator(CLIENT)
        peers = Peers([NETWORK], locate=locate, name="gw-1")
        async with upstream() as (served, port), \
                LinkRelay(HOST, port, LinkShape(0.0), peers=peers) as mqtt, \
                LinkRelay(HOST, port, LinkShape(0.0), peers=peers) as zookeeper:
            for relay in (mqtt, zookeeper):
                assert await exchange(relay.port, NEIGHBOUR) == b""
            assert await exchange(mqtt.port, CLIENT) == b"CONNECT me"
            assert await exchange(zookeeper.port, CLIENT) == b"CONNECT me"
            assert [r.counters().refused for r in (mqtt, zookeeper)] == [1, 1]
            assert [r.counters().connections for r in (mqtt, zookeeper)] == [1, 1]
            assert served.connections == 2  # the client's two, not the neighbour's
            # The client's relays share one lookup (a second within REFRESH_S is not made).
            assert locate.calls == 1

    run(scenario())


def test_a_client_that_comes_back_at_another_address_is_found_again(monkeypatch) -> None:
    monkeypatch.setattr(peers_module, "REFRESH_S", 0.0)  # look up at every unknown connection

    async def scenario() -> None:
        locate = Locator(CLIENT)
        peers = Peers([NETWORK], locate=locate, name="gw-1")
        async with upstream() as (_, port), \
                LinkRelay(HOST, port, LinkShape(0.0), peers=peers) as relay:
            assert await exchange(relay.port, CLIENT) == b"CONNECT me"
            locate.address = NEIGHBOUR  # revived: its container got another address
            assert await exchange(relay.port, NEIGHBOUR) == b"CONNECT me"
            assert await exchange(relay.port, CLIENT) == b""  # the old address is no longer it
            assert relay.counters().refused == 1
            locate.address = None  # the container is gone: nobody is admitted
            assert await exchange(relay.port, CLIENT) == b""

    run(scenario())


def test_a_failing_lookup_refuses_and_peers_need_a_network() -> None:
    def broken() -> str:
        raise OSError("the engine does not answer")

    async def scenario() -> None:
        async with upstream() as (served, port), \
                LinkRelay(HOST, port, LinkShape(0.0),
                          peers=Peers([NETWORK], locate=broken, name="gw-1")) as relay:
            assert await exchange(relay.port, CLIENT) == b""
            assert relay.counters().refused == 1 and served.connections == 0

    run(scenario())
    with pytest.raises(ValueError, match="no network"):
        Peers([], name="gw-1")
    with pytest.raises(ValueError, match="'10.0.0.300/8' is not a network"):
        Peers(["10.0.0.300/8"])


def test_the_hosts_own_address_is_admitted_without_a_lookup() -> None:
    async def scenario() -> None:
        locate = Locator(CLIENT)
        peers = Peers([NETWORK], locate=locate, name="gw-1", host=[NEIGHBOUR])
        async with upstream() as (_, port), \
                LinkRelay(HOST, port, LinkShape(0.0), peers=peers) as relay:
            assert await exchange(relay.port, NEIGHBOUR) == b"CONNECT me"
            assert locate.calls == 0 and relay.counters().refused == 0

    run(scenario())


def test_without_a_lookup_the_network_alone_admits_until_an_address_is_given() -> None:
    async def scenario() -> None:
        peers = Peers([NETWORK], name="agent")
        async with upstream() as (_, port), \
                LinkRelay(HOST, port, LinkShape(0.0), peers=peers) as relay:
            assert await exchange(relay.port, NEIGHBOUR) == b"CONNECT me"
            assert await exchange(relay.port, OUTSIDER) == b""
            peers.address = CLIENT
            assert await exchange(relay.port, NEIGHBOUR) == b""
            assert await exchange(relay.port, CLIENT) == b"CONNECT me"

    run(scenario())
