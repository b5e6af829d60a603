"""Keep a cluster up in this process, which holds its relays, until told to bring it down.

`foglab emu up` holds the cluster in the foreground until Ctrl-C. With `--detach` it starts
itself again as a background process of its own session, which brings the cluster up and says
so in a notice file, and returns: the relays live on in that process. `foglab emu down`, from
any process, finds it by the owner label on the cluster's networks and ends it with SIGTERM,
which brings the cluster down as Ctrl-C would (topologies.terminal.stop_on_signals).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

NOTICE_POLL_S = 0.2
HOLD_POLL_S = 1.0


def hold() -> None:
    """Sleep until a stop signal (raised as KeyboardInterrupt by its handler, which interrupts
    the sleep; or, if that exception was lost on its way, found by stop_requested within a
    second: topologies.terminal)."""
    from topologies.terminal import stop_requested

    while (interrupt := stop_requested()) is None:
        time.sleep(HOLD_POLL_S)
    raise interrupt


def notify(path: Path | None, **facts: object) -> None:
    """Tell the process that started this one how `up` went."""
    if path is not None:
        temporary = path.with_suffix(".part")
        temporary.write_text(json.dumps(facts, default=str))
        temporary.replace(path)


def spawn(argv: Sequence[str], log: Path) -> subprocess.Popen:
    """Start `python -m experiments.cli <argv>` in a session of its own, logging to `log`."""
    with log.open("ab") as output:
        return subprocess.Popen([sys.executable, "-m", "experiments.cli", *argv],
                                stdin=subprocess.DEVNULL, stdout=output,
                                stderr=subprocess.STDOUT, start_new_session=True)


def wait_for_notice(path: Path, process: subprocess.Popen,
                    tick: Callable[[], None] = lambda: None) -> dict:
    """The notice the background process writes once up (or failed); {"ok": False, ...} if it
    ended without one."""
    while not path.exists():
        if process.poll() is not None:
            if path.exists():
                break
            return {"ok": False, "error": f"the background process ended (exit status "
                                          f"{process.returncode}) before the cluster was up"}
        tick()
        time.sleep(NOTICE_POLL_S)
    return json.loads(path.read_text())
