"""The operator engines are one registry of descriptors (workloads.operator_engines): its names
and capabilities, its lookup's error, a third engine as one entry, the movers of
emu.features.moves.dispatch by way, and no code left that compares an engine's name."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from experiments.loader import parse_text
from topologies.errors import SpecError
from workloads.operator_engines import (
    DEFAULT_ENGINE,
    ENGINE_NAMES,
    OPERATOR_ENGINES,
    Move,
    OperatorEngine,
    operator_engine,
)
from workloads.pipeline import OperatorSpec

ROOT = Path(__file__).parents[2]
REGISTRY = Path("workloads/operator_engines.py")
PACKAGES = ("emu", "experiments", "sim", "workloads", "topologies")
NAMES = ("python", "spark")
# Files allowed to compare an engine's name: the registry alone.
ALLOWED = {REGISTRY}


def test_the_registry_names_each_engine_once_with_its_capabilities() -> None:
    assert ENGINE_NAMES == tuple(OPERATOR_ENGINES) == NAMES
    assert DEFAULT_ENGINE == "python"
    assert all(name == engine.name for name, engine in OPERATOR_ENGINES.items())
    capabilities = {name: {field.name: getattr(engine, field.name)
                           for field in dataclasses.fields(engine) if field.name != "name"}
                    for name, engine in OPERATOR_ENGINES.items()}
    assert capabilities == {
        "python": {"title": "Python", "in_agent": True, "jvm": False, "own_session": False,
                   "shares_reads": True, "tls": True, "writes_its_own": False,
                   "micro_batches": False, "moves_by": Move.AGENTS},
        "spark": {"title": "Spark", "in_agent": False, "jvm": True, "own_session": True,
                  "shares_reads": False, "tls": False, "writes_its_own": True,
                  "micro_batches": True, "moves_by": Move.STANDBY},
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        OPERATOR_ENGINES["spark"].jvm = False  # type: ignore[misc]


def test_an_unknown_engine_is_refused_naming_it_and_the_known_ones() -> None:
    assert operator_engine("spark") is OPERATOR_ENGINES["spark"]
    with pytest.raises(ValueError, match=r"unknown operator engine 'flink'; known engines: "
                                         r"python, spark"):
        operator_engine("flink")


def test_the_schema_takes_its_engine_names_from_the_registry() -> None:
    field = OperatorSpec.model_fields["engine"]
    assert field.annotation.__args__ == ENGINE_NAMES
    assert field.default == DEFAULT_ENGINE
    text = ("name: engines\ntopology: smart-city\nworkload: city-sensors\npipeline:\n"
            "  - {name: sink, engine: flink, on: cloud-1, reads: city}\n"
            "run: {backend: sim, duration: 10s}\n")
    with pytest.raises(SpecError) as caught:
        parse_text(text, file="engines.yaml")
    assert caught.value.path == ("pipeline", 0, "engine")
    assert "'python' or 'spark'" in str(caught.value)


def _registry_entries() -> list[ast.expr]:
    """The expressions the registry's OPERATOR_ENGINES is built from, as written."""
    tree = ast.parse((ROOT / REGISTRY).read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == \
                "OPERATOR_ENGINES":
            comprehension = node.value
            assert isinstance(comprehension, ast.DictComp)
            source = comprehension.generators[0].iter
            assert isinstance(source, ast.Tuple)
            return source.elts
    raise AssertionError("no OPERATOR_ENGINES in the registry")


def test_a_third_engine_is_one_entry(monkeypatch) -> None:
    # Each engine is written as one OperatorEngine(...) in the registry, nothing else.
    entries = _registry_entries()
    assert len(entries) == len(OPERATOR_ENGINES)
    assert all(isinstance(e, ast.Call) and getattr(e.func, "id", "") == "OperatorEngine"
               for e in entries)
    # One more entry is found by every lookup, and named in the lookup's error.
    flink = dataclasses.replace(OPERATOR_ENGINES["spark"], name="flink", title="Flink")
    monkeypatch.setitem(OPERATOR_ENGINES, "flink", flink)
    assert operator_engine("flink") is flink
    with pytest.raises(ValueError, match="known engines: python, spark, flink"):
        operator_engine("storm")
    assert isinstance(flink, OperatorEngine)


def test_every_way_an_engine_moves_has_one_mover() -> None:
    from emu.features.moves.by_agents import migrate_instance
    from emu.features.moves.dispatch import MOVERS
    from emu.features.moves.spark_query import migrate_query

    assert set(MOVERS) == set(Move)
    assert {engine.moves_by for engine in OPERATOR_ENGINES.values()} <= set(MOVERS)
    assert MOVERS[Move.AGENTS] is migrate_instance
    assert MOVERS[Move.STANDBY] is migrate_query


def _imported(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_the_movers_import_no_dispatch_and_no_circle() -> None:
    python, spark = _imported(Path("emu/features/moves/by_agents.py")), _imported(
        Path("emu/features/moves/spark_query.py"))
    assert "emu.features.moves.dispatch" not in python | spark
    assert "emu.features.moves.spark_query" not in python


def _compares_a_name(node: ast.AST) -> bool:
    """Whether a node compares (or matches) the string "python" or "spark" with anything."""
    def named(value: ast.AST) -> bool:
        if isinstance(value, ast.Constant):
            return value.value in NAMES
        return isinstance(value, (ast.Tuple, ast.List, ast.Set)) and any(
            named(element) for element in value.elts)

    if isinstance(node, ast.Compare):
        return any(named(side) for side in (node.left, *node.comparators))
    return isinstance(node, ast.MatchValue) and named(node.value)


def _comparisons() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative in ALLOWED:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if _compares_a_name(node):
                    found.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_code_compares_an_engine_name() -> None:
    assert _comparisons() == [], ("ask the engine's descriptor (workloads.operator_engines) "
                                  "the capability you branch on")


def test_the_scan_finds_a_comparison() -> None:
    for code in ('engine == "spark"', '"python" != op.engine', 'op.engine in ("spark", "x")',
                 'match e:\n    case "spark":\n        pass'):
        assert any(_compares_a_name(node) for node in ast.walk(ast.parse(code))), code
    assert not any(_compares_a_name(node) for node in ast.walk(ast.parse('x == "sparks"')))


def test_the_gateway_image_carries_what_the_agent_imports_of_workloads() -> None:
    """The agent's modules import the registry at their top: the gateway image must ship
    every workloads module they import there (emu.images.GATEWAY.sources)."""
    from emu.images import GATEWAY

    shipped = {p.relative_to(ROOT) for pattern in GATEWAY.sources for p in ROOT.glob(pattern)}
    missing = []
    for path in sorted((ROOT / "emu" / "agent").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workloads"):
                module = Path(*node.module.split("."))
                if not {module.with_suffix(".py"), module / "__init__.py"} & shipped:
                    missing.append(f"{path.relative_to(ROOT)}: {node.module}")
    assert missing == []
