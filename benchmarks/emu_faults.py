"""Quickstart on emu through faults: a gateway killed, the broker restarted (QoS 1 and QoS 0).

    python benchmarks/emu_faults.py [--duration 60] [--at 20] [--gateway gw-2]
                                    [--broker broker-1] [--runs baseline,kill,qos1,qos0]

Runs `experiments/quickstart.yaml` on the emulation (4 Raspberry Pi gateways, one broker, a
Spark cloud VM) for `--duration` seconds, several times in one process:

- baseline: no fault (the workload's QoS, 0);
- kill: `docker kill` of `--gateway` `--at` seconds after the devices start;
- restart_qos1 and restart_qos0: `docker restart` of `--broker` `--at` seconds in, with the
  city stream at QoS 1 (`workload.streams.0.qos=1`), then at QoS 0.

The faults are injected from a thread through the engine's API on this run's own containers
(emu.engines.docker.faults, by the cluster's owner label). Each run is driven as `foglab run` drives
it (experiments.loader.load, experiments.runner.run_experiment) into a scratch results folder
removed at the end. Per run it prints `delivered=` (distinct messages that reached the sink),
`lost=` (sent, not dropped by a device's radio, neither filtered nor delivered), `dropped=`
(the radio's), `status=`, `failed=` (the manifest's failed nodes), `outage_s=` (how long the
broker was away) and whether every table was written; last, the figures the issue asks for:

    kill_delivered=  kill_lost=  kill_status=  qos1_lost=  qos0_lost=  ratio=

ratio is the kill run's delivered over the baseline's: the share of the fault-free delivery
kept when one gateway of four dies a third of the way in (about 1 - 1/4 * 2/3 = 0.83 if
nothing but the dead gateway's messages is missing). Everything a run makes is removed with
it, also on Ctrl-C.

Measured on the 2-core development host (2026-11-25, defaults, faults at 20 s of 60):

    run            delivered  lost  status    broker away
    baseline       11,592     0     ok        -
    kill gw-2       9,670     0     degraded  -            (ratio 0.834)
    restart, QoS 1 11,592     0     ok        0.71 s
    restart, QoS 0 11,368     223   ok        0.74 s
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emu.engines.docker.faults import Fault  # noqa: E402
from experiments.loader import load  # noqa: E402
from experiments.results import load_run  # noqa: E402
from experiments.runner import run_experiment  # noqa: E402
from experiments.schema import TABLES  # noqa: E402


def run_once(label: str, out: Path, duration: float, fault: tuple[str, str] | None, at: float,
             extra: list[str]) -> dict:
    """One quickstart run on emu, with a fault injected `at` s after its devices start."""
    import docker

    experiment = load("quickstart", overrides=["run.backend=emu", f"run.duration={duration}s",
                                               *extra])
    injector = None
    if fault is not None:
        node, action = fault
        injector = Fault(docker.from_env(), node, action, at)
        injector.start()
    started = time.monotonic()
    try:
        (outcome,) = run_experiment(experiment, out, sweep_id=label)
    finally:
        if injector is not None:
            injector.cancel()
            injector.join(30)
    run = load_run(outcome.folder)
    manifest = run.manifest
    facts = manifest.get("facts") or {}
    counts = facts.get("messages", {})
    outages = facts.get("outages", {})
    outage_s = sum((up - down) for spans in outages.values() for down, up in spans
                   if up is not None)
    written = all((outcome.folder / f"{name}.parquet").exists() for name in TABLES)
    figures = {
        "delivered": counts.get("received"), "lost": counts.get("lost"),
        "dropped": counts.get("dropped"), "sent": counts.get("sent"),
        "status": manifest.get("status"),
        "failed": ",".join(sorted(manifest.get("failed_nodes") or {})) or "-",
        "outage_s": round(outage_s, 2), "tables_written": written,
        "wall_s": round(time.monotonic() - started, 1),
    }
    if injector is not None:
        figures["fault_error"] = injector.error
        figures["fault_injected"] = injector.done is not None
    if manifest.get("error"):
        figures["error"] = manifest["error"]
    print(f"[{label}] " + " ".join(f"{key}={value}" for key, value in figures.items()),
          flush=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--at", type=float, default=20.0,
                        help="seconds after the devices start")
    parser.add_argument("--gateway", default="gw-2")
    parser.add_argument("--broker", default="broker-1")
    parser.add_argument("--runs", default="baseline,kill,qos1,qos0",
                        help="which runs, of baseline, kill, qos1, qos0")
    options = parser.parse_args()
    wanted = set(options.runs.split(","))
    plan = {
        "baseline": ("baseline", None, []),
        "kill": ("kill", (options.gateway, "kill"), []),
        "qos1": ("restart_qos1", (options.broker, "restart"), ["workload.streams.0.qos=1"]),
        "qos0": ("restart_qos0", (options.broker, "restart"), ["workload.streams.0.qos=0"]),
    }
    unknown = wanted - set(plan)
    if unknown:
        parser.error(f"unknown runs {', '.join(sorted(unknown))}; runs: {', '.join(plan)}")
    out = Path(tempfile.mkdtemp(prefix="foglab-bench-faults-"))
    results: dict[str, dict] = {}
    try:
        for key, (label, fault, extra) in plan.items():
            if key in wanted:
                results[key] = run_once(label, out, options.duration, fault, options.at, extra)
    except KeyboardInterrupt:
        print("interrupted")
        return 130
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f"duration_s={options.duration:g} fault_at_s={options.at:g}")
    kill, qos1, qos0 = (results.get(key) for key in ("kill", "qos1", "qos0"))
    if kill:
        print(f"kill_delivered={kill['delivered']}")
        print(f"kill_lost={kill['lost']}")
        print(f"kill_status={kill['status']}")
        print(f"kill_failed={kill['failed']}")
    for name, figures in (("qos1", qos1), ("qos0", qos0)):
        if figures:
            print(f"{name}_lost={figures['lost']} {name}_status={figures['status']} "
                  f"{name}_outage_s={figures['outage_s']}")
    print("tables_written=" + str(all(r["tables_written"] for r in results.values())))
    baseline = results.get("baseline")
    if baseline and baseline["delivered"] and kill:
        print(f"baseline_delivered={baseline['delivered']}")
        print(f"ratio={kill['delivered'] / baseline['delivered']:.3f}")
    good = (all(r["tables_written"] for r in results.values())
            and (not kill or (kill["status"] == "degraded"
                              and options.gateway in kill["failed"].split(",")))
            and (not qos1 or (qos1["lost"] == 0 and qos1["status"] == "ok"))
            and (not qos0 or (qos0["lost"] or 0) > 0))
    return 0 if good else 1

if __name__ == "__main__":
    sys.exit(main())
