"""The packages' layering: the experiment description (schema, loading, checks) imports neither
backend, and the backends never import each other (DESIGN.md; the hybrid backend composes them
from above)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _imported(*modules: str) -> set[str]:
    code = (f"import json, sys; import {', '.join(modules)}; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def test_the_experiment_schema_imports_no_backend():
    packages = _imported("experiments.spec", "experiments.loader", "experiments.checks")
    assert not packages & {"sim", "emu"}, sorted(packages & {"sim", "emu"})


@pytest.mark.parametrize(("backend", "other"), [("sim.model", "emu"), ("emu.run.emulate", "sim")])
def test_a_backend_does_not_import_the_other(backend, other):
    assert other not in _imported(backend)


def _imports_of(path) -> set[str]:
    """Every package a module imports, at its top or inside a function."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("backend", ["sim", "emu"])
def test_a_backend_imports_nothing_of_the_experiment_layer(backend):
    from pathlib import Path

    root = Path(__file__).parents[2] / backend
    upward = sorted(str(path.relative_to(root.parent)) for path in root.rglob("*.py")
                    if "experiments" in _imports_of(path))
    assert upward == [], f"{backend} imports experiments (the layer above it) in {upward}"


def test_the_schema_reads_the_engines_from_a_module_of_names_alone():
    # run.engine is checked against emu.engines.ENGINES, the one list of engines: validating
    # it loads that module and nothing else of the emulation, nor the Docker SDK.
    code = ("import json, sys; from experiments.spec import RunSpec; "
            "RunSpec.model_validate({'duration': 1, 'engine': 'swarm'}); "
            "print(json.dumps(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('emu', 'docker'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["emu", "emu.engines"]


def _emu_order() -> list[str]:
    """emu's folders and loose modules (`x.py`) from the top, as docs/architecture.md writes
    them (the paragraph that begins "Inside `emu`")."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    paragraph = text[text.index("Inside `emu`, each folder"):].split("\n\n")[0]
    return re.findall(r"`([a-z_]+(?:\.py)?)`", paragraph.split("from\nthe top:")[1]
                      .split(". No other")[0])


def _emu_imports() -> dict[str, set[tuple[str, str]]]:
    """Each part of emu (a folder, or a loose module as `x.py`) -> (the part it imports,
    where)."""
    import ast
    from pathlib import Path

    root = Path(__file__).parents[2] / "emu"
    found: dict[str, set[tuple[str, str]]] = {}
    for path in root.rglob("*.py"):
        part = path.relative_to(root).parts[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    node.module.startswith("emu."):
                other = node.module.split(".")[1]
                other = other if (root / other).is_dir() else f"{other}.py"
                if other != part:
                    found.setdefault(part, set()).add((other, str(path.relative_to(root))))
    return found


def test_emu_stands_in_folders_by_job_and_each_imports_only_those_below_it():
    from pathlib import Path

    order = _emu_order()
    assert {"cli", "run", "engines", "agent", "errors.py"} <= set(order), order
    root = Path(__file__).parents[2] / "emu"
    parts = {p.name for p in root.iterdir() if (p / "__init__.py").exists() or
             (p.suffix == ".py" and p.name != "__init__.py")}
    assert parts == set(order), f"emu holds {sorted(parts)}; the order names {sorted(order)}"
    rank = {part: i for i, part in enumerate(order)}
    upward = sorted(f"{where} imports emu.{other.removesuffix('.py')}"
                    for part, imports in _emu_imports().items()
                    for other, where in imports if rank[other] <= rank[part])
    assert upward == [], "imports that climb up emu's folders:\n" + "\n".join(upward)
