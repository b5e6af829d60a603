"""`import foglab`: the Python facade over the experiment layer (experiments/foglab, installed
as the package `foglab`), and `python -m foglab`, the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import foglab
from topologies.errors import SpecError

QUICK = ["run.duration=2s", "run.drain=1s"]


def test_foglab_is_the_facade_in_experiments_and_python_m_foglab_is_the_command_line() -> None:
    assert Path(foglab.__file__).parent == Path(__file__).parents[2] / "experiments" / "foglab"
    shown = subprocess.run([sys.executable, "-m", "foglab", "--help"], capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0 and "Usage: python -m foglab" in shown.stdout
    listed = subprocess.run([sys.executable, "-m", "foglab", "list"], capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0 and "quickstart" in listed.stdout


def test_run_gives_the_summary_and_the_tables_of_its_runs(tmp_path) -> None:
    result = foglab.run("quickstart", set=QUICK, out=tmp_path)
    assert result.ok and result.errors == []
    (run,) = result.runs
    assert run.folder.parent.parent == tmp_path
    summary = result.summary
    assert len(summary) == 1 and summary.loc[0, "run"] == run.id
    messages = result.table("messages")
    delivered = int((messages["state"] == "delivered").sum())
    assert delivered == summary.loc[0, "delivered"] > 0
    assert (messages["run"] == run.id).all()
    arrow = result.table("messages", arrow=True)
    assert isinstance(arrow, pa.Table) and arrow.num_rows == len(messages)


def test_a_sweep_runs_each_point_and_results_reads_them_back(tmp_path, monkeypatch) -> None:
    result = foglab.run("quickstart", set=QUICK, sweep=["run.seed=[1, 2]"], out=tmp_path)
    assert result.ok and len(result.outcomes) == 2
    assert sorted(result.summary["seed"]) == [1, 2]
    monkeypatch.setenv("FOGLAB_RESULTS", str(tmp_path))  # the folder when none is given
    stored = foglab.results()
    assert [r.id for r in stored.runs("quickstart")] == [r.id for r in result.runs]
    assert len(stored.summary("quickstart")) == 2
    assert stored.run(result.runs[1].id).folder == result.runs[1].folder
    assert set(stored.table("nodes", "quickstart")["run"]) == {r.id for r in result.runs}


def test_compare_sets_two_runs_figure_by_figure(tmp_path) -> None:
    first = foglab.run("quickstart", set=QUICK, out=tmp_path).runs[0]
    second = foglab.run("quickstart", set=[*QUICK, "run.seed=9"], out=tmp_path).runs[0]
    comparison = foglab.compare(first, second.id, root=tmp_path)
    delivered = comparison.figure("delivered")
    assert set(delivered.values) == set(comparison.backends) and len(comparison.backends) == 2
    frame = foglab.comparison_frame(comparison)
    assert "delivered" in set(frame["figure"])
    assert frame.loc[frame["figure"] == "delivered", comparison.backends[0]].item() == \
        delivered.values[comparison.backends[0]]
    with pytest.raises(ValueError, match="both runs"):
        foglab.compare(first, first.folder)


def test_bad_input_raises_the_spec_error_naming_the_field() -> None:
    with pytest.raises(SpecError) as caught:
        foglab.load("quickstart", set=["run.duration=-3s"])
    assert caught.value.path[:2] == ("run", "duration")
    loaded = foglab.load("quickstart", set=QUICK)
    with pytest.raises(ValueError, match="runs as it was loaded"):
        foglab.run(loaded, set=["run.seed=2"])


def test_the_docs_example_runs_as_written(tmp_path, monkeypatch) -> None:
    """docs/results.md's `import foglab` example, taken from the page."""
    import re

    page = (Path(__file__).parents[2] / "docs" / "results.md").read_text()
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", page, re.S)
               if "import foglab" in block]
    monkeypatch.setenv("FOGLAB_RESULTS", str(tmp_path))
    namespace: dict = {}
    exec(compile(code, "docs/results.md", "exec"), namespace)  # noqa: S102 - the page's code
    assert len(namespace["figures"]) == 2 and namespace["result"].ok
    assert set(namespace["comparison"].backends) == {r.id for r in namespace["result"].runs}


def test_the_docs_reading_without_foglab_runs_and_tells_runs_apart(tmp_path, monkeypatch) -> None:
    """docs/results.md's pyarrow example, on a sweep of two seeds: each file names its run."""
    import re

    foglab.run("quickstart", set=QUICK, sweep=["run.seed=[1, 2]"], out=tmp_path / "results")
    page = (Path(__file__).parents[2] / "docs" / "results.md").read_text()
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", page, re.S)
               if "pyarrow.dataset" in block]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "docs/results.md", "exec"), namespace)  # noqa: S102 - the page's code
    facts = namespace["facts"]
    assert sorted(f["seed"] for f in facts) == [1, 2]
    assert {f["experiment"] for f in facts} == {"quickstart"} and facts[0]["table"] == "messages"
    assert namespace["delivered"].num_rows > 0
