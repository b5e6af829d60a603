"""What a scenario feature reports is declared next to its code (workloads.reports): its tables
reach every run's tables with their rules, its rows reach `foglab compare`, and experiments/
names none of them (issue 41: adding a feature touches no file in experiments/)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.schema import CORE, TABLES, SchemaError, conform
from workloads.features import FEATURES

ROOT = Path(__file__).parents[2]


def test_each_features_tables_follow_the_core_ones_in_its_order() -> None:
    owned = [name for feature in FEATURES for name in feature.tables]
    assert owned == ["faults", "recoveries", "replicas", "broadcasts", "energy"]
    assert list(TABLES) == [*CORE, *owned]


def test_a_features_rules_run_on_its_table() -> None:
    energy = {"t_start": [0.0], "t_end": [1.0], "node": ["gw-1"], "link": [None],
              "kind": ["gateway"], "utilisation": [0.5], "bytes": [0], "joules": [-1.0]}
    with pytest.raises(SchemaError, match=r"table energy: joules is >= 0; 1 of 1 rows"):
        conform({"energy": energy})


@pytest.mark.parametrize("module", ["experiments/schema.py", "experiments/compare.py"])
def test_experiments_names_no_features_table_or_key(module: str) -> None:
    names = {name for feature in FEATURES for name in feature.tables}
    names |= {feature.key for feature in FEATURES if feature.tables or feature.compare}
    tree = ast.parse((ROOT / module).read_text())
    named = sorted({node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                    and isinstance(node.value, str) and node.value in names})
    assert named == [], f"{module} names {named}: a feature declares its own"


STAND_IN = """
import dataclasses, json
import pyarrow as pa
import workloads.features as features
from workloads.reports import FeatureTable, Figure, fail

def check(name, table):
    fail(name, table, "pings is >= 0", pa.compute.less(table.column("pings"), 0))

def rows(runs):
    return [Figure("pings", "pings", "", {b: r.facts.get("pings") for b, r in runs.items()})]

stand_in = dataclasses.replace(
    features.FEATURES[0], key="pings",
    tables={"pings": FeatureTable(pa.schema([("pings", pa.int64())]), check)}, compare=rows)
features.FEATURES = (*features.FEATURES, stand_in)

from experiments.compare import compare
from experiments.schema import SchemaError, TABLES, conform

tables = conform({"pings": {"pings": [3]}})
try:
    conform({"pings": {"pings": [-1]}})
    refused = None
except SchemaError as error:
    refused = str(error)
from tests.foundation.test_compare import messages, run
runs = {}
for backend, pings in (("sim", 4), ("emu", 5)):
    runs[backend] = run(backend, messages([5.0] * 10), {})
    runs[backend].facts["pings"] = pings
figure = compare(runs).figure("pings")
print(json.dumps({"last": list(TABLES)[-1], "rows": tables["pings"].num_rows,
                  "refused": refused, "values": figure.values, "error": figure.errors}))
"""


def test_a_stand_in_features_table_and_row_reach_a_run_and_compare() -> None:
    out = subprocess.run([sys.executable, "-c", STAND_IN], capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout)
    assert found["last"] == "pings" and found["rows"] == 1
    assert found["refused"].startswith("table pings: pings is >= 0; 1 of 1 rows break it")
    assert found["values"] == {"sim": 4, "emu": 5}
    assert found["error"]["sim"] == pytest.approx(-0.2)  # against emu, the reference
