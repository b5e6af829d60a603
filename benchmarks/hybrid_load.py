"""The hybrid run's load generator: its sustained rate and its lag behind the schedule.

    python benchmarks/hybrid_load.py [--devices 2000] [--gateways 10] [--rates 1,2,5,10]
                                     [--duration 10] [--qos 0]

One local Mosquitto (no containers). The generator (experiments.hybrid.load) runs D simulated
devices spread over G gateways at each per-device rate in turn (periodic, 200-byte SenML
readings, the device link 2 ms), for `duration` seconds each, publishing batched to the
gateways' load topics; a subscriber on those topics counts the readings that arrive. Per rate
it prints the offered and achieved rate (readings emitted per second), the readings that
arrived, and the lag of the emissions behind their schedule (p50/p99/max over `lag_n`
emissions; `unmeasured reason=...` when none came due). The baseline,
measured in the same run on the same broker: raw paho, one client publishing one 277-byte
envelope per call as fast as it can (QoS as given), `baseline_rate=`. Last:
`sustained_rate=` (the highest offered rate achieved within 5 % with p99 lag under 100 ms) and
`ratio=sustained_rate / baseline_rate`. Everything it starts (broker, threads, clients,
temporary folders) goes at the end, on an error and on Ctrl-C.

Measured on this 2-core host, 2,000 devices on 10 gateways, 10 s per rate, QoS 0, two runs
(load average 22 and 33 from other work: the generator had a fraction of one core):

| offered/s | achieved/s | arrived of sent | lag p50 | lag p99 | lag max |
|---|---|---|---|---|---|
| 2,000 | 1,999 / 2,000 | 99.96 / 100 % | 0.2 / 0.1 ms | 46 / 46 ms | 184 / 207 ms |
| 4,000 | 3,995 / 3,998 | 99.9 / 100 % | 4.4 / 11 ms | 184 / 203 ms | 284 / 262 ms |
| 10,000 | 7,370 / 5,109 | 90 / 100 % | 0.75 / 0.81 s | 1.3 / 1.7 s | 1.3 / 1.7 s |
| 20,000 | 7,054 / 4,265 | 92 / 100 % | 0.85 / 0.94 s | 1.7 / 2.1 s | 1.8 / 2.2 s |

`baseline_rate=` 12,757 and 33,456 msg/s; `sustained_rate=2000`, `ratio=` 0.157 and 0.060.
The first run's missing readings: it stopped the generator with readings still held on their
2 ms device links (dropped then; the generator now lets the links deliver what they hold
before it stops, as the agents' drivers do at a run's end) and counted arrivals 1 s after the
stop only; the second waits until the count stops growing. Above its capacity the generator falls
behind, then, like the agents' drivers, skips ahead of emissions more than 1 s late
(emu.agent.drivers.CATCH_UP): the achieved rate and the lag say so in the manifest.

Where the time goes: the schedule itself, the gateway agent's driver code, costs 22 us of CPU
per reading on this host (`planned()` on a virtual clock: 100,000 readings; half of it the
CITY reading's body, its Gaussian draws and rounding); the envelope, the sent record, the
batching and paho add about as much again. Batching makes the broker's share small: one
publish per gateway and wake-up (18,363 publishes for 20,000 readings at 2,000/s, 148 for
45,106 when behind). Raw paho publishing one 277-byte envelope per call costs 30-80 us.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emu.agent.config import DriverConfig  # noqa: E402
from emu.agent.mqtt import new_client  # noqa: E402
from emu.agent.protocol import Envelope  # noqa: E402
from experiments.hybrid.figures import figure_line  # noqa: E402
from experiments.hybrid.load import LoadGenerator, Target  # noqa: E402
from workloads.spark.local_broker import LocalMosquitto  # noqa: E402


def baseline(address: tuple[str, int], qos: int, seconds: float = 3.0) -> float:
    """Raw paho: messages per second one client hands to the broker, one per publish."""
    client = new_client(f"foglab-bench-raw-{time.time_ns()}")
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    client.connect(*address)
    client.loop_start()
    try:
        payload = Envelope(1, "city", "s-1", time.time(), 0, "x" * 200).encode()
        sent = 0
        begin = time.perf_counter()
        info = None
        while time.perf_counter() - begin < seconds:
            for _ in range(1000):
                info = client.publish("bench/raw", payload, qos)
            sent += 1000
        if info is not None:
            info.wait_for_publish(30)
        return sent / (time.perf_counter() - begin)
    finally:
        client.disconnect()
        client.loop_stop()


class Counter:
    """A subscriber counting the readings (lines) that reach the load topics."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.count = 0
        self._lock = threading.Lock()
        subscribed = threading.Event()
        self.client = new_client(f"foglab-bench-sub-{time.time_ns()}")
        self.client.on_message = self._message
        self.client.on_subscribe = lambda *args: subscribed.set()
        self.client.connect(*address)
        self.client.loop_start()
        self.client.subscribe("foglab/load/#", 1)
        if not subscribed.wait(10):
            self.close()
            raise RuntimeError("the broker did not confirm the subscription")

    def _message(self, client, userdata, message) -> None:
        with self._lock:
            self.count += message.payload.count(b"\n") + 1

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def one_rate(address: tuple[str, int], devices: int, gateways: int, rate: float, qos: int,
             duration: float, folder: Path) -> dict:
    names = [f"s-{i}" for i in range(devices)]
    targets = [Target(f"gw-{g + 1}", g + 1, 7, f"{address[0]}:{address[1]}",
                      (DriverConfig("city", names[g::gateways], rate=rate,
                                    arrivals="periodic", size=200, qos=qos,
                                    access_latency=0.002, load=True),))
               for g in range(gateways)]
    counter = Counter(address)
    try:
        epoch = time.time() + 0.5
        generator = LoadGenerator(targets, epoch, folder / f"rate-{rate:g}")
        generator.start()
        try:
            time.sleep(max(0.0, epoch + duration - time.time()))
        finally:
            generator.stop()
        # What is on its way: until the count stops growing (at most 10 s).
        deadline, last = time.monotonic() + 10.0, -1
        while counter.count != last and time.monotonic() < deadline:
            last = counter.count
            time.sleep(0.5)
        return {**generator.facts(), "arrived": counter.count, "offered": devices * rate}
    finally:
        counter.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=2000)
    parser.add_argument("--gateways", type=int, default=10)
    parser.add_argument("--rates", default="1,2,5,10", help="per device, messages/s")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--qos", type=int, choices=(0, 1), default=0)
    args = parser.parse_args(argv)
    if args.devices < 1 or args.gateways < 1 or args.duration <= 0:
        parser.error("--devices and --gateways must be at least 1, --duration above 0")
    try:
        rates = [float(r) for r in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates: numbers separated by commas, not {args.rates!r}")
    with LocalMosquitto() as broker, tempfile.TemporaryDirectory(
            prefix="foglab-hybrid-load-") as scratch:
        address = (broker.host, broker.port)
        raw = baseline(address, args.qos)
        print(f"baseline_rate={raw:.0f}", flush=True)
        sustained = 0.0
        for rate in rates:
            facts = one_rate(address, args.devices, args.gateways, rate, args.qos,
                             args.duration, Path(scratch))
            lag = facts["lag_ms"]
            achieved = figure_line("achieved", facts["rate"], "no time from start to stop",
                                   "{:.0f}")
            print(f"offered={facts['offered']:.0f} {achieved} sent={facts['sent']} "
                  f"arrived={facts['arrived']} batches={facts['batches']} "
                  + " ".join(figure_line(f"lag_{q}_ms", lag[q], lag.get("unmeasured"))
                             for q in ("p50", "p99", "max")) + f" lag_n={lag['n']}", flush=True)
            if (lag["p99"] is not None and facts["rate"] is not None
                    and facts["rate"] >= 0.95 * facts["offered"] and lag["p99"] < 100.0):
                sustained = max(sustained, facts["offered"])
        print(f"sustained_rate={sustained:.0f}")
        print(f"ratio={sustained / raw:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
