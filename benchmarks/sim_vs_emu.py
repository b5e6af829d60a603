"""Does the model predict the emulation? Three configurations on sim and emu (issue 17's target).

    python benchmarks/sim_vs_emu.py [--duration 60] [--configs quickstart,spark,links] [--keep DIR]
                                    [--dilation K|auto|real-speed] [--idle S]

Each configuration runs three times on one resolved configuration and seed: on the model
calibrated by the shipped profile (`run.calibration=reference`, workloads/calibrations/
reference.yaml, measured on this host), on the model without it (the reference figures of its
hardware profiles: what calibration changes), and on the emulation (real containers; the
emulation ignores `run.calibration`). The runs go as `foglab run` drives them
(experiments.loader.load, experiments.runner.run_experiment) into a scratch folder removed at
the end (`--keep DIR` keeps them), and are compared by `experiments.compare` (read_run,
compare: errors against emu), as `foglab compare` does. The configurations, each scaled to
about a minute of traffic (`--duration`, 60 s) with a 5 s drain instead of 30:

- `quickstart`: experiments/quickstart.yaml as it is (200 city sensors at 1/s over four arm64
  Pi gateways that range-filter, Mosquitto, STATS on Spark on cloud-1), 60 s instead of 10 min;
- `spark`: a Spark STATS query on a cloud VM: experiments/migrate-spark.yaml without its
  migration (four sensors through a Pi gateway and the broker to STATS on cloud-1), the
  sensors at 5/s instead of 2/s so that a minute gives 1,200 messages;
- `links`: the quickstart with its gateway-broker links at 50 ms, 10 Mbit/s and 1 % loss, the
  sink a plain pass-through (no Spark: the links are what is compared, and the JVM's minute of
  start-up is saved).

Per configuration and model it prints `p50_rel_err= p95_rel_err= throughput_rel_err=
lost_sim= lost_emu=` (relative errors of the model against the emulation), the floor and
median of both (`min_ms`: the fastest message, the path's fixed costs; p50 minus it: the
queueing and scheduling), each gateway's and cloud VM's CPU on both, and the emulation's
fidelity (`host_pressure=`: the mean share of the run some task waited for a host CPU,
`saturated=`: the share of the run the host was saturated, `relay_lag_ms=`: the link relays'
worst timer lateness), so that a reader can tell the host from the model. Last:
`worst_uncalibrated=` and `worst=`, the largest |p50 error| over the configurations, without
and with the calibration.
Then where the host's CPU went during the emulated run (emu.host.accounting, watched by
benchmarks/hostcpu; docs/host-cpu.md): a line per part (`part= kind=machinery|emulated|other
cpu_s= share=` of the host's busy time), each node's CPU by process, and the totals
(`host_load=`, `machinery_share=`, `machinery_share_of_run=`); with `--idle S` (30 s; 0: none)
an extra emulated run of S seconds with every driver at rate 0 splits the agents' idle loops
(`idle_loops_s=`) and Spark's per-batch work (`spark_batches_s=`) out of the containers'.
A configuration whose run fails is said (`config=NAME failed=...`), one whose run is not
`ok` (degraded, interrupted) is refused with its run and why (`config=NAME refused=...`: no
errors over a broken run), the others go on, and the script exits 1; without root or a
Docker Engine it says what `foglab emu doctor --fix` does and runs nothing.

`--dilation` (default 1, real time) is every run's `run.dilation` (experiments.dilation): the
emulation runs K times slower than the host's clock (`auto`: the K that keeps the predicted
host CPU at most half busy; `real-speed`: the K that gives the QEMU gateways their profile's
speed), and the calibrated model, given the same setting, stands for the emulation at that K
(experiments.backends.SimBackend, sim.costs: containers' CPU K times faster, the link layer's
own delay 1/K); the uncalibrated model ignores it, a model of the hardware itself. Latencies
and CPU shares are in emulated time on both. The chosen K is printed (`dilation=`, `K=` per
configuration, from the emulated run's manifest). `worst_p95=` follows `worst=` (|p95 error|);
at `--dilation real-speed` also `worst_real_speed=` and `worst_real_speed_p95=`: the same over
the uncalibrated model, whose `rpi4` profile is then what must predict the emulation.

Targets (issue 17): p50 within 10 %, p95 within 20 %, throughput within 5 %, lost equal.
Targets (issue 27): `worst=` within 0.05 and `worst_p95=` within 0.15, the lossy links
included; at `real-speed`, `worst_real_speed=` and `worst_real_speed_p95=` within the same.
Not yet measured at `real-speed` (2026-11-28): K is then 6.584 (0.45 / 0.068), and twice
`--configs links --duration 20 --dilation real-speed` failed before its first reading, the four
QEMU gateways not registered in ZooKeeper within emu.live.agents's 180 host seconds (cloud-1 was);
the quickstart without the 50 ms lossy links registered at that K, after about 85 s.
At `--dilation 2` the same 20 s of `links` ran (host load 0.1-0.4, emu CPU pressure 0.04,
nothing saturated; the calibrated model against emu): p50 64.6 against 63.9 ms (+1.1 %), p95
184.1 against 135.9 ms (+35 %: the model's tail behind its retransmissions is the heavier;
its cause not yet found), throughput -2.1 %, lost 28 / 19 (the radios' 0.5 % of 4,000: 20),
the gateways' CPU 0.032-0.034 against 0.028-0.029 (+14 to +21 %), cloud-1 0.014 against 0.015;
`worst=0.011 worst_p95=0.354`.

The figures below were measured before the model changed on 2026-11-28 (issue 27: loss on a TCP
link a retransmission delay, Spark's per-batch CPU, a calibrated node's `cpu` a share of its
container's limit; see "Where the time goes"); only the later quickstart runs of that day have
the Spark cost. Measured on the 2-core development host (2026-11-25, defaults; errors against
emu; floor: the fastest message; pressure: emu's mean host CPU pressure and its relays' worst
lateness). One complete run at a load average of 10 to 13 (other engineers' emulations beside
it):

    config      model         p50 err  p95 err  thr err  lost     p50 ms    floor ms  pressure
    quickstart  calibrated    -65.5 %  -85.5 %   -3.1 %   71       36.7      28.6
                uncalibrated  -69.3 %  -87.2 %   -3.1 %   71       32.7      24.9
                emu                                       63      106.4      27.8      0.99, 14 ms
    spark       calibrated    -30.6 %  -75.5 %   +0.0 %    0       16.6      16.6
                uncalibrated  -45.2 %  -80.7 %   +0.0 %    0       13.1      13.1
                emu                                        0       23.9      15.5      0.86, 98 ms
    links       calibrated    -32.5 %  -75.2 %   -4.1 %  175       66.8      57.4
                uncalibrated  -36.5 %  -76.8 %   -4.1 %  175       62.7      53.8
                emu                                       63       98.9      56.1      0.98, 78 ms
    worst_uncalibrated=0.693  worst=0.655

An earlier one at a load of 15 to 35 (quickstart in one process, links and spark in a second):

    quickstart  calibrated    -96.8 %  -99.0 %  +38.3 %   71       36.7      28.6
                emu                                       43     1142.5      36.9      0.98, 99 ms
    spark       calibrated    -68.4 %  -86.2 %   +0.0 %    0       16.6      16.6
                emu                                        0       52.5      15.8      0.93, 27 ms
    links       calibrated    -10.2 %  -83.8 %   -3.9 %  175       66.8      57.4
                emu                                       63       74.3      52.9      0.91, 99 ms
    worst_uncalibrated=0.750  worst=0.684

Met: throughput within 5 % everywhere but the quickstart at load 35 (messages still queued at
the end of the drain). Not met: p50 and p95 anywhere, and lost (see loss below; on the
quickstart and spark the model and the emulation draw the device radio's 0.5 % from different
random streams, so equal counts can only be expected on average: 71 against 63 and 43). The
host was saturated (CPU pressure >= 50 %) for 98-100 % of every emu run, with other
engineers' emulations beside them: `compare` marks every emu figure, and too few messages were
sent outside the saturated spans for figures of their own (spark's 22: p50 23.3 ms, p95 31.7).
A first run of `spark` at load 30 failed: its JVM did not start within the emulation's 300 s.
The quickstart alone, measured the same day at a load of 8 (`foglab compare quickstart --set
run.duration=60s --set run.calibration=reference`, CPU pressure 94 %): p50 36.7 against 43.0
ms (-14.5 %; uncalibrated 32.7, -24 %), p95 41.0 against 127.3 ms (-68 %), throughput -3.2 %,
lost 71 against 63, emu's fastest message 23.9 ms against the model's 28.6.

The quickstart again on 2026-11-28 (issue 27; other engineers' tests beside it, load average 5
to 9, emu CPU pressure 84 %): p50 -6.6 % (uncalibrated -16.9 %), p95 -76 %, throughput
-3.1 %, lost 71 / 63, emu p50 39.3 ms, its fastest 23.5 ms. Its host CPU over the 60.9 s
span (119.6 of 121.8 busy seconds, host load 0.98): cloud-1 52.3 s (Spark's per-batch work
50.2 s, its idle 2.1 s), the four gateways 30.3 s (their idle loops 0.21 s), Mosquitto 1.3 s,
machinery 9.6 s (the link relays 6.7 s, the container engine 2.4 s, the run loop 0.35 s,
ZooKeeper 0.14 s, the samplers 0.10 s), others' work 26.1 s: `machinery_share=0.080
machinery_share_of_run=0.103`. An earlier run of the same day: 0.047 and 0.082; a later one
(the model now with a Spark per-batch cost; others' processes took 39 of 121.5 busy seconds,
pressure 99 %): p50 -38.9 %, p95 -86 %, cloud-1 0.878 modelled against 0.275, machinery
6.6 s (relays 4.95), `machinery_share=0.054 machinery_share_of_run=0.094`.

Where the time goes, and why the figures differ (issue 17, item 3):

- The host, first of all. The model gives each node a CPU of its own; on emu the QEMU
  gateways, Mosquitto, the JVM, the relays and (here) other people's containers share 2 cores.
  At a CPU pressure of 86-99 % every hop waits for a CPU: the emulation's median grows with the
  load (quickstart: 43 ms at load 8, 106 ms at 12, 1.1 s at 35, where messages were still
  queued at the end of the drain, hence the throughput error), and its tail is the testbed's.
  The floor is not: emu's fastest message (spark 15.5, links 56.1, the quickstart 27.8;
  23.9 at load 8) sits at or below the calibrated model's (16.6, 57.4, 28.6 ms; at load 35
  even the quickstart's fastest took 36.9), so the path's fixed costs are modelled; what is
  missing is queueing for a shared CPU, which a model of separate machines should not have.
- Loss between containers (links, 1 % between gateways and broker). The relay carries MQTT
  over TCP and turns a lost packet into a 200 ms retransmission stall with head-of-line
  blocking (emu.links.relay): nothing is lost, and about a tenth of a gateway's messages wait
  behind each stall, which is emu's p95 of 287-439 ms. The model now does the same on every
  link between TCP endpoints (every link but a device's radio; sim.network, sim.stations): a
  message any of whose ceil(size/MSS) segments is lost lands one minimum RTO (200 ms, emulated)
  late and its connection's later messages wait behind it; nothing is dropped, and the
  manifest's `retransmissions` counts them per link direction (about 1 % of the messages on
  `links`). Before, it dropped them at QoS 0: lost 175 on the model against emu's 63, which
  are the device radio's 0.5 %; now both lose only the radio's, from different random streams.
- The link relay: one asyncio loop times every relayed chunk; epoll's millisecond rounding is
  the calibration's 0.7 ms per leg (`links.hop_overhead`), and on this host its timers fired up
  to 14-99 ms late (`relay_lag`), 10 ms or more late for up to 38 % of a run.
- Spark: the JVM plans and schedules every micro-batch (cloud-1's CPU: 8-48 % on emu against
  1.4 % and 0 % modelled when the model charged STATS its `cost` per message only). The
  calibration now measures the job's fixed CPU per batch (`foglab calibrate`'s Spark step: its
  profile's `spark` section; DEFAULT_SPARK, 1.7 s a batch, for a profile without one) and the
  model charges it once per trigger interval that had input, on the node's CPU, a batch that
  outlasts its interval delaying the next (sim.costs). The batch does not hold the messages'
  cores: on emu a message is recorded where it reaches the query, before the JVM's batch, so
  it closes the CPU gap and leaves the latency as it was.
- The driver's cost and a node's CPU: the calibration charges the agent's whole CPU per reading
  (2.15 ms, at 50 readings/s and QoS 0) before the message leaves. A calibrated node's `cpu`
  is now a share of the CPU limit the emulation gives its container, as emu.host.metrics measures
  it (a gateway's container has min(4, host cores) = 2 cores where its agent queues on one
  model core), so the two columns are the same unit: the links configuration's 0.13 against
  emu's 0.064 was the same 0.13 cores. What remains is the rate and QoS: the spark
  configuration's gateway (20 readings/s at QoS 1) spends 8.6 % of a core against the model's
  4.3 %, the agent's fixed loop cost and QoS 1's acknowledgements being charged per reading
  at the calibrated rate and QoS only.
- Python's GIL in the agent: the drivers, paho's network thread and the operators share one
  interpreter, so a message ready while another thread runs waits up to the switch interval
  (5 ms): part of emu's spread below p95 that a FIFO CPU does not have.
- Not a cause: Nagle's delay. Mosquitto runs with `set_tcp_nodelay true` and the agent's
  clients set TCP_NODELAY (emu.agent.mqtt.no_delay); a 40 ms delayed-ACK stall would show as a
  40 ms step in the CDFs, which they do not have.
- Per hop: these three configurations give every message the same path length, so compare's
  per-path-length rows do not split them; the split above is from the floors, the fidelity
  columns and the CPU rows.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.hostcpu import HostCpu, idle_rates, lines  # noqa: E402
from experiments import compare as comparing  # noqa: E402
from experiments.loader import load  # noqa: E402
from experiments.runner import run_experiment  # noqa: E402
from topologies.terminal import stop_on_signals  # noqa: E402

# name: (experiment, overrides); the duration and drain are added per run.
CONFIGS = {
    "quickstart": ("quickstart", []),
    "spark": ("migrate-spark", ["scenario.migrations=[]",
                               "workload.streams.0.rate=5/s"]),
    "links": ("quickstart", ["topology.links.1.latency=50ms", "topology.links.1.bandwidth=10Mbit",
                             "topology.links.1.loss=1%", "pipeline.1.engine=python",
                             "pipeline.1.task=passthrough"]),
}
# The runs of one configuration: label -> (backend, calibration).
MODELS = {"sim": "reference", "sim-uncalibrated": None}


def overrides(config: str, duration: float, drain: float, extra: list[str] = ()) -> list[str]:
    return [*CONFIGS[config][1], *extra, f"run.duration={duration:g}s", f"run.drain={drain:g}s",
            "run.repetitions=1"]


def run(config: str, label: str, backend: str, calibration: str | None, out: Path,
        sets: list[str]) -> comparing.RunData:
    """One run of `config` (a name in CONFIGS, or an experiment's path or catalog name) on
    `backend` into out/label; its folder as compare reads it."""
    sets = [*sets, f"run.backend={backend}"] + ([f"run.calibration={calibration}"]
                                                 if calibration else [])
    source = CONFIGS[config][0] if config in CONFIGS else config
    (outcome,) = run_experiment(load(source, sets, []), out / label)
    if outcome.error:
        raise RuntimeError(f"{config}: the {label} run failed: {outcome.error} "
                           f"(folder {outcome.folder})")
    return comparing.read_run(outcome.folder)


def compared(config: str, out: Path, duration: float, drain: float, emu: bool = True,
             extra: list[str] = ()):
    """The configuration's runs (the models', and the emulation's if `emu`) and their
    comparison against emu (without it, against the calibrated model)."""
    sets = overrides(config, duration, drain, list(extra))
    runs = {label: run(config, label, "sim", calibration, out, sets)
            for label, calibration in MODELS.items()}
    if emu:
        runs["emu"] = run(config, "emu", "emu", None, out, sets)
    return runs, comparing.compare(runs, config, reference="emu" if emu else "sim")


def idle(config: str, out: Path, duration: float, hook: HostCpu,
         extra: list[str] = ()) -> dict[str, float] | None:
    """Each container's CPU per second with every driver at rate 0 (the agents' idle loops,
    Spark's and Mosquitto's idle cost): an emulated run of `duration` s; None if it failed."""
    sets = overrides(config, duration, 1.0, ["workload.streams.0.rate=0/s", *extra])
    before = len(hook.facts)
    try:
        run_experiment(load(CONFIGS[config][0], [*sets, "run.backend=emu"], []), out / "idle")
    except Exception as failure:  # noqa: BLE001 - the breakdown goes on without the split
        print(f"config={config} idle_failed={str(failure).splitlines()[0]!r}")
    return idle_rates(hook.facts[-1]) if len(hook.facts) > before else None


def error(comparison, key: str, label: str) -> str:
    found = comparison.figure(key).errors.get(label)
    return "nan" if found is None else f"{found:+.3f}"


def fastest_ms(run: comparing.RunData) -> float:
    latency = comparing._delivered(run.messages)["latency"]
    return float(latency.min() * 1000) if len(latency) else float("nan")


def dilation(value: str) -> str:
    """`--dilation` as run.dilation takes it: a number K >= 1, `auto` or `real-speed`."""
    if value in ("auto", "real-speed"):
        return value
    try:
        k = float(value)
    except ValueError:
        k = 0.0
    if k < 1:
        raise argparse.ArgumentTypeError(
            f"--dilation {value!r}: a number K >= 1, 'auto' or 'real-speed'")
    return f"{k:g}"


def chosen_k(run: comparing.RunData) -> float:
    """The K the emulated run ran at (its manifest's facts; 1 for a run without one)."""
    return float(json.loads((run.folder / "manifest.json").read_text())
                 .get("facts", {}).get("dilation", 1.0))


def report(config: str, runs: dict, comparison) -> dict[str, tuple[float | None, float | None]]:
    """Print a configuration's lines; its (p50, p95) errors per model."""
    fidelity = comparison.fidelity or {}
    pressure = (fidelity.get("host_pressure") or {}).get("mean")
    lag = (fidelity.get("relay_lag_s") or {}).get("max")
    print(f"config={config} emu_host_pressure={'nan' if pressure is None else f'{pressure:.2f}'} "
          f"saturated={fidelity.get('saturated_share', 0.0):.2f} "
          f"relay_lag_ms={'nan' if lag is None else f'{lag * 1000:.1f}'} "
          f"emu_p50_ms={comparison.figure('latency_p50').values['emu'] * 1000:.1f} "
          f"emu_p95_ms={comparison.figure('latency_p95').values['emu'] * 1000:.1f} "
          f"emu_min_ms={fastest_ms(runs['emu']):.1f} K={chosen_k(runs['emu']):g}")
    worst = {}
    for label in MODELS:
        p50 = comparison.figure("latency_p50")
        worst[label] = (p50.errors.get(label),
                        comparison.figure("latency_p95").errors.get(label))
        print(f"config={config} model={label} "
              f"p50_rel_err={error(comparison, 'latency_p50', label)} "
              f"p95_rel_err={error(comparison, 'latency_p95', label)} "
              f"throughput_rel_err={error(comparison, 'throughput', label)} "
              f"lost_sim={comparison.figure('lost').values[label]} "
              f"lost_emu={comparison.figure('lost').values['emu']} "
              f"p50_ms={p50.values[label] * 1000:.1f} "
              f"p95_ms={comparison.figure('latency_p95').values[label] * 1000:.1f} "
              f"min_ms={fastest_ms(runs[label]):.1f}")
    for figure in comparison.figures:
        if figure.key.startswith("cpu:") and not figure.key.startswith("cpu:sensor"):
            cells = " ".join(f"{label}={(figure.values.get(label) or 0.0):.3f}"
                             for label in comparison.backends)
            print(f"config={config} {figure.key} {cells}")
    for line in comparing.explanations(comparison):
        print(f"# {config}: {line}")
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of traffic")
    parser.add_argument("--drain", type=float, default=5.0, help="seconds of drain")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--keep", type=Path, help="keep the runs in this folder")
    parser.add_argument("--dilation", type=dilation, default="1",
                        help="every run's run.dilation: K, auto or real-speed (default 1)")
    parser.add_argument("--idle", type=float, default=30.0,
                        help="seconds of an idle run per configuration (drivers at rate 0) to "
                             "split the agents' idle loops out of the CPU breakdown; 0: none")
    args = parser.parse_args()
    chosen = [c.strip() for c in args.configs.split(",")]
    unknown = [c for c in chosen if c not in CONFIGS]
    if unknown:
        parser.error(f"--configs: unknown configuration {unknown[0]!r}; known: "
                     f"{', '.join(CONFIGS)}")
    if args.duration <= 0 or args.drain < 0:
        parser.error(f"--duration must be > 0 and --drain >= 0, got {args.duration:g} and "
                     f"{args.drain:g}")
    if why := comparing.emu_unavailable():
        print(f"sim_vs_emu: cannot run the emulation: {why}", file=sys.stderr)
        return 1
    out = args.keep or Path(tempfile.mkdtemp(prefix="foglab-sim-vs-emu-"))
    worst: dict[str, list[tuple[float, float]]] = {label: [] for label in MODELS}
    dilated = [f"run.dilation={args.dilation}"]
    print(f"dilation={args.dilation}")
    try:
        # A SIGTERM interrupts as a Ctrl-C does: the run under way removes its containers.
        with stop_on_signals(), HostCpu().watching() as hook:
            for config in chosen:
                try:
                    runs, comparison = compared(config, out / config, args.duration,
                                                args.drain, extra=dilated)
                    fact = hook.facts[-1] if hook.facts else None
                except RuntimeError as failure:  # a run that failed: said, the others go on
                    print(f"config={config} failed={str(failure).splitlines()[0]!r}")
                    continue
                except comparing.BrokenRun as broken:  # degraded, interrupted: no figures
                    print(f"config={config} refused={str(broken).splitlines()[0]!r}")
                    continue
                for label, errors in report(config, runs, comparison).items():
                    worst[label].append(tuple(abs(e) if e is not None else math.nan
                                              for e in errors))
                if fact is not None:
                    rates = (idle(config, out / config, args.idle, hook, dilated)
                             if args.idle else None)
                    for line in lines(f"config={config}", fact, rates):
                        print(line)
    finally:
        if args.keep is None:
            shutil.rmtree(out, ignore_errors=True)
    def largest(label: str, which: int) -> float:
        return max((errors[which] for errors in worst[label]), default=math.nan)

    print(f"worst_uncalibrated={largest('sim-uncalibrated', 0):.3f}")
    print(f"worst={largest('sim', 0):.3f}")
    print(f"worst_p95={largest('sim', 1):.3f}")
    if args.dilation == "real-speed":  # the real profiles, uncalibrated, against the emulation
        print(f"worst_real_speed={largest('sim-uncalibrated', 0):.3f}")
        print(f"worst_real_speed_p95={largest('sim-uncalibrated', 1):.3f}")
    return 0 if len(worst["sim"]) == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
