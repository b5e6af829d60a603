"""YAML description files: read them safely and find the line a field path stands on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from topologies.errors import SpecError, Withheld, shown_path, withheld


class DuplicateKey(yaml.YAMLError):
    """A key written twice in one mapping (YAML itself keeps the last one silently)."""

    def __init__(self, key: object, first: yaml.Mark, second: yaml.Mark, mapping: yaml.Mark):
        super().__init__(f"{key!r} written twice: lines {first.line + 1} and {second.line + 1}")
        self.key, self.first, self.second, self.mapping = key, first, second, mapping


_BOOL, _INT, _FLOAT = (f"tag:yaml.org,2002:{name}" for name in ("bool", "int", "float"))
# YAML 1.2's core schema, in place of PyYAML's YAML 1.1 forms: `on`, `no`, `y` are no booleans,
# `1:30` no sexagesimal 90, `010` no octal 8 (a decimal 10; octal is `0o10`), `1_000` no
# number, and `1e3` a float without needing a dot. An int is tried before a float.
_YAML_1_2 = (
    (_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), "tTfF"),
    (_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), "-+0123456789"),
    (_FLOAT, re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), "-+0123456789."),
)


def _resolvers() -> dict:
    """PyYAML's safe resolvers without its booleans and numbers, then YAML 1.2's."""
    found = {first: [(tag, regexp) for tag, regexp in resolvers
                     if tag not in (_BOOL, _INT, _FLOAT)]
             for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    for tag, regexp, firsts in _YAML_1_2:
        for first in firsts:
            found.setdefault(first, []).append((tag, regexp))
    return found


def _int(loader, node) -> int:
    """A YAML 1.2 int: decimal (a leading zero too), 0o octal or 0x hexadecimal."""
    text = loader.construct_scalar(node)
    if text[:2] in ("0o", "0x"):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


class _Strict:
    """YAML 1.2 booleans and numbers (_YAML_1_2): only true and false are booleans. Under YAML
    1.1, `on: gateways` would read as `True: gateways`, and `no`, `off` or `y` would turn into
    booleans too; `1:30` into 90 and `010` into 8. A key written twice in one mapping is
    refused (DuplicateKey) rather than the last one kept."""

    yaml_implicit_resolvers = _resolvers()

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[object, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` keys may be overridden: that is what merging is
                key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
                try:
                    earlier = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: the base class says so with its line
                if earlier is not None:
                    raise DuplicateKey(key, earlier, key_node.start_mark, node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class Loader(_Strict, yaml.SafeLoader):
    """The project's rules on PyYAML's pure-Python parser."""


# The same rules on libyaml's parser where PyYAML has it (its wheels do): a hundred jobs take
# the pure parser 0.1 s a pass, most of `foglab emu apply`'s time for a one-job change.
FastLoader = type("FastLoader", (_Strict, getattr(yaml, "CSafeLoader", yaml.SafeLoader)),
                  {"__doc__": "The project's rules on libyaml's parser, where there is one."})
for _loader in (Loader, FastLoader):
    _loader.add_constructor(_INT, _int)


class Dumper(yaml.SafeDumper):
    """YAML the loaders read back as written: a string they would read as a number or a
    boolean (`1e5`, `0o17`) is quoted, as PyYAML quotes what YAML 1.1 would read so."""

    yaml_implicit_resolvers = _resolvers()


def dump(data: object, **options) -> str:
    """`data` as YAML text that `parse` reads back the same (PyYAML's safe_dump's options)."""
    return yaml.dump(data, Dumper=Dumper, **options)


def load_text(text: str) -> object:
    """One YAML value, with YAML 1.2 booleans and numbers (for --set values and the like)."""
    return yaml.load(text, Loader=FastLoader)  # noqa: S506 - a SafeLoader


@dataclass
class Document:
    """A parsed YAML file and the node tree that knows where each value was written.
    `confidential`: a file an experiment names (not the experiment file itself, nor foglab's
    own catalog): its errors give the line and column and not the value there
    (topologies.errors.Withheld)."""

    file: str
    data: object
    _root: yaml.Node | None = field(default=None, repr=False)
    confidential: bool = False

    def line(self, path: tuple) -> int | None:
        """The 1-based line of the deepest part of `path` found in the file."""
        mark = self._mark(path)
        return None if mark is None else mark.line + 1

    def _mark(self, path: tuple) -> yaml.Mark | None:
        node, mark = self._root, None
        for part in path:
            if node is None:
                break
            mark = node.start_mark
            node = _child(node, part)
        return node.start_mark if node is not None else mark

    def error(self, error: SpecError, prefix: tuple = ()) -> SpecError:
        """Place an error in this file; `prefix` is where this document sits in a larger one."""
        path = error.path[len(prefix):] if error.path[:len(prefix)] == prefix else error.path
        mark = self._mark(path)
        line = None if mark is None else mark.line + 1
        if not self.confidential:
            return SpecError(path, error.value, error.expected, self.file, line)
        value, expected = withheld(error.value, error.expected)
        return SpecError(shown_path(path), value, expected, self.file, line,
                         None if mark is None else mark.column + 1)


def _child(node: yaml.Node, part: object) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and (
            0 <= part < len(node.value)):
        return node.value[part]
    return None


def parse(text: str, file: str, confidential: bool = False) -> Document:
    """Parse YAML text; syntax errors become SpecError with the line (and, for a confidential
    file, the column and the kind of problem without the text: Document.confidential)."""
    root = None
    loader = FastLoader(text)
    try:  # one parse: the node tree (its lines), then the data built from it
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except DuplicateKey as exc:
        path = _path_to(root, exc.mapping) if root is not None else ()
        key = (f"{exc.key!r} is" if not confidential else "a key is")
        path = (*path, exc.key) if isinstance(exc.key, str | int) else path
        raise SpecError(shown_path(path) if confidential else path,
                        Withheld(exc.key) if confidential else exc.key,
                        f"a key written once in a mapping, but {key} on line "
                        f"{exc.first.line + 1} and again on line {exc.second.line + 1} (YAML "
                        "would keep the last silently)", file, exc.second.line + 1,
                        exc.second.column + 1 if confidential else None) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = (exc.problem or "").strip() or "invalid YAML"
        raise SpecError((), _QUOTED.sub("(text not shown)", problem) if confidential else problem,
                        "valid YAML", file, mark.line + 1 if mark else None,
                        mark.column + 1 if mark and confidential else None) from None
    except yaml.reader.ReaderError as exc:  # its message quotes the character
        raise SpecError((), f"a character YAML does not allow (character {exc.position + 1})",
                        "valid YAML text", file) from None
    except yaml.YAMLError as exc:
        raise SpecError((), "invalid YAML" if confidential or not str(exc) else
                        str(exc).splitlines()[0], "valid YAML", file) from None
    except RecursionError:
        raise SpecError((), "nesting too deep", "valid YAML of reasonable depth", file) from None
    except (ValueError, TypeError, AttributeError, OverflowError) as exc:
        # PyYAML's constructors raise these for bad dates, tagged values or huge integers.
        raise SpecError((), "a date, number or tag YAML cannot build" if confidential else
                        str(exc).splitlines()[0][:120], "valid YAML values", file) from None
    finally:
        loader.dispose()
    return Document(file, data, root, confidential)


# A quoted piece of the text in PyYAML's problem (`found character '\t'`, `found undefined
# alias 'x'`), not its token names (`'<block end>'`).
_QUOTED = re.compile(r"'(?!<)[^']*'|\"[^\"]*\"")


def _path_to(root: yaml.Node, mark: yaml.Mark) -> tuple:
    """The field path of the node that starts at `mark` (found by its place in the text)."""
    stack: list[tuple[yaml.Node, tuple]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if node.start_mark.index == mark.index and isinstance(node, yaml.MappingNode):
            return path
        if isinstance(node, yaml.MappingNode):
            stack.extend((value, (*path, key.value)) for key, value in node.value
                         if isinstance(key, yaml.ScalarNode))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((value, (*path, i)) for i, value in enumerate(node.value))
    return ()


def read(path: Path, confidential: bool = False) -> Document:
    """A YAML file parsed (`confidential`: Document.confidential)."""
    return parse(read_text(path), str(path), confidential)


def read_text(path: Path) -> str:
    """A description file's text: UTF-8 without NUL bytes (a binary file is refused by what
    it is, not shown)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecError((), str(path), "an existing file", str(path)) from None
    except OSError as exc:
        raise SpecError((), str(path), f"a readable file ({exc.strerror})", str(path)) from None
    return text_of(data, str(path))


def text_of(data: bytes, file: str) -> str:
    """`data` as text, or a SpecError saying where it is not text (never what is there)."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise SpecError((), f"a binary file (a NUL byte at offset {nul})",
                        "a UTF-8 text file", file) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError((), f"bytes that are not UTF-8 at offset {exc.start}",
                        "a UTF-8 text file", file) from None
