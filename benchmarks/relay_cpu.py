"""The link relay's CPU per relayed message, against the relay it replaced, in one run.

    python benchmarks/relay_cpu.py [--rate 400] [--size 180] [--seconds 10] [--connections 1]

Why: the relays are most of the testbed's own CPU (docs/host-cpu.md): every message a node
sends crosses one or two of them. This measures what one message costs the relay's thread.

How: a load process (a child, so its CPU and GIL are not the relay's) runs a sink and a paced
sender: ``--rate`` messages a second of ``--size`` bytes over ``--connections`` connections,
through a relay of a ``--latency`` link (20 ms) running on its own event loop thread, as in a
cluster (emu.cluster.relays). The relay thread's CPU clock over the span, divided by the
messages, is ``cpu_us_per_message``; each message carries its send time, so the sink also
gives the one-way latency's p50 and p99 (the link's own delay included). ``--jitter`` and
``--bandwidth`` shape the link further (smart-city's gateway uplink: ``--jitter 0.002
--bandwidth 20e6``).

The baseline is the relay as it was at ``--baseline-rev`` (emu/links/relay.py, read with
``git show``: the stream-based relay, a reader, a queue, a delivery task and a sleep per
chunk). The two alternate ``--repeats`` times, so a change in the host's load hits both; the
figures are medians. The host is shared: the load average is printed beside them.
``system_share`` is the kernel's share of the relay thread's CPU, from /proc's 10 ms ticks
(sampled: rough over a few seconds).

Measured on foglab's 2-core host, 2026-11-28, defaults (1 connection, a 20 ms link), load
average 0.6: 132.8 us per message against the stream relay's 191.8 (ratio 0.69, the repeats'
own 0.68); p50/p99 20.39/21.47 ms against 20.43/21.49. With 8 connections (load 5):
158 against 220 (0.72); on uvloop's loop (``--uvloop``, not a dependency) 101.
"""

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emu.links.relay import LinkRelay  # noqa: E402
from emu.links.spec import LinkShape  # noqa: E402

HOST = "127.0.0.1"
# The relay as it was before the protocol-based rewrite (issue 27, item 1).
BASELINE_REV = "3b30d99"

# The load process: a sink that times every message, and a paced sender. Its argv: rate,
# size, seconds, connections. It prints the sink's port, reads the relay's port, sends, and
# prints one JSON line of what the sink saw.
LOAD = r"""
import json, selectors, socket, struct, sys, threading, time
rate, size, seconds, connections = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), \
    int(sys.argv[4])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
latencies, expected = [], int(rate * seconds)
done = threading.Event()

def sink():
    selector = selectors.DefaultSelector()
    listener.setblocking(False)
    selector.register(listener, selectors.EVENT_READ)
    buffers = {}
    while len(latencies) < expected:
        for key, _ in selector.select(timeout=1):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                conn.setblocking(False)
                buffers[conn] = b""
                selector.register(conn, selectors.EVENT_READ)
                continue
            data = key.fileobj.recv(65536)
            if not data:
                selector.unregister(key.fileobj)
                continue
            now = time.monotonic()
            buffer = buffers[key.fileobj] + data
            while len(buffer) >= size:
                latencies.append(now - struct.unpack("!d", buffer[:8])[0])
                buffer = buffer[size:]
            buffers[key.fileobj] = buffer
    done.set()

threading.Thread(target=sink, daemon=True).start()
port = int(sys.stdin.readline())
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
padding = bytes(size - 8)
start = time.monotonic()
for i in range(expected):
    due = start + i / rate
    wait = due - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    socks[i % connections].sendall(struct.pack("!d", time.monotonic()) + padding)
done.wait(timeout=30)
print(json.dumps({"received": len(latencies), "latencies": latencies}), flush=True)
for each in socks:
    each.close()
"""


def baseline_class(rev: str) -> type:
    """The LinkRelay class of emu/links/relay.py at ``rev``, loaded under a module of its own."""
    source = subprocess.run(["git", "show", f"{rev}:emu/links/relay.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("_baseline_relay", loader=None)
    assert spec is not None
    module = ModuleType(spec.name)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    exec(compile(source, f"{rev}:emu/links/relay.py", "exec"), module.__dict__)
    return module.LinkRelay


def _thread_ticks(native_id: int) -> tuple[int, int]:
    """A thread's (user, system) CPU in clock ticks, from /proc: the kernel's share is the
    relay's system calls (loopback TCP's send path included)."""
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(relay_class: Callable[..., Any], args: argparse.Namespace,
            new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
            ) -> dict[str, float]:
    """One load run through a relay of ``relay_class`` on its own loop thread."""
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD, str(args.rate), str(args.size), str(args.seconds),
         str(args.connections)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert load.stdin is not None and load.stdout is not None
    loop = new_loop()
    thread = threading.Thread(target=loop.run_forever, name="relay-cpu", daemon=True)
    thread.start()
    try:
        sink_port = int(load.stdout.readline())
        shape = LinkShape(args.latency, args.jitter, args.bandwidth)
        relay = relay_class(HOST, sink_port, shape, seed=1)
        port = asyncio.run_coroutine_threadsafe(relay.start(), loop).result()
        assert thread.ident is not None
        clock = time.pthread_getcpuclockid(thread.ident)
        assert thread.native_id is not None
        ticks_before = _thread_ticks(thread.native_id)
        cpu_before, wall_before = time.clock_gettime(clock), time.monotonic()
        load.stdin.write(f"{port}\n")
        load.stdin.flush()
        result = json.loads(load.stdout.readline())
        cpu = time.clock_gettime(clock) - cpu_before
        wall = time.monotonic() - wall_before
        ticks_after = _thread_ticks(thread.native_id)
        asyncio.run_coroutine_threadsafe(relay.close(), loop).result()
    finally:
        load.kill()
        load.wait()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
    user, system = (after - before for after, before in zip(ticks_after, ticks_before,
                                                              strict=True))
    received, latencies = result["received"], result["latencies"]
    if received == 0:
        raise RuntimeError("no message crossed the relay")
    return {
        "cpu_us_per_message": cpu / received * 1e6,
        "cpu_share": cpu / wall,
        "system_share": system / (user + system) if user + system else 0.0,
        "received": received,
        "p50_ms": _percentile(latencies, 0.5) * 1e3,
        "p99_ms": _percentile(latencies, 0.99) * 1e3,
    }


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=400.0, help="messages per second")
    parser.add_argument("--size", type=int, default=180, help="bytes per message (>= 8)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--latency", type=float, default=0.02, help="the link's one-way delay")
    parser.add_argument("--jitter", type=float, default=0.0, help="the link's jitter (s)")
    parser.add_argument("--bandwidth", type=float, default=None, help="the link's bit/s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline-rev", default=BASELINE_REV)
    parser.add_argument("--uvloop", action="store_true",
                        help="also measure the relay on uvloop's event loop (if importable)")
    args = parser.parse_args()
    if args.size < 8:
        parser.error(f"--size must be at least 8 bytes (the send time), got {args.size}")
    designs: dict[str, tuple[Callable[..., Any], Callable[[], asyncio.AbstractEventLoop]]] = {
        "baseline": (baseline_class(args.baseline_rev), asyncio.new_event_loop),
        "relay": (LinkRelay, asyncio.new_event_loop)}
    if args.uvloop:
        import uvloop  # not a dependency: for comparison only

        designs["relay-uvloop"] = (LinkRelay, uvloop.new_event_loop)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in designs}
    load_before = os.getloadavg()
    for repeat in range(args.repeats):
        for name, (relay_class, new_loop) in designs.items():
            figures = measure(relay_class, args, new_loop)
            runs[name].append(figures)
            print(f"run={repeat + 1} design={name} "
                  + " ".join(f"{key}={value:.4g}" for key, value in figures.items()), flush=True)
    load_after = os.getloadavg()
    for name, figures in runs.items():
        cpu = _median(figures, "cpu_us_per_message")
        print(f"design={name} median_cpu_us_per_message={cpu:.1f}"
              f" p50_ms={_median(figures, 'p50_ms'):.2f} p99_ms={_median(figures, 'p99_ms'):.2f}")
    new, old = _median(runs["relay"], "cpu_us_per_message"), _median(
        runs["baseline"], "cpu_us_per_message")
    print(f"messages={int(args.rate * args.seconds)} rate={args.rate:g} size={args.size} "
          f"connections={args.connections} latency_ms={args.latency * 1e3:g} "
          f"jitter_ms={args.jitter * 1e3:g} bandwidth_bps={args.bandwidth}")
    print(f"cpu_us_per_message={new:.1f}")
    print(f"baseline_cpu_us_per_message={old:.1f} (relay.py at {args.baseline_rev})")
    paired = statistics.median(
        each["cpu_us_per_message"] / base["cpu_us_per_message"]
        for each, base in zip(runs["relay"], runs["baseline"], strict=True))
    print(f"ratio={new / old:.3f} (median of the repeats' own ratios {paired:.3f})")
    print(f"latency_p50_ms={_median(runs['relay'], 'p50_ms'):.2f} "
          f"latency_p99_ms={_median(runs['relay'], 'p99_ms'):.2f}")
    print(f"baseline_latency_p50_ms={_median(runs['baseline'], 'p50_ms'):.2f} "
          f"baseline_latency_p99_ms={_median(runs['baseline'], 'p99_ms'):.2f}")
    print("load_average_before=" + ",".join(f"{x:.2f}" for x in load_before)
          + " load_average_after=" + ",".join(f"{x:.2f}" for x in load_after))


if __name__ == "__main__":
    main()
