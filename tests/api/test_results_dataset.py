"""Results any tool reads: load_table over one pyarrow dataset (columns and filters pushed
down, the run's columns constant per file, typed swept values), units in each column's
Parquet metadata, and docs/results.md's DuckDB and polars readings run as the page writes
them, giving the rows per run foglab gives."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from experiments import points
from experiments.loader import load
from experiments.results import (
    FILE_FACTS,
    FILE_UNITS,
    NotRecorded,
    Run,
    filter_expression,
    load_summaries,
    load_table,
    runs,
    value_unit,
)
from experiments.runner import run_experiment
from experiments.schema import TABLES, UNITS, units_of

KEY = "workload.streams.0.rate"
PAGE = Path(__file__).parents[2] / "docs" / "results.md"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep of two rates on sim (2 s each) under `<tmp>/results`, and a run that recorded
    no messages beside it (another experiment name would not do: quickstart's folder)."""
    base = tmp_path_factory.mktemp("dataset")
    experiment = load("quickstart", overrides=["run.duration=2s", "run.drain=1s"],
                      sweeps=[f"{KEY}=[4/s, 12.5/s]"])
    outcomes = run_experiment(experiment, base / "results", sweep_id="rates")
    assert all(outcome.error is None for outcome in outcomes)
    return base


def _runs(root: Path) -> list[Run]:
    return runs(root / "results", "quickstart", "rates")


def test_load_table_is_typed_with_categorical_names_in_the_runs_order(root: Path) -> None:
    found = _runs(root)
    frame = load_table(found, "messages")
    assert list(frame.columns) == ["run", "repetition", "seed", *TABLES["messages"].names, KEY]
    assert frame[KEY].dtype == "float64" and sorted(frame[KEY].unique()) == [4.0, 12.5]
    for column in ("state", "stream", "source", "sink"):  # the table's names
        assert isinstance(frame[column].dtype, pd.CategoricalDtype), column
    assert frame["run"].dtype == pd.StringDtype("pyarrow")  # strings, a row no Python object
    assert ("a/" + frame["run"]).iloc[0] == "a/" + found[0].id
    assert frame.groupby("run").size().to_dict() == frame["run"].value_counts().to_dict()
    # Each run's rows, in its file's order, one run after the other.
    assert list(dict.fromkeys(frame["run"])) == [run.id for run in found]
    for run in found:
        own = pq.read_table(run.folder / "messages.parquet").to_pandas()
        rows = frame[frame["run"] == run.id]
        assert list(rows["id"]) == list(own["id"])
        assert (rows["seed"] == run.manifest["seed"]).all()
    written = load_table(found, "messages", typed=False)
    assert set(written[KEY]) == {"4/s", "12.5/s"} and len(written) == len(frame)
    summaries = load_summaries(found)
    assert list(summaries[KEY]) == [4.0, 12.5]


def test_columns_and_filters_are_pushed_down_in_each_form(root: Path) -> None:
    found = _runs(root)
    whole = load_table(found, "messages")
    delivered = whole[whole["state"] == "delivered"]
    narrow = load_table(found, "messages", columns=["latency"],
                        filter=pc.field("state") == "delivered")
    assert list(narrow.columns) == ["run", "repetition", "seed", "latency", KEY]
    assert len(narrow) == len(delivered) > 0
    assert narrow["latency"].sum() == pytest.approx(delivered["latency"].sum())
    as_dict = load_table(found, "messages", columns=["state"],
                         filter={"state": ["lost", "filtered"], KEY: 12.5})
    expected = whole[whole["state"].isin(["lost", "filtered"]) & (whole[KEY] == 12.5)]
    assert len(as_dict) == len(expected) > 0 and set(as_dict["run"]) == {found[1].id}
    as_tuples = load_table(found, "messages", columns=["latency"],
                           filter=[("latency", ">", 0.02)])
    assert len(as_tuples) == int((whole["latency"] > 0.02).sum())
    ored = filter_expression([[("seed", "==", 1)], [(KEY, "==", 4.0)]])
    assert set(load_table(found, "messages", filter=ored)["run"]) == {found[0].id}


def test_arrow_keeps_the_units_and_a_run_is_read_alone_the_same_way(root: Path) -> None:
    found = _runs(root)
    table = load_table(found, "links", arrow=True)
    assert isinstance(table, pa.Table)
    assert units_of(table.schema) == {**UNITS["links"], KEY: "1/s"}
    run = found[0]
    lost = run.table("messages", columns=["id", "lost"], filter={"lost": True})
    assert list(lost.columns) == ["id", "lost"] and lost["lost"].all()
    assert len(lost) == int(run.messages["lost"].sum())
    alone = run.table("nodes", arrow=True)
    assert alone.schema.field("memory").metadata == {b"unit": b"B"}


def test_bad_columns_and_filters_say_what_the_table_has(root: Path) -> None:
    found = _runs(root)
    with pytest.raises(ValueError, match=r"messages table of 2 run\(s\) has no column 'nope'"):
        load_table(found, "messages", columns=["nope"])
    with pytest.raises(ValueError, match="filter .*nope.*its columns are run, repetition"):
        load_table(found, "messages", filter={"nope": 1})
    with pytest.raises(ValueError, match=r"\(column, op, value\)"):
        load_table(found, "messages", filter=[("latency", "~", 1)])
    with pytest.raises(TypeError, match="a pyarrow compute expression"):
        load_table(found, "messages", filter="latency > 1")
    with pytest.raises(KeyError, match="no table 'message'"):
        load_table(found, "message")


def test_a_run_without_messages_is_refused_and_no_runs_give_the_empty_schema(
        root: Path, tmp_path: Path) -> None:
    experiment = load("quickstart", overrides=["run.duration=1s", "record.messages=none",
                                                   "plots=[]"])
    (outcome,) = run_experiment(experiment, tmp_path, sweep_id="none")
    with pytest.raises(NotRecorded, match="record.messages"):
        load_table([*_runs(root), Run(outcome.folder)], "messages")
    empty = load_table([], "migrations", arrow=True)
    assert empty.num_rows == 0
    assert empty.schema.names == ["run", "repetition", "seed", *TABLES["migrations"].names]
    assert load_table([Run(outcome.folder)], "nodes")["run"].nunique() == 1
    assert empty.schema.field("run").type == pa.string()


def test_each_file_carries_its_run_and_units_and_the_points_theirs(root: Path) -> None:
    found = _runs(root)
    path = found[1].folder / "messages.parquet"
    schema = pq.read_schema(path)
    facts = json.loads(schema.metadata[FILE_FACTS.encode()])
    assert facts["point"] == {KEY: "12.5/s"} and facts["table"] == "messages"
    assert json.loads(schema.metadata[FILE_UNITS.encode()]) == UNITS["messages"]
    assert schema.field("latency").metadata == {b"unit": b"s"}
    assert schema.field("state").metadata is None
    written = points.write([r.folder for r in found], root / "points")
    table = pq.read_table(written)
    assert units_of(table.schema)[KEY] == "1/s"
    assert units_of(table.schema)["latency_p95_high"] == "s"
    assert units_of(table.schema)["throughput"] == "1/s"
    assert "delivered" not in units_of(table.schema)
    sweep = json.loads(table.schema.metadata[points.POINTS_FACTS.encode()])
    assert sweep["experiment"] == "quickstart" and sweep["keys"] == [KEY]
    assert [r["run"] for r in sweep["runs"]] == [r.id for r in found]
    assert table.column(KEY).to_pylist() == [4.0, 12.5]


@pytest.mark.parametrize(("key", "typed", "unit"), [
    ("workload.streams.0.rate", 12.5, "1/s"), ("topology.links.1.bandwidth", 8e4, "bit/s"),
    ("pipeline.0.cost", 0.01, "s"), ("pipeline.filter.cost", 0.01, "s"),
    ("workload.streams.0.size", 50_000, "B"), ("topology.profiles.pi.clock", 1.5e9, "Hz"),
    ("pipeline.0.selectivity", 0.95, None), ("run.seed", 5, None),
    ("pipeline.0.on", "gateways", None), ("workload.streams.0.rate", "12.5/s", None)])
def test_a_swept_values_unit_is_its_fields_in_the_schema(key, typed, unit) -> None:
    assert value_unit(key, typed) == unit


def _block(marker: str) -> str:
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
               if marker in block]
    return code


def _foglab_rows(root: Path) -> dict[str, tuple[int, int]]:
    frame = load_table(_runs(root), "messages", columns=["state"])
    return {run: (len(rows), int((rows["state"] == "delivered").sum()))
            for run, rows in frame.groupby("run", observed=True)}


def test_the_docs_duckdb_reading_gives_foglabs_rows_per_run(root: Path, monkeypatch) -> None:
    monkeypatch.chdir(root)
    namespace: dict = {}
    exec(compile(_block("import duckdb"), str(PAGE), "exec"), namespace)  # noqa: S102
    per_run = namespace["per_run"]
    assert {row.run: (row.messages, row.delivered) for row in per_run.itertuples()} == \
        _foglab_rows(root)
    facts = namespace["facts"]
    assert list(facts["run"]) == [r.id for r in _runs(root)]
    assert [json.loads(p) for p in facts["point"]] == [{KEY: "4/s"}, {KEY: "12.5/s"}]
    assert list(facts["seed"]) == [r.manifest["seed"] for r in _runs(root)]
    assert json.loads(namespace["units"]) == UNITS["messages"]
    medians = load_table(_runs(root), "messages", columns=["latency"],
                         filter={"state": "delivered"}).groupby("run", observed=True).median(
                             numeric_only=True)["latency"]
    assert dict(zip(per_run["run"], per_run["latency_p50_s"], strict=True)) == pytest.approx(
        medians.to_dict())


def test_the_docs_polars_reading_gives_foglabs_rows_per_run(root: Path, monkeypatch) -> None:
    monkeypatch.chdir(root)
    namespace: dict = {}
    exec(compile(_block("import polars"), str(PAGE), "exec"), namespace)  # noqa: S102
    per_run = namespace["per_run"]
    assert {row["run"]: (row["messages"], row["delivered"])
            for row in per_run.iter_rows(named=True)} == _foglab_rows(root)
    assert namespace["facts"]["point"] == {KEY: "4/s"}
    assert namespace["units"] == UNITS["messages"]
