"""The `foglab` command: the command line, where a Ctrl-C during its start-up (importing it
takes a second or two) ends it as quietly as a Ctrl-C later does: no traceback, exit 130.

Also in a process started with SIGINT ignored (a non-interactive shell's `&` job): Python then
installs no handler of its own, and a Ctrl-C before topologies.terminal.stop_on_signals takes
over was lost (`foglab emu up` went on to hold its cluster until killed).

The commands check the paths they are given before they start (exit 2); what the system
refuses later (a disk full, a folder the system does not let be written, such as /proc) is one
line too, exit 1: a traceback there says nothing more to a user. FOGLAB_TRACEBACK=1 shows it."""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        from experiments.cli import app
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    try:
        app()
    except KeyboardInterrupt:  # while the command line is built, before a command took over
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    except OSError as failure:
        if os.environ.get("FOGLAB_TRACEBACK"):
            raise
        from topologies.terminal import error

        error(f"{failure.strerror or failure}: {failure.filename}" if failure.filename
              else failure)
        raise SystemExit(1) from None
