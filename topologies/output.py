"""A command's machine-readable answer: with `--json`, one JSON document on stdout and nothing
else there, also when the command fails (docs/cli.md has each command's shape).

A command wraps its body in `json_output(enabled)` and fills the dict it yields; what it prints
for a person (tables) is withheld from stdout meanwhile, its messages and progress stay on
stderr. The block turns the way a command ends (typer.Exit, a SpecError, an interrupt) into the
document's `ok`, `exit_code` and `error` ({"kind": "bad-input", "message": ..., "exit_code": 3})
and then exits with the same code."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from topologies.errors import SpecError
from topologies.exit_codes import ExitCode
from topologies.terminal import error, errors_said, exit_code, results_withheld

JsonOption = Annotated[bool, typer.Option(
    "--json", help="print one JSON document on stdout (also when the command fails; "
    "docs/cli.md); messages and progress stay on stderr")]

_emitted: list[bool] = []  # a document was printed in this process (entry.main asks)


def emitted() -> bool:
    """Whether a --json document was printed (else a usage error left stdout empty)."""
    return bool(_emitted)


def emit(document: dict[str, Any], code: int = ExitCode.OK,
         errors: list[str] | None = None) -> None:
    """Print the one document: `ok`, `exit_code`, the command's fields and, on an error,
    `error`."""
    member = ExitCode.of(code)
    ok = member.ok if isinstance(member, ExitCode) else False
    shown: dict[str, Any] = {"ok": ok, "exit_code": int(code), **document}
    if not ok:
        kind = member.kind if isinstance(member, ExitCode) else "failure"
        message = "; ".join(errors or []) or f"the command ended with exit code {int(code)}"
        shown["error"] = {"kind": kind, "message": message, "exit_code": int(code)}
    sys.stdout.write(json.dumps(shown, indent=2, default=str, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    _emitted.append(True)


@contextlib.contextmanager
def json_output(enabled: bool) -> Iterator[dict[str, Any]]:
    """The document a command fills; with `enabled`, printed when the block ends however it
    ends, then the command exits with its code (0 and 4 are `ok`). Without it the dict is
    filled and dropped; either way a SpecError out of the block is its error line, exit 3."""
    document: dict[str, Any] = {}
    if not enabled:
        try:
            yield document
        except SpecError as refused:
            error(refused)
            raise typer.Exit(ExitCode.BAD_INPUT) from None
        return
    code: int = ExitCode.OK
    failure: BaseException | None = None
    with results_withheld(), errors_said() as said:
        try:
            yield document
        except typer.Exit as stop:
            code = stop.exit_code
        except SpecError as refused:
            error(refused)
            code = ExitCode.BAD_INPUT
        except KeyboardInterrupt as stop:
            code = exit_code(stop)
        except Exception as unexpected:  # noqa: BLE001 - in the document, then raised as it was
            error(unexpected)
            code, failure = ExitCode.FAILURE, unexpected
    emit(document, code, said)
    if failure is not None:
        raise failure
    if code:
        raise typer.Exit(code)


__all__ = ["JsonOption", "emit", "emitted", "json_output"]
