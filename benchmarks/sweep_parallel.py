"""Parallel sweeps: 8 sim points (quickstart over 8 rates) run serially and with `-j 2` in the
same process, one after the other, into temporary folders.

After a short warm-up run (imports, caches), `--rounds` rounds of both, the order alternating;
prints the fastest serial_s and parallel_s and their ratio (issue 43's target: at most 0.6 on
2 cores), the host's cpus and its load average before and after (other work on the host is in
the figure: compare a ratio with the load it was measured at), key=value; progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from rich.console import Console
from rich.progress import Progress

from experiments.loader import load
from experiments.runner import Reporter, run_experiment

RATES = "[1/s, 2/s, 3/s, 4/s, 5/s, 6/s, 7/s, 8/s]"


class Bar(Reporter):
    """Runs done, on stderr."""

    def __init__(self, progress: Progress, name: str):
        self.bars, self.name, self.task = progress, name, None

    def start(self, total_runs: int, total_seconds: float = 0.0) -> None:
        self.task = self.bars.add_task(self.name, total=total_runs)

    def run_finished(self, label, folder, summary, error) -> None:
        self.bars.advance(self.task)


def timed(experiment, jobs: int, progress: Progress) -> float:
    with tempfile.TemporaryDirectory(prefix="foglab-sweep-") as out:
        start = time.perf_counter()
        outcomes = run_experiment(experiment, out, Bar(progress, f"-j {jobs}"), jobs=jobs)
        elapsed = time.perf_counter() - start
    failed = [o.error for o in outcomes if o.error]
    if failed:
        raise SystemExit(f"a run failed: {failed[0]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="60s", help="each point's run.duration")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of serial then parallel, alternating which goes first")
    args = parser.parse_args()
    experiment = load("quickstart", [f"run.duration={args.duration}", "plots=[]"],
                      [f"workload.streams.0.rate={RATES}"])
    load_before = os.getloadavg()
    warm = load("quickstart", ["run.duration=5s", "plots=[]"])
    with Progress(console=Console(file=sys.stderr), transient=True) as progress:
        timed(warm, 1, progress)  # the first run's imports and caches, in neither figure
        times: dict[int, list[float]] = {1: [], args.jobs: []}
        for round_ in range(args.rounds):  # ABBA: neither goes first every time
            for jobs in ((1, args.jobs) if round_ % 2 == 0 else (args.jobs, 1)):
                times[jobs].append(timed(experiment, jobs, progress))
    serial, parallel = min(times[1]), min(times[args.jobs])
    load_after = os.getloadavg()
    print(f"points={len(experiment.points)} duration={args.duration} jobs={args.jobs}")
    print(f"serial_s={serial:.2f} parallel_s={parallel:.2f}")
    print(f"cpus={os.cpu_count()} load_before={load_before[0]:.2f} "
          f"load_after={load_after[0]:.2f}")
    print(f"ratio={parallel / serial:.3f}")


if __name__ == "__main__":
    main()
