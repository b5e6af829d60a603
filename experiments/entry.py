"""The `foglab` command: the command line, where a Ctrl-C during its start-up (importing it
takes a second or two) ends it as quietly as a Ctrl-C later does: no traceback, exit 130."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from experiments.cli import app
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    app()
