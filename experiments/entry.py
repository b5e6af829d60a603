"""The `foglab` command: the command line, where a Ctrl-C during its start-up (importing it
takes a second or two) ends it as quietly as a Ctrl-C later does: no traceback, exit 130.

Also in a process started with SIGINT ignored (a non-interactive shell's `&` job): Python then
installs no handler of its own, and a Ctrl-C before topologies.terminal.stop_on_signals takes
over was lost (`foglab emu up` went on to hold its cluster until killed)."""

from __future__ import annotations

import signal
import sys


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        from experiments.cli import app
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    app()
