"""The JSON Schemas in docs/schema/ and the catalog's modelines: editors validate the catalog's
files with the schemas they name, so those schemas must be foglab's own and take every file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from experiments.cli import described_schema
from experiments.spec import ExperimentFile
from topologies.documents import load_text
from topologies.spec import TopologySpec
from workloads.spec import WorkloadSpec

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "schema"
MODELS = {"experiment": ExperimentFile, "topology": TopologySpec, "workload": WorkloadSpec}
FOLDERS = {"experiment": "experiments", "topology": "topologies", "workload": "workloads"}
MODELINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$")
CATALOG = [(kind, path) for kind, folder in FOLDERS.items()
           for path in sorted((ROOT / folder).glob("*.yaml"))]


def validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((SCHEMAS / f"{kind}.json").read_text()))


@pytest.mark.parametrize("kind", list(MODELS))
def test_the_shipped_schema_is_the_one_foglab_writes(kind):
    shipped = json.loads((SCHEMAS / f"{kind}.json").read_text())
    assert shipped == described_schema(kind, MODELS[kind]), (
        f"docs/schema/{kind}.json is behind the code: `make schemas` writes it again")


def test_the_catalog_has_files_of_each_kind():
    assert {kind for kind, _ in CATALOG} == set(MODELS)
    assert len(CATALOG) >= 30


@pytest.mark.parametrize(("kind", "path"), CATALOG, ids=[p.name for _, p in CATALOG])
def test_each_catalog_file_names_its_schema_and_validates(kind, path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    named = MODELINE.match(first)
    assert named, f"{path.name}: first line {first!r} is not the language server's modeline"
    assert (path.parent / named.group(1)).resolve() == (SCHEMAS / f"{kind}.json").resolve()
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator(kind).iter_errors(load_text(path.read_text(encoding="utf-8")))]
    assert errors == []


def test_the_schema_takes_a_name_alone_or_a_list_and_refuses_a_wrong_field():
    quickstart = load_text((ROOT / "experiments" / "quickstart.yaml").read_text())
    check = validator("experiment")
    operator = quickstart["pipeline"][0]
    assert isinstance(operator["on"], str)  # written alone in the file
    for on in (operator["on"], [operator["on"], "gw-2"]):
        assert not list(check.iter_errors({**quickstart,
                                           "pipeline": [{**operator, "on": on}]}))
    wrong = {**quickstart, "run": {**quickstart["run"], "duraton": "10s"}}
    messages = [e.message for e in check.iter_errors(wrong)]
    assert any("duraton" in m for m in messages)
    empty = {**quickstart, "pipeline": [{**operator, "on": []}]}
    assert list(check.iter_errors(empty))  # at least one node, as the loader says
