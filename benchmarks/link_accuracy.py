"""Measure how closely the user-space link relay keeps configured latency and bandwidth.

Runs on loopback only (127.0.0.1), in well under a minute:

    python benchmarks/link_accuracy.py

Latency is half the median round trip of small messages through an echo server behind the relay;
bandwidth is the payload rate of a ~2 s one-way transfer to a sink. The kernel netem shaper is
not measured here (shaping loopback would shape the whole host); the table says which shaper
this host would choose, and which one was measured.
"""

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from emu.links import LinkRelay, LinkShape, choose_shaper

HOST = "127.0.0.1"
LATENCIES_S = (0.005, 0.02, 0.05, 0.1)
BANDWIDTHS_BPS = (1e6, 10e6, 50e6)
PINGS = 15
TRANSFER_S = 2.0
TIMEOUT_S = 20

Row = tuple[str, str, str, str]


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    # One byte back once everything has arrived stops the sender's clock.
    while await reader.read(65536):
        pass
    writer.write(b"k")
    await writer.drain()
    writer.close()


@asynccontextmanager
async def _behind_relay(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    shape: LinkShape,
) -> AsyncIterator[int]:
    server = await asyncio.start_server(handler, HOST, 0)
    try:
        async with LinkRelay(HOST, server.sockets[0].getsockname()[1], shape, seed=1) as relay:
            yield relay.port
    finally:
        server.close()
        await server.wait_closed()


async def one_way_latency(latency_s: float) -> float:
    async with _behind_relay(_echo, LinkShape(latency_s)) as port:
        reader, writer = await asyncio.open_connection(HOST, port)
        rtts = []
        for _ in range(PINGS):
            start = time.perf_counter()
            writer.write(b"x" * 32)
            await writer.drain()
            await reader.readexactly(32)
            rtts.append(time.perf_counter() - start)
        writer.close()
    return statistics.median(rtts) / 2


async def throughput(bandwidth_bps: float) -> float:
    nbytes = int(bandwidth_bps / 8 * TRANSFER_S)
    async with _behind_relay(_sink, LinkShape(0.0, bandwidth_bps=bandwidth_bps)) as port:
        reader, writer = await asyncio.open_connection(HOST, port)
        start = time.perf_counter()
        writer.write(bytes(nbytes))
        writer.write_eof()
        await writer.drain()
        await reader.read(1)
        elapsed = time.perf_counter() - start
        writer.close()
    return nbytes * 8 / elapsed


def _error(measured: float, configured: float) -> str:
    return f"{(measured - configured) / configured * 100:+.1f}%"


async def measure() -> list[Row]:
    rows: list[Row] = []
    for latency_s in LATENCIES_S:
        measured = await asyncio.wait_for(one_way_latency(latency_s), TIMEOUT_S)
        rows.append(
            (
                "latency",
                f"{latency_s * 1e3:.0f} ms",
                f"{measured * 1e3:.2f} ms",
                _error(measured, latency_s),
            )
        )
    for bandwidth_bps in BANDWIDTHS_BPS:
        measured = await asyncio.wait_for(throughput(bandwidth_bps), TIMEOUT_S)
        rows.append(
            (
                "bandwidth",
                f"{bandwidth_bps / 1e6:.0f} Mbit/s",
                f"{measured / 1e6:.3f} Mbit/s",
                _error(measured, bandwidth_bps),
            )
        )
    return rows


def show(rows: list[Row], title: str) -> None:
    header = ("quantity", "configured", "measured", "error")
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        for row in (header, *rows):
            print("  ".join(cell.ljust(14) for cell in row))
        return
    table = Table(*header, title=title)
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def main() -> None:
    choice = choose_shaper()
    started = time.perf_counter()
    rows = asyncio.run(measure())
    title = f"link accuracy, shaper measured: relay ({time.perf_counter() - started:.0f} s)"
    show(rows, title)
    print(f"shaper this host would choose: {choice.shaper} ({choice.reason})")


if __name__ == "__main__":
    main()
