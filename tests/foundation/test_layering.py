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


@pytest.mark.parametrize(("backend", "other"), [("sim.model", "emu"), ("emu.run", "sim")])
def test_a_backend_does_not_import_the_other(backend, other):
    assert other not in _imported(backend)
