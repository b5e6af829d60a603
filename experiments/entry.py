"""The `foglab` command: the command line, where a Ctrl-C during its start-up (importing it
takes a moment) ends it as quietly as a Ctrl-C later does: no traceback, exit 130.

Also in a process started with SIGINT ignored (a non-interactive shell's `&` job): Python then
installs no handler of its own, and a Ctrl-C before topologies.terminal.stop_on_signals takes
over was lost (`foglab emu up` went on to hold its cluster until killed).

The commands check the paths they are given before they start (exit 3, bad input); what the
system refuses later (a disk full, a folder the system does not let be written, such as /proc)
is one line too, exit 1: a traceback there says nothing more to a user. FOGLAB_TRACEBACK=1
shows it. With --json, a command line click cannot read (exit 2) still prints a JSON document
on stdout. The codes are topologies.exit_codes's (docs/cli.md)."""

from __future__ import annotations

import os
import signal
import sys

from topologies.exit_codes import ExitCode

# Shell completion's variable, also under `python -m foglab` (whose usage line says so).
COMPLETE_VAR = "_FOGLAB_COMPLETE"


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        from experiments.cli import app
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(ExitCode.INTERRUPTED) from None
    try:
        app(complete_var=COMPLETE_VAR)
    except KeyboardInterrupt:  # while the command line is built, before a command took over
        sys.stderr.write("interrupted\n")
        raise SystemExit(ExitCode.INTERRUPTED) from None
    except OSError as failure:
        if os.environ.get("FOGLAB_TRACEBACK"):
            raise
        from topologies.terminal import error

        error(f"{failure.strerror or failure}: {failure.filename}" if failure.filename
              else failure)
        raise SystemExit(ExitCode.FAILURE) from None
    except SystemExit as ended:
        _usage_document(ended.code)
        raise


def _usage_document(code: object) -> None:
    """With --json, the document of a command that ended before its body ran (click's usage
    error, exit 2: its message is on stderr), so that stdout is JSON whatever happens."""
    from topologies import output

    if "--json" in sys.argv[1:] and isinstance(code, int) and code and not output.emitted():
        output.emit({}, code, ["the command line could not be read (click's message is on "
                               "stderr; `foglab COMMAND --help`)" if code == ExitCode.USAGE
                               else "the command ended before it had an answer"])
