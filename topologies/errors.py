"""The error every bad input becomes: file, field path, value, and what was expected."""

from __future__ import annotations

import re


def format_path(path: tuple) -> str:
    """`('nodes', 2, 'replicas')` -> `nodes[2].replicas`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class Withheld:
    """A value read from a file an experiment names (an include, a topology file, a trace),
    kept out of messages: an experiment may point at a file it should not read (a CI log
    would show `/etc/shadow`'s hash), and where a file's folder was allowed its content is
    still no one's to print. Its kind is said; the line and column say where it stands."""

    def __init__(self, value: object):
        self.kind = value.kind if isinstance(value, Withheld) else _kind(value)

    def __repr__(self) -> str:
        return f"{self.kind}: not shown, it is a file's content"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Withheld) and other.kind == self.kind

    __hash__ = None  # type: ignore[assignment]


def _kind(value: object) -> str:
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             dict: "a mapping", list: "a list", type(None): "nothing"}
    return next((kind for cls, kind in kinds.items() if isinstance(value, cls)), "a value")


# A key of such a file shown in a field's path: a name (a shadow line ending in `:` is a
# YAML key too, and a token is longer than a name).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
HIDDEN_KEY = "(a key, not shown)"


def shown_path(path: tuple) -> tuple:
    """`path` with each key that is not a name (`_NAME`) replaced by HIDDEN_KEY."""
    return tuple(part if isinstance(part, int) or (
        isinstance(part, str) and _NAME.fullmatch(part)) else HIDDEN_KEY for part in path)


def withheld(value: object, expected: str) -> tuple[Withheld, str]:
    """`value` as its kind, and `expected` without the value quoted in it (a unit's parser
    says `got '20 furlongs'`): for an error placed in a file whose content is not shown."""
    if isinstance(value, str) and value:
        expected = expected.replace(repr(value), "the value")
        if len(value) >= 4:
            expected = expected.replace(value, "the value")
    return Withheld(value), expected


class SpecError(ValueError):
    """A bad experiment, topology or workload description."""

    def __init__(self, path: tuple | str, value: object, expected: str, file: str | None = None,
                 line: int | None = None, column: int | None = None):
        self.path = tuple(path.split(".")) if isinstance(path, str) and path else (
            path if isinstance(path, tuple) else ())
        self.value = value
        self.expected = expected
        self.file = file
        self.line = line
        self.column = column  # given where the value is not shown (Withheld)
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where += f":{self.line}" + (f":{self.column}" if self.column is not None else "")
        field = format_path(self.path) or "(top level)"
        shown = repr(self.value)
        if shown in self.expected:
            return f"{where}: {field}: {self.expected}"  # the message already quotes it
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return f"{where}: {field}: {self.expected} (got {shown})"


def first_error(exc, data: object) -> SpecError:
    """A pydantic ValidationError's first error as a SpecError naming the field's path in
    `data` and the value written (a misspelt field first: the fields it leaves missing follow
    from it), without the tags pydantic adds (a union's member, a dict's `[key]`). A file's
    reader adds its file and line (topologies.documents)."""
    item = sorted(exc.errors(include_url=False), key=lambda i: i["type"] != "extra_forbidden")[0]
    path: list = []
    node = data
    for part in item["loc"]:
        if isinstance(node, dict | list) and (part in node if isinstance(node, dict) else
                                              isinstance(part, int) and part < len(node)):
            path.append(part)
            node = node[part]
        elif not (isinstance(part, str) and ("[" in part or part[:1].isupper())):
            path.append(part)  # a missing field still belongs in the path
            node = None
    if item["type"] == "missing":
        return SpecError(tuple(path), None, "a value: this field is required")
    if item["type"] == "extra_forbidden":
        return SpecError(tuple(path), item.get("input"),
                         "no such field here; check its spelling and indentation")
    return SpecError(tuple(path), item.get("input"), item["msg"].removeprefix("Value error, "))
