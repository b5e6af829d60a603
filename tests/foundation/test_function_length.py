"""The project's bounds on length in the packages that make a run (sim, emu, experiments,
workloads, topologies): no function over 80 lines, no file over 600. A longer one does several
jobs; split it into parts whose names say them. A function is measured as Python sees it: from
the `def` line to the last line of the body (decorators excluded), every function, nested ones
and methods too; a file by its lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sim", "emu", "experiments", "workloads", "topologies")
MAX_LINES = 80
MAX_FILE_LINES = 600


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, first line, length in lines) of every function under `tree`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node.lineno, node.end_lineno - node.lineno + 1
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def too_long(root: Path = ROOT, limit: int = MAX_LINES) -> list[tuple[str, str, int]]:
    """(file:line, name, length) of every function of the packages longer than `limit`."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            found += [(f"{path.relative_to(root)}:{line}", name, length)
                      for name, line, length in _functions(tree) if length > limit]
    return found


def _function(name: str, lines: int, indent: str = "") -> str:
    """The source of a function `name` of `lines` lines, its def line included."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
    return f"{indent}def {name}():\n{body}"


def test_the_scan_counts_from_def_to_last_line_methods_and_nested_ones_too(tmp_path):
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "m.py").write_text(
        "@decorated\n" + _function("fits", 80)  # the decorator's line is not counted
        + "\nclass C:\n" + _function("method", 81, "    ")
        + "\ndef outer():\n" + _function("inner", 81, "    ") + "    return inner\n")
    found = too_long(tmp_path)
    assert [(name, length) for _, name, length in found] == [
        ("C.method", 81), ("outer", 83), ("outer.inner", 81)]
    assert [where for where, _, _ in found] == ["sim/m.py:84", "sim/m.py:166", "sim/m.py:167"]


def test_no_function_is_over_80_lines():
    found = too_long()
    listed = "\n".join(f"  {name} ({where}): {length} lines" for where, name, length in found)
    assert not found, f"functions over {MAX_LINES} lines, split each into named parts:\n{listed}"


def long_files(root: Path = ROOT, limit: int = MAX_FILE_LINES) -> list[tuple[str, int]]:
    """(file, lines) of every module of the packages longer than `limit` lines."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            lines = len(path.read_text().splitlines())
            if lines > limit:
                found.append((str(path.relative_to(root)), lines))
    return found


def test_the_file_scan_counts_lines(tmp_path):
    (tmp_path / "emu").mkdir()
    (tmp_path / "emu" / "fits.py").write_text("x = 1\n" * 600)
    (tmp_path / "emu" / "long.py").write_text("x = 1\n" * 601)
    assert long_files(tmp_path) == [("emu/long.py", 601)]


def test_no_file_is_over_600_lines():
    found = long_files()
    listed = "\n".join(f"  {where}: {lines} lines" for where, lines in found)
    assert not found, f"files over {MAX_FILE_LINES} lines, split each by job:\n{listed}"
