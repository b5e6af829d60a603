"""The error every bad input becomes: file, field path, value, and what was expected."""

from __future__ import annotations


def format_path(path: tuple) -> str:
    """`('nodes', 2, 'replicas')` -> `nodes[2].replicas`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class SpecError(ValueError):
    """A bad experiment, topology or workload description."""

    def __init__(self, path: tuple | str, value: object, expected: str, file: str | None = None,
                 line: int | None = None):
        self.path = tuple(path.split(".")) if isinstance(path, str) and path else (
            path if isinstance(path, tuple) else ())
        self.value = value
        self.expected = expected
        self.file = file
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        field = format_path(self.path) or "(top level)"
        shown = repr(self.value)
        if shown in self.expected:
            return f"{where}: {field}: {self.expected}"  # the message already quotes it
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return f"{where}: {field}: {self.expected} (got {shown})"
