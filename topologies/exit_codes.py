"""The exit codes of foglab's command lines, one meaning each (docs/cli.md has the table).

As `terraform plan -detailed-exitcode` and `kubectl diff` do, a script tells a change from a
mistake: 0 success (nothing to change), 1 a failure (a run failed, the system refused), 2 a
command line click could not read (its own usage error), 3 a bad input (a file, a field, an
option's value), 4 changes found (a plan that would change something), 130/143 interrupted
(Ctrl-C, SIGTERM)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    BAD_INPUT = 3
    CHANGES = 4
    INTERRUPTED = 130
    TERMINATED = 143

    @property
    def kind(self) -> str:
        """The code's name in a --json document's `error.kind` (`bad-input`)."""
        return self.name.lower().replace("_", "-")

    @classmethod
    def of(cls, code: int | None) -> ExitCode | int:
        """The member for a code, or the code itself (another signal's 128+N, a command's)."""
        try:
            return cls(code or 0)
        except ValueError:
            return code

    @property
    def ok(self) -> bool:
        """Whether the command did what it was asked (changes found is an answer, not an
        error)."""
        return self in (ExitCode.OK, ExitCode.CHANGES)


__all__ = ["ExitCode"]
