"""What a TAB costs: `foglab` run as the shell's completion runs it, against Python's own start.

    python benchmarks/cli_completion.py [--repetitions 5]

Shell completion (`foglab --install-completion`) runs the whole program on every TAB with
`_FOGLAB_COMPLETE=complete_bash`, `COMP_WORDS='foglab '` and `COMP_CWORD=1` (typer's bash
protocol), so what `experiments.cli` imports is what a TAB waits for (the heavy commands are
imported when used: experiments.lazy_commands). Printed as key=value lines:

- `completion_ms=`: the median of `--repetitions` completions of `foglab ` (the commands);
- `python_start_ms=`: the median of as many `python -c pass`, in the same run, interleaved;
- `bare_typer_ms=`: the median of as many completions of a typer program of two commands and
  nothing else (BARE): the floor any typer command line pays for a TAB on this host;
- `ratio=` completion_ms / python_start_ms (the host's speed cancels out; the target is a TAB
  under 200 ms, about 5 Python starts on an idle host), and `ratio_to_bare_typer=`;
- `load=` the host's load average (1, 5, 15 min) before and after: on a shared 2-core host
  every figure grows with it.

The program is this checkout's (PYTHONPATH), started as the `foglab` script starts it
(experiments.entry.main).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPLETE = ("import sys; sys.argv[0] = 'foglab'; "
            "from experiments.entry import main; main()")
BARE = ("import typer\n"
        "app = typer.Typer()\n"
        "@app.command()\n"
        "def run(x: str): pass\n"
        "@app.command()\n"
        "def validate(x: str): pass\n"
        "app(prog_name='foglab', complete_var='_FOGLAB_COMPLETE')\n")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Milliseconds one process took, and what it printed."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return (time.perf_counter() - started) * 1000, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    options = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "_FOGLAB_COMPLETE": "complete_bash",
           "COMP_WORDS": "foglab ", "COMP_CWORD": "1"}
    before = os.getloadavg()
    completions, starts, bare = [], [], []
    offered = ""
    for _ in range(options.repetitions):
        spent, offered = timed([sys.executable, "-c", COMPLETE], env)
        completions.append(spent)
        starts.append(timed([sys.executable, "-c", "pass"], dict(os.environ))[0])
        bare.append(timed([sys.executable, "-c", BARE], env)[0])
    if "run" not in offered.split():
        raise SystemExit(f"the completion offered no `run`: {offered!r}")
    completion, start = statistics.median(completions), statistics.median(starts)
    after = os.getloadavg()
    print(f"completion_ms={completion:.0f}")
    print(f"python_start_ms={start:.0f}")
    print(f"bare_typer_ms={statistics.median(bare):.0f}")
    print(f"ratio={completion / start:.1f}")
    print(f"ratio_to_bare_typer={completion / statistics.median(bare):.2f}")
    print("load=" + " ".join(f"{v:.2f}" for v in before) + " -> "
          + " ".join(f"{v:.2f}" for v in after))


if __name__ == "__main__":
    main()
