"""No function defined inside another hides a name its module imports or defines at the top:
inside the outer function the name then means the inner one, and a call meant for the
module's (`restore(operator, state)` in a callback itself named `restore`) calls the callback
instead, on a thread where the error can go unseen (issue 41's merge did this once: an
emulated recovery never finished)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sim", "emu", "experiments", "workloads", "topologies")


def hidden(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of each nested function named as a top-level import or definition."""
    top: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            top |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            top.add(node.name)
    found = []
    for outer in ast.walk(tree):
        if isinstance(outer, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [(inner.lineno, inner.name) for inner in ast.walk(outer)
                      if inner is not outer
                      and isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef)
                      and inner.name in top]
    return sorted(set(found))


def test_the_check_finds_an_inner_function_named_as_an_import():
    tree = ast.parse("from m import restore\n\ndef recover():\n    def restore(state):\n"
                     "        return restore(1, state)\n    return restore\n\n"
                     "def fine():\n    def restored():\n        pass\n")
    assert hidden(tree) == [(4, "restore")]


def test_no_nested_function_hides_a_name_of_its_module():
    found = [f"{path.relative_to(ROOT)}:{line}: {name}"
             for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
             for line, name in hidden(ast.parse(path.read_text(), str(path)))]
    assert found == [], "nested functions named as their module's imports or functions:\n" + \
        "\n".join(found)
