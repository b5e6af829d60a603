"""YAML description files: read them safely and find the line a field path stands on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from topologies.errors import SpecError


class Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true and false. Under YAML 1.1, `on: gateways` would read as
    `True: gateways`, and `no`, `off` or `y` would turn into booleans too."""


Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


def load_text(text: str) -> object:
    """One YAML value, with YAML 1.2 booleans (for --set values and the like)."""
    return yaml.load(text, Loader=Loader)  # noqa: S506 - Loader is a SafeLoader


@dataclass
class Document:
    """A parsed YAML file and the node tree that knows where each value was written."""

    file: str
    data: object
    _root: yaml.Node | None = field(default=None, repr=False)

    def line(self, path: tuple) -> int | None:
        """The 1-based line of the deepest part of `path` found in the file."""
        node, line = self._root, None
        for part in path:
            if node is None:
                break
            line = node.start_mark.line + 1
            node = _child(node, part)
        if node is not None:
            line = node.start_mark.line + 1
        return line

    def error(self, error: SpecError, prefix: tuple = ()) -> SpecError:
        """Place an error in this file; `prefix` is where this document sits in a larger one."""
        path = error.path[len(prefix):] if error.path[:len(prefix)] == prefix else error.path
        return SpecError(path, error.value, error.expected, self.file, self.line(path))


def _child(node: yaml.Node, part: object) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and (
            0 <= part < len(node.value)):
        return node.value[part]
    return None


def parse(text: str, file: str) -> Document:
    """Parse YAML text; syntax errors become SpecError with the line."""
    try:
        root = yaml.compose(text, Loader=Loader)
        data = yaml.load(text, Loader=Loader)  # noqa: S506 - Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise SpecError((), (exc.problem or "").strip() or "invalid YAML", "valid YAML", file,
                        mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise SpecError((), str(exc).splitlines()[0] if str(exc) else "invalid YAML",
                        "valid YAML", file) from None
    except RecursionError:
        raise SpecError((), "nesting too deep", "valid YAML of reasonable depth", file) from None
    except (ValueError, TypeError, AttributeError, OverflowError) as exc:
        # PyYAML's constructors raise these for bad dates, tagged values or huge integers.
        raise SpecError((), str(exc).splitlines()[0][:120], "valid YAML values", file) from None
    return Document(file, data, root)


def read(path: Path) -> Document:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError((), str(path), "an existing file", str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError((), str(path), f"a readable UTF-8 file ({exc})", str(path)) from None
    return parse(text, str(path))
