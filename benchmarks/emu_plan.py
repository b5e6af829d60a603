"""The capacity planner's predicted CPU against an emulated run's measured CPU (issue 28).

    python benchmarks/emu_plan.py [--gateways 4,12] [--duration 20] [--dilation auto]
                                       [--keep DIR]

Per G in `--gateways`: the smart city with G Pi gateways of 10 sensors each
(benchmarks/emu_capacity.city) and the quickstart's pipeline on it; the planner
(emu.cluster.capacity, as `foglab emu plan` runs it: one host of this host's cores) predicts the
host cores the run takes at its dilation K (each container's demand at K = 1 from the calibrated
model, experiments.dilation, plus the link relays and the engine, over K); then one emulated
run of `--duration` emulated seconds at `run.dilation` measures them (emu.host.accounting's
`host_cpu` fact in the run's manifest: the topology's containers, the relays' thread and the
container engine, over the measured span in host seconds). It prints per G:

    G= K= K_run= predicted_cores= measured_cores= rel_err= plan_rel_err=
    containers_predicted= containers_measured= containers_rel_err=
    host_load= host_busy_cores= other_cores=

`rel_err` (= `plan_rel_err`, the issue's name) is (predicted - measured) / measured over the
same parts; `containers_rel_err` the same over the topology's containers alone (the engine's
measured CPU serves every container of the host, other people's too); `K_run` the dilation
the run chose (it must equal the planner's K); `host_load`
the 1-minute load average at the run's end and `other_cores` the host's CPU that was neither
the run's containers nor foglab's machinery (other people's work beside it). Then one line per
part (`G= part= predicted= measured=`: gateways together, cloud VMs, brokers, relays, engine).
A G whose run fails is said (`G=.. failed=`) and the others go on; the exit status is 1 then,
and 1 too when a |rel_err| is above the target 0.20.

Trial runs on the 2-core development host, 2026-11-28 04:17-04:38, 20 emulated seconds,
`auto`, the reference profile; other engineers' tests (Spark clusters, emu tests) beside every
run: load average 13 to 31, the host 100 % busy, about 1.1 cores of it theirs (other_cores):

    G   K    predicted  measured  rel_err   containers: predicted  measured  err
    4   2    0.920      0.949     -0.031                 0.911      0.595     +0.531
    4   2    0.920      0.874     +0.052                 0.911      0.550     +0.658
    4   2    0.920      0.969     -0.050                 0.911      0.512     +0.778
    12  2.5  0.835      0.844     -0.010                 0.819      0.606     +0.351
    12  2.5  0.835      0.858     -0.027                 0.819      0.736     +0.113

By part: the gateways within 7 % every time (G=4 0.054 against 0.054-0.058, G=12 0.124
against 0.129), the broker 0.001-0.002 against 0.003-0.005, the relays half the measured
(0.006 against 0.012-0.014; 0.013 against 0.022-0.025); the Spark job on cloud-1 predicted
0.856 (G=4) and 0.693 (G=12) host cores at K, measured 0.45-0.54 and 0.47-0.60: its fixed
1.7 CPU seconds per batch (workloads.calibration.DEFAULT_SPARK, a young JVM) did not get the
CPU on a host others kept busy; and the engine, predicted 0.002-0.003, measured 0.10-0.44,
since dockerd serves the other engineers' containers too. The totals are within 5 % because
these two errors cancel, not because each part is right: on a quiet host the engine's share
falls and Spark's rises, and the figure to watch is `containers_rel_err`.

Then alone (04:56-05:01, load 1.3 to 4, other_cores 0.01 and 0.12: the final run):

    G   K    predicted  measured  rel_err   containers: predicted  measured  err
    4   2    0.920      0.963     -0.044                 0.911      0.942     -0.033
    12  2.5  0.835      1.111     -0.249                 0.819      1.065     -0.230

G = 4 meets the target; G = 12 misses it, by the Spark job (cloud-1 0.693 predicted, 0.920
measured; gateways 0.124 against 0.139, relays 0.013 against 0.030). The model charges Spark
a fixed 1.7 s per batch and the operator's written 300 us per message, so its cloud-1 is
nearly the same at both sizes (1.71 and 1.73 cores at K = 1); measured, a batch took 1.76 s
at K = 2 (about 80 messages per batch) and 2.30 s at K = 2.5 (about 300): about 1.56 s per
batch and 2.5 ms per message, if every reading passes the filter. A per-message part of that
size in the model (sim.costs, workloads.calibration: not the planner's) would predict
0.92 cores for G = 12. `calibration.spark.message` exists but the model does not charge it
(a calibration with message 5.7 ms predicted the same figures here).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.emu_capacity import city, parse_dilation, parse_gateways  # noqa: E402
from benchmarks.sim_vs_emu import run  # noqa: E402
from emu.cluster.capacity import plan_experiment  # noqa: E402
from emu.host import accounting  # noqa: E402
from experiments import compare as comparing  # noqa: E402
from experiments.dilation import host_cores  # noqa: E402
from experiments.loader import load  # noqa: E402
from experiments.planning import prediction  # noqa: E402
from topologies.terminal import stop_on_signals  # noqa: E402

TARGET = 0.20
RELAYS_PART = "link relays (emu.cluster.relays)"
GROUPS = (("gateways", "gw-"), ("cloud", "cloud"), ("brokers", "broker"))


def predict(sets: list[str]) -> tuple[float, float, dict[str, float]]:
    """The planner's K, host cores at K, and per group (GROUPS, relays, engine) at K."""
    point = load("quickstart", [*sets, "run.backend=emu"], []).points[0]
    demand, dilation = prediction(point.spec, point.topology)
    plan = plan_experiment(point.topology, point.spec.workload, point.spec.pipeline,
                           point.spec.run.seed, demand, 1, float(host_cores()),
                           64 * 2**30, dilation)
    k = plan.dilation
    parts = {group: sum(v for n, v in demand.items() if n.startswith(prefix)) / k
             for group, prefix in GROUPS}
    parts |= {"relays": demand.get("relays", 0.0) / k, "engine": demand.get("engine", 0.0) / k}
    return k, plan.total_demand / k, parts


def host_cpu(folder: Path) -> tuple[dict, float | None]:
    """The run's `host_cpu` fact and its dilation, from its manifest."""
    for path in sorted(folder.rglob("manifest.json")):
        data = json.loads(path.read_text())
        facts = data.get("facts") or data
        found = _find(facts, "host_cpu")
        if found:
            return found, _find(facts, "dilation")
    raise RuntimeError(f"no host_cpu fact in {folder}'s manifest")


def _find(data, key: str):
    if isinstance(data, dict):
        if key in data and data[key] is not None and not isinstance(data[key], dict | list) \
                or key in data and isinstance(data[key], dict) and "parts" in data[key]:
            return data[key]
        for value in data.values():
            if (found := _find(value, key)) is not None:
                return found
    elif isinstance(data, list):
        for value in data:
            if (found := _find(value, key)) is not None:
                return found
    return None


def measured(fact: dict) -> dict[str, float]:
    """Host cores per group over the span: the topology's containers, relays, engine."""
    span = fact["span_s"] or 1.0
    rows = {row["part"]: row for row in fact["parts"]}
    parts = {group: sum(r["cpu_s"] for p, r in rows.items()
                        if r["kind"] == accounting.EMULATED and p.startswith(prefix)) / span
             for group, prefix in GROUPS}
    parts["relays"] = rows.get(RELAYS_PART, {"cpu_s": 0.0})["cpu_s"] / span
    parts["engine"] = rows.get(accounting.ENGINE_PART, {"cpu_s": 0.0})["cpu_s"] / span
    return parts


def one(gateways: int, dilation: str, duration: float, out: Path) -> bool:
    out.mkdir(parents=True, exist_ok=True)
    topology = out / f"smart-city-{gateways}gw.yaml"
    topology.write_text(yaml.safe_dump(city(gateways), sort_keys=False))
    sets = [f"topology={topology}", f"run.duration={duration:g}s", "run.drain=5s",
            "run.repetitions=1", f"run.dilation={dilation}"]
    k, predicted, parts = predict(sets)
    data = run("quickstart", "emu", "emu", None, out, sets)
    fact, k_run = host_cpu(data.folder)
    found = measured(fact)
    total = sum(found.values())
    error = (predicted - total) / total if total else float("nan")
    span = fact["span_s"] or 1.0
    # The topology's containers alone: the model's own figure, free of the engine's, which
    # serves every container of the host (other people's too).
    own = [sum(v for g, v in d.items() if g in dict(GROUPS)) for d in (parts, found)]
    own_error = (own[0] - own[1]) / own[1] if own[1] else float("nan")
    print(f"G={gateways} K={k:g} K_run={k_run} predicted_cores={predicted:.3f} "
          f"measured_cores={total:.3f} rel_err={error:+.3f} plan_rel_err={error:+.3f} "
          f"containers_predicted={own[0]:.3f} containers_measured={own[1]:.3f} "
          f"containers_rel_err={own_error:+.3f} "
          f"host_load={os.getloadavg()[0]:.2f} fact_host_load={fact['host_load']:.2f} "
          f"host_busy_cores={fact['host_busy_s'] / span:.2f} "
          f"other_cores={fact['other_s'] / span:.2f} span_s={span:.1f}", flush=True)
    for group in parts:
        print(f"G={gateways} part={group} predicted={parts[group]:.3f} "
              f"measured={found[group]:.3f}", flush=True)
    return abs(error) <= TARGET


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateways", default="4,12", help="comma-separated counts")
    parser.add_argument("--dilation", default="auto", help="auto, real-speed or K >= 1")
    parser.add_argument("--duration", type=float, default=20.0, help="emulated seconds")
    parser.add_argument("--keep", type=Path, help="keep the runs in this folder")
    args = parser.parse_args()
    try:
        counts = parse_gateways(args.gateways)
        dilation = parse_dilation(args.dilation)
    except ValueError as error:
        parser.error(str(error))
    if not args.duration > 0:
        parser.error(f"--duration must be > 0, got {args.duration:g}")
    if why := comparing.emu_unavailable():
        print(f"emu_plan: cannot run the emulation: {why}", file=sys.stderr)
        return 1
    out = args.keep or Path(tempfile.mkdtemp(prefix="foglab-capacity-plan-"))
    status = 0
    try:
        with stop_on_signals():
            for gateways in counts:
                try:
                    if not one(gateways, dilation, args.duration, out / f"G{gateways}"):
                        status = 1
                except (RuntimeError, comparing.BrokenRun) as failure:
                    print(f"G={gateways} failed={str(failure).splitlines()[0]!r}")
                    status = 1
    finally:
        if args.keep is None:
            shutil.rmtree(out, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
