"""record.messages: the per-message table whole, sampled or not written; the summary of all."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from experiments.cli import app
from experiments.compare import BrokenRun, compare, read_run
from experiments.loader import load
from experiments.plots import latency_plot
from experiments.results import NotRecorded, kept, load_run, load_table, runs, sampled
from experiments.runner import run_experiment
from topologies.errors import SpecError

SHORT = ["run.duration=40s", "plots=[]"]


def _run(root: Path, record: str, seed: int = 7) -> Path:
    experiment = load("quickstart", [*SHORT, f"record.messages={record}", f"run.seed={seed}"])
    (outcome,) = run_experiment(experiment, root)
    assert outcome.error is None, outcome.error
    return outcome.folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("record")
    return {"all": _run(root / "all", "all"), "30%": _run(root / "a", "30%"),
            "30% again": _run(root / "b", "0.3"), "none": _run(root / "none", "none")}


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text(encoding="utf-8"))


def test_the_summary_is_of_every_message_whatever_is_recorded(folders) -> None:
    whole = _summary(folders["all"])
    assert whole["delivered"] > 100
    assert _summary(folders["30%"]) == whole
    assert _summary(folders["none"]) == whole


def test_a_sample_keeps_about_its_fraction_of_the_readings(folders) -> None:
    every = pq.read_table(folders["all"] / "messages.parquet").to_pandas()
    sample = pq.read_table(folders["30%"] / "messages.parquet").to_pandas()
    share = sample["id"].nunique() / every["id"].nunique()
    assert 0.25 < share < 0.35, share
    # the rows kept are the full table's rows, unchanged
    merged = sample.merge(every, on=list(every.columns), how="left", indicator=True)
    assert (merged["_merge"] == "both").all()
    record = json.loads((folders["30%"] / "manifest.json").read_text())["record"]
    assert record == {"messages": 0.3, "rows": len(sample), "of": len(every)}
    assert kept(np.arange(200_000), 0.01).mean() == pytest.approx(0.01, abs=0.002)


def test_the_same_seed_keeps_the_same_rows(folders) -> None:
    first = pq.read_table(folders["30%"] / "messages.parquet")
    assert first.equals(pq.read_table(folders["30% again"] / "messages.parquet"))


def test_every_copy_of_a_reading_goes_together() -> None:
    ids = np.repeat(np.arange(5_000), 3)  # a reading delivered to three sinks
    table = pa.table({"id": pa.array(ids, pa.int64()), "sink": np.tile([0, 1, 2], 5_000)})
    counts = sampled(table, 0.2).to_pandas().groupby("id").size()
    assert (counts == 3).all() and 800 < len(counts) < 1200


def test_none_writes_no_messages_table(folders) -> None:
    assert not (folders["none"] / "messages.parquet").exists()
    assert (folders["none"] / "nodes.parquet").exists()
    manifest = json.loads((folders["none"] / "manifest.json").read_text())
    assert manifest["record"]["messages"] == "none" and manifest["record"]["rows"] == 0
    assert manifest["record"]["of"] > 100


def test_readers_refuse_a_run_without_its_messages_in_one_line(folders) -> None:
    folder = folders["none"]
    for read in (lambda: load_run(folder).messages,
                 lambda: load_table(runs(folder.parent.parent), "messages"),
                 lambda: latency_plot(folder)):
        with pytest.raises(NotRecorded) as refused:
            read()
        text = str(refused.value)
        assert str(folder) in text and "record.messages" in text and "\n" not in text
    with pytest.raises(BrokenRun, match="record.messages"):
        read_run(folder)
    # the other tables still load
    assert len(load_table(runs(folder.parent.parent), "nodes")) > 0
    result = CliRunner().invoke(app, ["compare", str(folders["all"]), str(folder)],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 1 and "record.messages" in result.output
    assert "Traceback" not in result.output


def test_readers_say_a_sampled_table_is_a_sample(folders, tmp_path: Path) -> None:
    plot = latency_plot(folders["30%"], tmp_path / "latency.png")
    assert plot.path.exists() and plot.delivered > 0
    result = compare({"sim": read_run(folders["all"]), "sample": read_run(folders["30%"])},
                     reference="sim", targets={})
    assert any("sample: " in n and "30 % sample" in n for n in result.notes), result.notes
    whole = compare({"sim": read_run(folders["all"]), "also": read_run(folders["all"])},
                    reference="sim", targets={})
    assert not any("sample" in n for n in whole.notes)


def test_a_latency_plot_without_messages_is_refused_at_validation() -> None:
    with pytest.raises(SpecError) as refused:
        load("quickstart", ["record.messages=none"])  # the file asks for plots: [latency]
    assert refused.value.path == ("plots",) and "record.messages" in str(refused.value)
    result = CliRunner().invoke(app, ["validate", "quickstart", "--set", "record.messages=none"])
    assert result.exit_code == 3 and "plots" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("value", ["0%", "150%", "some", "2", "-0.1"])
def test_a_bad_record_setting_names_the_field(value: str) -> None:
    with pytest.raises(SpecError) as refused:
        load("quickstart", [*SHORT, f"record.messages={value}"])
    assert refused.value.path[:2] == ("record", "messages"), refused.value.path


def test_record_is_written_as_a_fraction_or_a_percentage() -> None:
    spec = load("quickstart", [*SHORT, "record.messages=1%"]).spec
    assert spec.record.messages == 0.01
    assert load("quickstart", SHORT).spec.record.messages == "all"
