"""The nemesis: the emulation's promise-bearing scenarios under seeded random fault schedules.

    python benchmarks/nemesis.py [--schedules 50] [--seed 1] [--scenario NAME]
                                 [--duration S] [--out DIR]
    python benchmarks/nemesis.py --replay SEED [--scenario NAME] [--duration S]

Schedule i has seed S + i (`--seed` S, 1 by default): its scenario (experiments.nemesis.
scenarios: broker_restart, recovery, replication, pause_drain, pause_transfer, parallel,
rollback, broker_join; or only `--scenario`'s) and 1-3 faults of that scenario's envelope,
all drawn from random.Random(seed) (experiments.nemesis.schedule). Each runs on emu with
the nemesis's host-level actions beside it (experiments.nemesis.run), and its history is
checked against the scenario's promise (experiments.nemesis.checker). `--replay SEED` runs
that one schedule again and prints it first.

Writes `nemesis.parquet` to `--out` (default: a temporary folder, kept, its path printed):
a row per schedule with seed, scenario, schedule (JSON), verdict, lost, duplicated,
reordered, detail, the host's 1-minute load average at its start and end, and seconds.
Each schedule's run folder and kept records stay under `--out/<seed>/`. Prints key=value
lines at the end: schedules=, ok=, violated=, lost=, duplicated=, reordered=,
seconds_per_schedule=, loadavg= (start and end of the whole), and a `replay:` line per
violation. Exits 1 if any schedule violated its promise, 2 on a bad option, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.nemesis.scenarios import MAX_DURATION_S, SCENARIOS  # noqa: E402
from experiments.nemesis.schedule import Schedule  # noqa: E402

COLUMNS = ("seed", "scenario", "schedule", "verdict", "lost", "duplicated", "reordered",
           "detail", "load_start", "load_end", "seconds")


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load_1m={one:.2f} load_5m={five:.2f} load_15m={fifteen:.2f} cpus={os.cpu_count()}"


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", default="50", help="how many schedules (default 50)")
    parser.add_argument("--seed", default="1", help="the first schedule's seed (default 1)")
    parser.add_argument("--replay", default=None, help="run this seed's schedule again")
    parser.add_argument("--scenario", default=None,
                        help=f"only this scenario ({', '.join(SCENARIOS)})")
    parser.add_argument("--duration", default=None,
                        help=f"emulated seconds per run (at most {MAX_DURATION_S:g})")
    parser.add_argument("--out", default=None, help="where nemesis.parquet and the runs go")
    args = parser.parse_args(argv)

    def integer(name: str, text: str, least: int) -> int:
        try:
            value = int(text)
        except ValueError:
            parser.error(f"--{name} {text!r}: not a whole number")
        if value < least or value >= 2**63:
            parser.error(f"--{name} {value}: must be at least {least} (and under 2**63)")
        return value

    args.schedules = integer("schedules", args.schedules, 1)
    args.seed = integer("seed", args.seed, 0)
    if args.replay is not None:
        args.replay = integer("replay", args.replay, 0)
    if args.scenario is not None and args.scenario not in SCENARIOS:
        parser.error(f"--scenario {args.scenario!r}: not a scenario; scenarios: "
                     f"{', '.join(SCENARIOS)}")
    if args.duration is not None:
        try:
            args.duration = float(args.duration.removesuffix("s"))
        except ValueError:
            parser.error(f"--duration {args.duration!r}: not a number of seconds")
        lows = [s.min_duration for name, s in SCENARIOS.items()
                if args.scenario in (None, name)]
        if not max(lows) <= args.duration <= MAX_DURATION_S:
            parser.error(f"--duration {args.duration:g}: must be {max(lows):g} to "
                         f"{MAX_DURATION_S:g} s (the scenarios' least duration to the "
                         "nemesis's most)")
    if args.out is not None:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            parser.error(f"--out {args.out}: exists and is not a folder")
    return args


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    seeds = ([args.replay] if args.replay is not None
             else [args.seed + i for i in range(args.schedules)])
    schedules = [Schedule.of_seed(seed, args.scenario, args.duration) for seed in seeds]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="foglab-nemesis-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"phase=start {_load()} out={out}", flush=True)
    if args.replay is not None:
        print(f"replay: {schedules[0].describe()}")
        print(f"schedule={schedules[0].to_json()}", flush=True)
    rows: list[dict] = []
    started = time.monotonic()
    load_start = os.getloadavg()[0]
    try:
        _run_all(schedules, out, rows)
    except KeyboardInterrupt:
        print("nemesis=interrupted", flush=True)
        _write(rows, out)
        return 130
    _write(rows, out)
    violated = [r for r in rows if r["verdict"] != "ok"]
    seconds = time.monotonic() - started
    print(f"schedules={len(rows)}")
    print(f"ok={len(rows) - len(violated)}")
    print(f"violated={len(violated)}")
    for key in ("lost", "duplicated", "reordered"):
        print(f"{key}={sum(r[key] for r in rows)}")
    print(f"seconds_per_schedule={seconds / max(len(rows), 1):.1f}")
    print(f"loadavg={load_start:.2f},{os.getloadavg()[0]:.2f} cpus={os.cpu_count()}")
    print(f"phase=end {_load()} elapsed_s={seconds:.1f}")
    print(f"table={out / 'nemesis.parquet'}")
    for row in violated:
        print(f"violation: seed={row['seed']} scenario={row['scenario']} {row['detail']}")
        print(f"replay: python benchmarks/nemesis.py --replay {row['seed']}"
              + (f" --scenario {args.scenario}" if args.scenario else "")
              + (f" --duration {args.duration:g}" if args.duration else ""))
    return 1 if violated else 0


def _run_all(schedules: list[Schedule], out: Path, rows: list[dict]) -> None:
    import docker
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from experiments.nemesis.run import run_schedule

    client = docker.from_env()
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  console=Console(stderr=True)) as bar:
        task = bar.add_task("nemesis", total=len(schedules))
        for schedule in schedules:
            bar.update(task, description=f"seed {schedule.seed} {schedule.scenario}")
            result = run_schedule(schedule, out / str(schedule.seed), client)
            verdict = result.verdict
            rows.append({
                "seed": schedule.seed, "scenario": schedule.scenario,
                "schedule": schedule.to_json(), "verdict": verdict.word,
                "lost": verdict.lost, "duplicated": verdict.duplicated,
                "reordered": verdict.reordered, "detail": verdict.detail,
                "load_start": round(result.load_start, 2),
                "load_end": round(result.load_end, 2), "seconds": round(result.seconds, 1)})
            bar.console.print(
                f"seed={schedule.seed} scenario={schedule.scenario} verdict={verdict.word} "
                f"lost={verdict.lost} duplicated={verdict.duplicated} "
                f"reordered={verdict.reordered} seconds={result.seconds:.0f} "
                f"load={result.load_start:.2f}->{result.load_end:.2f} "
                f"faults={json.dumps([f.describe() for f in schedule.faults])}"
                + (f" detail={verdict.detail}" if verdict.detail else ""))
            bar.advance(task)


def _write(rows: list[dict], out: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame.to_parquet(out / "nemesis.parquet", index=False)


if __name__ == "__main__":
    sys.exit(main())
