"""Loopback servers and probes for the link tests: an echo server, a sink, round trips."""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

HOST = "127.0.0.1"

T = TypeVar("T")
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass  # the relay closed the connection under us: a test of close()
    finally:
        writer.close()


async def _sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    # Reads everything, then answers one byte: the sender's clock stops when all has arrived.
    while await reader.read(65536):
        pass
    writer.write(b"k")
    await writer.drain()
    writer.close()


@asynccontextmanager
async def _server(handler: Handler) -> AsyncIterator[int]:
    server = await asyncio.start_server(handler, HOST, 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def echo_server() -> AbstractAsyncContextManager[int]:
    """An echo server on loopback; yields its port."""
    return _server(_echo)


def sink_server() -> AbstractAsyncContextManager[int]:
    """A server that swallows a stream and acknowledges its end with one byte; yields its port."""
    return _server(_sink)


async def round_trips(port: int, count: int, size: int = 32) -> list[float]:
    """Round-trip times of ``count`` small messages, one at a time, through an echo on ``port``."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        times = []
        for _ in range(count):
            start = time.perf_counter()
            writer.write(b"x" * size)
            await writer.drain()
            await reader.readexactly(size)
            times.append(time.perf_counter() - start)
        return times
    finally:
        writer.close()


async def send_all(port: int, nbytes: int) -> None:
    """Send ``nbytes`` to a sink on ``port`` and wait for its acknowledgement."""
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(b"y" * nbytes)
        writer.write_eof()
        await writer.drain()
        assert await reader.read(1) == b"k"
    finally:
        writer.close()


def run(coroutine: Coroutine[Any, Any, T], timeout_s: float = 15) -> T:
    """Run a test scenario on a fresh event loop, never longer than ``timeout_s``."""
    return asyncio.run(asyncio.wait_for(coroutine, timeout_s))
