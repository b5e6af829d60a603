"""What time dilation keeps and what it cannot: one small emulated run at several K.

    python benchmarks/dilation.py [--dilations 1,2,4] [--duration 20] [--loss 0.01]

The same experiment (4 sensors at 10/s on one arm64 gateway, a window operator on a second one,
a sink on a cloud VM; 20 ms from the gateways to the broker, 30 ms to the cloud, `--loss` on
the gateways' links) at each K. In emulated time the figures should not move with K: a
trend with K is a timer foglab does not dilate (the kernel's TCP timers, JVM or interpreter
pauses, QEMU's translation cache). Prints per K: `K= p50_ms= p95_ms= p99_ms= delivered=
retransmitted_share= window_count_err= wall_over_ideal= pressure_mean=`, and each figure's
ratio to K = 1's, measured in the same run (`p50_ratio=`, `p95_ratio=`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.loader import parse_text  # noqa: E402
from experiments.runner import run_experiment  # noqa: E402

EXPERIMENT = """
name: dilation
topology:
  name: dilation
  nodes:
    - {{name: sensor, kind: device, replicas: 4}}
    - {{name: gw, kind: gateway, replicas: 2}}
    - {{name: broker, kind: broker}}
    - {{name: cloud, kind: cloud_vm, profile: vm.small}}
  links:
    - {{from: sensor-*, to: gw-1, latency: 2ms}}
    - {{from: gw-*, to: broker, latency: 20ms, loss: {loss}}}
    - {{from: broker, to: cloud, latency: 30ms}}
workload:
  name: w
  streams: [{{name: s, sources: sensor-*, rate: 10/s, arrivals: periodic, size: 100B, qos: 1}}]
pipeline:
  - {{name: count, task: passthrough, on: gw-2, reads: s, window: {{size: 2s}}}}
  - {{name: sink, task: passthrough, on: cloud, reads: s}}
run: {{backend: emu, duration: {duration}s, seed: 3, drain: 3s, dilation: {k}}}
"""


def one(k: float, duration: float, loss: float, root: Path) -> dict:
    experiment = parse_text(EXPERIMENT.format(k=k, duration=duration, loss=loss))
    start = time.monotonic()
    (outcome,) = run_experiment(experiment, root / f"k{k:g}")
    wall = time.monotonic() - start
    if outcome.error:
        raise SystemExit(f"K={k:g}: {outcome.error}")
    folder = outcome.folder
    messages = pq.read_table(folder / "messages.parquet").to_pandas()
    windows = pq.read_table(folder / "windows.parquet").to_pandas()
    nodes = pq.read_table(folder / "nodes.parquet").to_pandas()
    facts = json.loads((folder / "manifest.json").read_text())["facts"]
    latency = messages["latency"].dropna().to_numpy() * 1e3
    expected = 4 * 10 * 2  # readings per full 2 s window
    full = windows[(windows["t"] > 3) & (windows["t"] < duration - 1)]
    ideal = k * (duration + 3)
    return {
        "K": k, "p50_ms": float(np.percentile(latency, 50)),
        "p95_ms": float(np.percentile(latency, 95)), "p99_ms": float(np.percentile(latency, 99)),
        "delivered": int((messages["state"] == "delivered").sum()), "rows": len(messages),
        "window_count_err": float((full["count"] - expected).abs().max()) if len(full) else -1,
        "wall_over_ideal": wall / ideal,
        "pressure_mean": float(nodes["host_pressure"].dropna().mean())
        if "host_pressure" in nodes else float("nan"),
        "dilation_fact": facts.get("dilation")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dilations", default="1,2,4")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--loss", type=float, default=0.01)
    args = parser.parse_args()
    ks = [float(k) for k in args.dilations.split(",")]
    print(f"host_cores={len(os.sched_getaffinity(0))} load_avg_1m={os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="foglab-dilation-") as tmp:
        results = [one(k, args.duration, args.loss, Path(tmp)) for k in ks]
    base = results[0]
    for result in results:
        ratios = {f"{key}_ratio": result[f"{key}_ms"] / base[f"{key}_ms"]
                  for key in ("p50", "p95", "p99")}
        print(" ".join(f"{key}={value:.3f}" if isinstance(value, float) else f"{key}={value}"
                       for key, value in {**result, **ratios}.items()))
    print(f"load_avg_1m_end={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
