"""Slowdown guard: the model's benchmarks, short, on this tree against a base revision.

Runs short versions of benchmarks/sim_mobility.py (mobility), sim_throughput.py
(throughput), sim_scale.py (scale), energy.py (energy) and `post`, what surrounds the model
in `foglab run` (experiments.runner on sim_mobility's experiment: the manifest, checking the
tables, the summary and writing the run's files, timed apart from the model), on this tree
(the working tree, or --this REV) and on --base REV, which is checked out with `git worktree
add --detach` into a temporary folder, removed at exit (an error, Ctrl-C and SIGTERM too).
Each benchmark of each tree runs from that tree (its own script, its own packages first on
PYTHONPATH, the tree as the working directory) in a fresh process, in alternation: this,
base, this, base, one pair a round. A tree without a benchmark's script skips it, so does a
base whose run fails (or both trees' runs); a run that fails on this tree only fails the
guard.

A run's figure is the CPU seconds of its process (user and system, from
getrusage(RUSAGE_CHILDREN) around it; wall time moves with the host's other load); for
`post`, its CPU seconds less the model's (measured in the process, at the runner's stages),
and for throughput the SimPy baseline that sim_throughput.py measures around the model is
left out (the same code in both trees). The counts each benchmark prints (messages,
migrations, rows...) should be equal on both sides: when they differ the guard says so (the
two trees then compute different things, and their times compare less well) but does not
fail for it.

Prints key=value lines: the host's load and CPU count at the start and end; per benchmark
`ratio=` the median over its rounds of this / base, `ratios=` each round's, `spread=`
(largest less smallest, over the median), the medians of both sides' figures,
`counts_equal=` and `verdict=`: `ok`, `slower` (ratio over 1.10), `warn` (over 1.10 with
fewer than three rounds, or with a budget under 120 s and rounds that disagree: one at or
under 1.10), `skipped` (and why); sim_scale's own table-building time (`scale.tables`) and
the runner's stages after the model (`post.tables`, `post.summary`) as figures of their
own, reported, not decided on (nor compared under 0.2 s); and last `guard=` ok, warn or
fail. Exits 1 on fail: a benchmark slower, or failing on this tree.

`--budget SECONDS` (wall, everything included) sets the benchmarks' size (under 120 s:
short; from 120: medium; from 400: long) and which run: in order of importance (mobility,
throughput, scale, post, energy), a benchmark is added when three rounds of it still fit,
on the times measured so far (before the first run, on estimates scaled by the host's load);
then as many rounds as fit, up to nine. Progress goes to stderr.

    python benchmarks/guard.py --base HEAD --budget 45
    python benchmarks/guard.py --this 012a947 --base 012a947^ --budget 45
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

THRESHOLD = 1.10  # this / base above it: slower
SHORT_BUDGET = 120.0  # seconds: under it, rounds that disagree warn instead of failing
MIN_ROUNDS = 3
MAX_ROUNDS = 9
EXTRA_FLOOR = 0.2  # seconds: a figure reported beside a benchmark's, compared from this size
REPO = Path(__file__).resolve().parents[1]

# -- the pure parts (tests/foundation/test_guard.py) ------------------------------------------

_PAIR = re.compile(r"(?<![\w.=])([A-Za-z_][\w.]*)=([^\s,()]+)")


def parse_values(text: str) -> dict[str, str]:
    """The `key=value` pairs a benchmark printed (a later one wins); other text is ignored."""
    return {key: value for key, value in _PAIR.findall(text)}


def number(value: str | None) -> float | None:
    """A printed value as a number (`12.5`, `3`, `+0.2`), else None."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def ratios(this: list[float], base: list[float]) -> list[float]:
    """Each round's this / base (rounds where either is missing or base is 0 left out)."""
    return [a / b for a, b in zip(this, base, strict=True)
            if a is not None and b is not None and b > 0]


@dataclass
class Verdict:
    ratio: float | None  # the median of the rounds' ratios
    ratios: list[float]
    spread: float | None  # (largest - smallest) / median
    verdict: str  # ok, slower, warn, skipped


def decide(round_ratios: list[float], short_budget: bool, threshold: float = THRESHOLD,
           min_rounds: int = MIN_ROUNDS) -> Verdict:
    """The median ratio and what it means: over `threshold` is slower, unless the rounds
    disagree (some at or under the threshold) with a short budget, or there are fewer than
    `min_rounds`: then a warning."""
    if not round_ratios:
        return Verdict(None, [], None, "skipped")
    median = statistics.median(round_ratios)
    spread = (max(round_ratios) - min(round_ratios)) / median if median > 0 else None
    if median <= threshold:
        verdict = "ok"
    elif len(round_ratios) < min_rounds or (short_budget and min(round_ratios) <= threshold):
        verdict = "warn"  # too few rounds to tell, or rounds that disagree
    else:
        verdict = "slower"
    return Verdict(median, list(round_ratios), spread, verdict)


def differing_counts(this: dict[str, str], base: dict[str, str],
                     keys: tuple[str, ...]) -> dict[str, tuple[str | None, str | None]]:
    """The counts two runs printed differently (a count printed by one side only too)."""
    return {key: (this.get(key), base.get(key)) for key in keys
            if (key in this or key in base) and this.get(key) != base.get(key)}


def overall(verdicts: list[str], this_failed: bool) -> tuple[str, int]:
    """The guard's word and exit status from the benchmarks' verdicts."""
    if this_failed or "slower" in verdicts:
        return "fail", 1
    if "warn" in verdicts:
        return "warn", 0
    return "ok", 0


# -- the benchmarks ------------------------------------------------------------------------------

# Runs a tree's benchmark script as `python script.py args` would, in the tree's packages;
# `throughput`: without the SimPy Store loop it measures before and after the model.
SCRIPT_CHILD = r"""
import importlib.util, os, sys
kind, script, *args = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
spec = importlib.util.spec_from_file_location("guarded_benchmark", script)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
sys.argv = [script, *args]
if kind == "throughput":
    module.baseline = lambda: (1.0, 1.0)
module.main()
"""

# What surrounds the model in `foglab run`: the tree's runner on sim_mobility's experiment;
# post_cpu_s is its CPU seconds less the model's (the manifest's facts before, checking the
# tables, the summary and writing the files after; the runner tells each stage as it begins).
POST_CHILD = r"""
import importlib.util, os, sys, tempfile, time
script, users, duration = sys.argv[1:]
spec = importlib.util.spec_from_file_location("guarded_benchmark", script)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
from experiments.loader import parse_text
from experiments.runner import Reporter, run_experiment

experiment = parse_text(module.EXPERIMENT.format(duration=duration, threshold="25ms"),
                        overrides=[f"topology.nodes.0.replicas={users}"])
marks = []

class Marks(Reporter):
    def run_started(self, label, folder, duration):
        marks.append(time.process_time())
    def stage(self, text):
        marks.append(time.process_time())

with tempfile.TemporaryDirectory(prefix="foglab-guard-") as out:
    start = time.process_time()
    (outcome,) = run_experiment(experiment, out, Marks())
    end = time.process_time()
if outcome.error:
    raise SystemExit(outcome.error)
summary = outcome.summary
model, tables, after = marks[1] - marks[0], marks[2] - marks[1], end - marks[2]
print(f"emitted={summary.get('emitted')} delivered={summary.get('delivered')} "
      f"lost={summary.get('lost')} migrations={len(summary.get('migrations') or [])}")
print(f"model_cpu_s={model:.3f} before_cpu_s={marks[0] - start:.3f} tables_cpu_s={tables:.3f} "
      f"summary_cpu_s={after:.3f}")
print(f"post_cpu_s={end - start - model:.3f}")
"""


@dataclass(frozen=True)
class Bench:
    name: str
    script: str  # in the tree
    kind: str  # script, throughput or post (which child program runs it)
    args: tuple[str, ...]
    cost: float  # estimated CPU seconds of one run on the development host (2 cores)
    counts: tuple[str, ...]
    figure: str | None = None  # the key of the figure decided on (None: the process's CPU)
    extra: tuple[tuple[str, str], ...] = ()  # (name, key): figures reported beside it

    def command(self, tree: Path) -> list[str]:
        script = str(tree / self.script)
        if self.kind == "post":
            return [sys.executable, "-c", POST_CHILD, script, *self.args]
        return [sys.executable, "-c", SCRIPT_CHILD, self.kind, script, *self.args]


MOBILITY = ("messages", "handovers", "migrations")


def benchmarks(size: str) -> list[Bench]:
    """The benchmarks at a size (short, medium, long), most important first. Costs measured
    on the development host (2 shared cores, both trees alike), interpreter start included."""
    users, minutes, cost = {"short": (2000, "2m", 2.6), "medium": (4000, "3m", 8.0),
                            "long": (10_000, "3m", 14.0)}[size]
    mobility = Bench("mobility", "benchmarks/sim_mobility.py", "script",
                     ("--users", str(users), "--duration", minutes), cost, MOBILITY)
    span, cost = {"short": ("30s", 1.2), "medium": ("2m", 2.6), "long": ("10m", 9.0)}[size]
    throughput = Bench("throughput", "benchmarks/sim_throughput.py", "throughput",
                       ("--duration", span), cost, ("emitted", "delivered", "min_hops"))
    devices, seconds, cost = {"short": (10_000, 3, 1.4), "medium": (30_000, 5, 4.5),
                              "long": (100_000, 5, 13.0)}[size]
    scale = Bench("scale", "benchmarks/sim_scale.py", "script",
                  ("--devices", str(devices), "--duration", str(seconds)), cost,
                  ("emitted", "rows"), extra=(("tables", "tables_s"),))
    users, minutes, cost = {"short": (4000, "1m", 3.0), "medium": (4000, "3m", 8.0),
                            "long": (10_000, "3m", 16.0)}[size]
    post = Bench("post", "benchmarks/sim_mobility.py", "post", (str(users), minutes), cost,
                 ("emitted", "delivered", "lost", "migrations"), figure="post_cpu_s",
                 extra=(("tables", "tables_cpu_s"), ("summary", "summary_cpu_s")))
    span, cost = {"short": ("20s", 1.6), "medium": ("1m", 3.2), "long": ("3m", 8.0)}[size]
    energy = Bench("energy", "benchmarks/energy.py", "script",
                   ("--duration", span, "--rounds", "1"), cost,
                   ("off_delivered", "on_delivered", "batteries_delivered"))
    return [mobility, throughput, scale, post, energy]


def size_for(budget: float) -> str:
    return "long" if budget >= 400 else "medium" if budget >= SHORT_BUDGET else "short"


def fits(left: float, walls: list[float], cost: float, slow: float,
         min_rounds: int = MIN_ROUNDS) -> bool:
    """Whether one more benchmark (`cost` CPU seconds a run, times `slow`, the measured wall
    over estimated cost so far) fits `min_rounds` pairs in `left` seconds, beside the
    benchmarks already in (their measured wall seconds a pair, `walls`; one round of each
    done)."""
    need = (min_rounds - 1) * sum(walls) + min_rounds * 2 * cost * slow
    return need <= left


# -- running -------------------------------------------------------------------------------------


@dataclass
class Side:
    figures: list[float | None] = field(default_factory=list)
    values: list[dict[str, str]] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)


@dataclass
class Result:
    bench: Bench
    this: Side = field(default_factory=Side)
    base: Side = field(default_factory=Side)
    skipped: str | None = None  # why it did not run
    error: str | None = None  # this tree's run failed
    differing: dict = field(default_factory=dict)

    def wall(self) -> float | None:
        walls = self.this.walls + self.base.walls
        return statistics.mean(walls) if walls else None


class Trees:
    """Trees checked out for the run, removed at exit, on an error or a signal too."""

    def __init__(self):
        self.made: list[Path] = []
        atexit.register(self.remove)

    def checkout(self, rev: str) -> Path:
        sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}").strip()
        folder = Path(tempfile.mkdtemp(prefix="foglab-guard-"))
        folder.rmdir()
        self.made.append(folder)
        _git("worktree", "add", "--detach", "--quiet", str(folder), sha)
        return folder

    def remove(self) -> None:
        while self.made:
            folder = self.made.pop()
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(folder)], capture_output=True, check=False)
            shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], capture_output=True,
                       check=False)


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _stop(signum, _frame) -> None:
    raise SystemExit(128 + signum)  # the finally blocks remove the trees


def run_once(bench: Bench, tree: Path, timeout: float) -> tuple[float, float, dict, str | None]:
    """One run in a fresh process from `tree`: its CPU and wall seconds, printed values, and
    an error (None when it ran)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run(bench.command(tree), cwd=tree, env=env, capture_output=True,
                              text=True, timeout=max(timeout, 1.0))
        error = None
    except subprocess.TimeoutExpired:  # killed and waited for: its CPU is counted
        done, error = None, f"timed out after {max(timeout, 1.0):.0f} s"
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done is not None and done.returncode:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        error = f"exit {done.returncode}: {tail}"
    return cpu, wall, parse_values(done.stdout) if done is not None else {}, error


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load_1m={one:.2f} load_5m={five:.2f} load_15m={fifteen:.2f} cpus={os.cpu_count()}"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "nan" if value is None else f"{value:.{digits}f}"


def report(result: Result, short_budget: bool) -> str:
    """Print a benchmark's lines; its verdict."""
    bench = result.bench
    if result.skipped:
        print(f"bench={bench.name} verdict=skipped why={result.skipped}")
        return "skipped"
    if result.error:
        print(f"bench={bench.name} verdict=error error={result.error!r}")
        return "error"
    verdict = decide(ratios(result.this.figures, result.base.figures), short_budget)
    this = [f for f in result.this.figures if f is not None]
    base = [f for f in result.base.figures if f is not None]
    print(f"bench={bench.name} rounds={len(verdict.ratios)} ratio={_fmt(verdict.ratio)} "
          f"ratios={','.join(f'{r:.3f}' for r in verdict.ratios) or 'none'} "
          f"spread={_fmt(verdict.spread, 2)} figure={bench.figure or 'cpu_s'} "
          f"this={_fmt(statistics.median(this) if this else None, 2)} "
          f"base={_fmt(statistics.median(base) if base else None, 2)} "
          f"args={','.join(bench.args)} counts_equal={0 if result.differing else 1} "
          f"verdict={verdict.verdict}")
    if result.differing:
        shown = " ".join(f"{key}={a}/{b}" for key, (a, b) in result.differing.items())
        print(f"bench={bench.name} counts_differ this/base: {shown}")
    for name, key in bench.extra:
        this_ = [number(v.get(key)) for v in result.this.values]
        base_ = [number(v.get(key)) for v in result.base.values]
        pairs = ratios(this_, base_)
        known = [b for b in base_ if b is not None]
        if not pairs:
            continue
        if statistics.median(known) < EXTRA_FLOOR:
            print(f"bench={bench.name}.{name} figure={key} base={statistics.median(known):g} "
                  f"(under {EXTRA_FLOOR} s at this size: not compared)")
            continue
        print(f"bench={bench.name}.{name} figure={key} rounds={len(pairs)} "
              f"ratio={statistics.median(pairs):.3f} "
              f"ratios={','.join(f'{r:.3f}' for r in pairs)} (reported, not decided on)")
    return verdict.verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--this", default=None,
                        help="a revision to measure instead of the working tree")
    parser.add_argument("--budget", type=float, default=45.0,
                        help="wall seconds for the whole comparison (default 45)")
    parser.add_argument("--only", default=None,
                        help="comma-separated benchmarks (mobility,throughput,scale,post,energy)")
    parser.add_argument("--size", choices=("short", "medium", "long"), default=None,
                        help="the benchmarks' size (default: from the budget)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    deadline = started + args.budget
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
    print(f"phase=start {_load()}", flush=True)
    trees = Trees()
    try:
        return _compare(args, trees, started, deadline)
    except KeyboardInterrupt:
        print("guard=interrupted", flush=True)
        return 130
    finally:
        trees.remove()
        print(f"phase=end {_load()} elapsed_s={time.perf_counter() - started:.1f}", flush=True)


def _compare(args, trees: Trees, started: float, deadline: float) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    this_tree = trees.checkout(args.this) if args.this else REPO
    base_tree = trees.checkout(args.base)
    size = args.size or size_for(args.budget)
    chosen = benchmarks(size)
    if args.only:
        chosen = [b for b in chosen if b.name in args.only.split(",")]
    results = {b.name: Result(b) for b in chosen}
    for result in results.values():
        for label, tree in (("this", this_tree), ("base", base_tree)):
            if not (tree / result.bench.script).exists():
                result.skipped = f"no {result.bench.script} in {label}"
    running = [b for b in chosen if not results[b.name].skipped]
    short = args.budget < SHORT_BUDGET
    end = deadline - 3.0  # then removing the trees, the report
    # Until a run is measured, the host's load says how much slower than the estimates.
    slow = max(1.0, (os.getloadavg()[0] + 1) / (os.cpu_count() or 1))
    print(f"budget_s={args.budget:g} size={size} benchmarks={','.join(b.name for b in running)}"
          f" this={args.this or 'working-tree'} base={args.base}", flush=True)
    this_failed = False
    rounds = MIN_ROUNDS
    with Progress(TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  console=Console(stderr=True)) as bar:
        task = bar.add_task("guard", total=2 * rounds * len(running))
        round_ = 0
        while round_ < rounds and running:
            if round_:  # on the measured times: what still fits
                running, rounds = _replan(running, results, end, round_)
                bar.update(task, total=bar.tasks[0].completed
                           + 2 * max(0, rounds - round_) * len(running))
                if round_ >= rounds:
                    break
            for bench in list(running):
                result = results[bench.name]
                left = end - time.perf_counter()
                if round_ == 0 and bench is not running[0]:
                    walls = [results[b.name].wall() * 2 for b in running
                             if results[b.name].this.walls]
                    measured = sum(r.this.walls[0] + r.base.walls[0] for r in results.values()
                                   if r.this.walls)
                    estimated = sum(2 * r.bench.cost for r in results.values() if r.this.walls)
                    if estimated:
                        slow = measured / estimated
                    if not fits(left, walls, bench.cost, slow):
                        result.skipped = "not in the budget"
                        running.remove(bench)
                        bar.update(task, total=bar.tasks[0].total - 2 * rounds)
                        continue
                elif 2 * (result.wall() or bench.cost * slow) > left:
                    continue  # not in what is left of the budget
                runs = {}
                for label, tree in (("this", this_tree), ("base", base_tree)):
                    bar.update(task, description=f"round {round_ + 1}/{rounds} {bench.name} "
                                                 f"{label}")
                    runs[label] = run_once(bench, tree, deadline - 1.5 - time.perf_counter())
                    bar.advance(task)
                    if runs[label][3] and runs[label][3].startswith("timed out"):
                        break
                failed = {label: run[3] for label, run in runs.items() if run[3]}
                if any(error.startswith("timed out") for error in failed.values()):
                    label, error = next(iter(failed.items()))
                    if not result.this.figures:
                        result.skipped = f"{label} {error}"
                elif "this" in failed and "base" in failed:  # broken before this tree
                    result.skipped = f"fails on both trees: {failed['base']}"
                elif "this" in failed:
                    result.error, this_failed = failed["this"], True
                elif failed:
                    result.skipped = f"the base run failed: {failed['base']}"
                if failed:
                    running.remove(bench)
                else:
                    for label, side in (("this", result.this), ("base", result.base)):
                        cpu, wall, values, _ = runs[label]
                        side.figures.append(cpu if bench.figure is None
                                            else number(values.get(bench.figure)))
                        side.values.append(values)
                        side.walls.append(wall)
                    result.differing.update(differing_counts(
                        runs["this"][2], runs["base"][2], bench.counts))
            round_ += 1
    verdicts = [report(results[b.name], short) for b in chosen]
    word, status = overall(verdicts, this_failed)
    medians = [(b.name, decide(ratios(results[b.name].this.figures,
                                      results[b.name].base.figures), short).ratio)
               for b in chosen]
    worst = max(medians, key=lambda pair: pair[1] or 0.0, default=("none", None))
    print(f"guard={word} worst={worst[0]} worst_ratio={_fmt(worst[1])} threshold={THRESHOLD} "
          f"budget_s={args.budget:g} elapsed_s={time.perf_counter() - started:.1f}")
    return status


def _replan(running: list[Bench], results: dict[str, Result], end: float,
            done: int) -> tuple[list[Bench], int]:
    """After `done` rounds, on each benchmark's measured time: leave out the least important
    while the rounds they still need for three do not fit before `end`; then as many rounds
    as fit (at most MAX_ROUNDS)."""
    kept = list(running)
    left = end - time.perf_counter()

    def per_round(benches: list[Bench]) -> float:
        return sum(2 * (results[b.name].wall() or b.cost) for b in benches)

    while len(kept) > 1:
        needed = MIN_ROUNDS - min(len(results[b.name].this.figures) for b in kept)
        if needed <= 0 or needed * per_round(kept) <= left:
            break
        kept.pop()  # reported with the rounds it had (fewer than three: a warning)
    pair = per_round(kept)
    fits_ = int(left // pair) if pair > 0 else 0
    return kept, min(MAX_ROUNDS, done + fits_)


if __name__ == "__main__":
    sys.exit(main())
