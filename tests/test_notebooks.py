"""The notebooks run from top to bottom, their own assertions hold, every cell that plots shows
its figure, and they leave nothing behind in the temporary folder."""

import json
import re
from pathlib import Path

import nbformat
import papermill
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
# Images each notebook shows when it runs (at least one per cell that plots, below).
IMAGES = {"quickstart": 1, "thesis-migration": 1, "sim-vs-emu": 3, "hybrid-mobility": 3,
          "faults": 4, "lesson-placement": 1, "lesson-brokers": 2, "lesson-mobility": 1,
          "lesson-migration": 2, "lesson-energy": 1, "lesson-jobs": 1, "placement-vrgame": 1}
# A call that draws: pyplot, seaborn's plotting functions, or an Axes' or frame's plot.
PLOTTING = re.compile(r"\bplt\.(?!rc)|\bsns\.(?!set_)\w+\(|\.plot\(")
# Run after the notebook, in its kernel: what its figures say, for what the images cannot show.
PROBES = {"thesis-migration": ("print(ch5_figure.get_suptitle())",
                               "the model's event rates are scaled down 10x"),
          "hybrid-mobility": ("print('people handed over and moved:', "
                              "bool((table.loc[['handovers', 'migrations']] > 0).all(None)))",
                              "people handed over and moved: True"),
          "faults": ("print('silent with recovery, without (s):', "
                     "round(silence['with recovery']), round(silence['without recovery']))",
                     "silent with recovery, without (s): 2 30"),
          # ... and the exercise's latencies in ms, as the tables above it.
          "lesson-placement": ("print('edge/cloud WAN bytes:', wan_ratio.round(2).tolist(), "
                               "[c for c in trial_table.columns if 'latency' in c])",
                               "edge/cloud WAN bytes: [0.2, 0.2] "
                               "['latency p50 ms', 'latency p95 ms']"),
          "lesson-brokers": ("print('kafka-like teeth (ms):', "
                             "[round(v) for v in table.xs('kafka-like')['max']])",
                             "kafka-like teeth (ms): [1, 100, 404]"),
          "lesson-mobility": ("print('a migration per handover:', len(moves) == len(handed) > 0)",
                              "a migration per handover: True"),
          "lesson-energy": ("print('edge/cloud WAN joules:', round(wan, 1))",
                            "edge/cloud WAN joules: 0.2"),
          "lesson-migration": ("print('downtime (s):', table['downtime'].round(1).tolist())",
                               "downtime (s): [2.0, 2.0, 0.0]"),
          "placement-vrgame": ("print('edge-ward/cloud-only network:', (network['edge-ward'] "
                               "/ network['cloud-only']).round(1).tolist())",
                               "edge-ward/cloud-only network: [0.1, 0.1]")}


def execute(path: Path, cwd: Path) -> nbformat.NotebookNode:
    notebook = nbformat.read(path, as_version=4)
    if path.stem in PROBES:
        notebook.cells.append(new_code_cell(PROBES[path.stem][0]))
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors[0].get("evalue")
    return notebook


def images(cell: nbformat.NotebookNode) -> int:
    return sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


def stdout(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


@pytest.fixture
def private_temp(tmp_path, monkeypatch) -> Path:
    """A temporary folder of the kernel's own (its tempfile follows TMPDIR), empty at start;
    the kernel runs the notebooks' test mode (their quick mode, with the fewest runs that
    still draw every figure and hold every assertion)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setenv("FOGLAB_QUICK", "test")
    return temp


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_shows_its_figures_and_cleans_up(path, tmp_path, private_temp,
                                                       monkeypatch):
    monkeypatch.delenv("FOGLAB_RESULTS", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    notebook = execute(path, cwd)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    silent = [i for i, c in enumerate(notebook.cells)
              if c.cell_type == "code" and PLOTTING.search(c.source) and not images(c)]
    assert not silent, f"cells {silent} of {path.name} plot but show no image"
    assert sum(images(c) for c in code) == IMAGES[path.stem]
    if path.stem in PROBES:
        assert PROBES[path.stem][1] in stdout(code[-1])
    assert "removed" in stdout(code[-2 if path.stem in PROBES else -1])
    # Its parameters first (papermill's cell), then its results in the temporary folder,
    # which the notebook removed.
    assert code[0].metadata.get("tags") == ["parameters"]
    assert "results in " + str(private_temp) in stdout(code[1])
    assert sorted(p.name for p in private_temp.iterdir()) == []
    assert sorted(p.name for p in cwd.iterdir()) == []


@pytest.mark.slow
def test_quickstart_keeps_its_results_in_the_folder_the_user_chose(tmp_path, private_temp,
                                                                   monkeypatch):
    chosen = tmp_path / "mine"
    monkeypatch.setenv("FOGLAB_RESULTS", str(chosen))
    notebook = execute(NOTEBOOKS[[p.stem for p in NOTEBOOKS].index("quickstart")], tmp_path)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert f"the results stay in {chosen}" in stdout(code[-1])
    assert len(list(chosen.glob("quickstart/*/messages.parquet"))) == 3  # the sweep's 3 rates
    assert sorted(p.name for p in private_temp.iterdir()) == []


@pytest.mark.slow
def test_papermill_runs_quickstart_with_the_parameters_given(tmp_path, private_temp):
    """papermill injects `duration` and `results_folder` after the tagged cell, as
    `papermill notebooks/quickstart.ipynb out.ipynb -p duration 20s` does: the runs take 20 s,
    not the notebook's 2 minutes, and stay in the folder given."""
    kept = tmp_path / "kept"
    papermill.execute_notebook(
        str(NOTEBOOKS[[p.stem for p in NOTEBOOKS].index("quickstart")]),
        str(tmp_path / "out.ipynb"), parameters={"duration": "20s", "results_folder": str(kept)},
        cwd=str(tmp_path), kernel_name="python3", progress_bar=False)
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and 'duration = "20s"' in injected[0].source
    manifests = [json.loads(p.read_text()) for p in kept.glob("quickstart/*/manifest.json")]
    assert len(manifests) == 3  # the sweep's three rates
    assert {m["config"]["run"]["duration"] for m in manifests} == {20.0}
    assert f"the results stay in {kept}" in stdout([c for c in executed.cells
                                                     if c.cell_type == "code"][-1])
    assert sorted(p.name for p in private_temp.iterdir()) == []


def test_every_notebook_has_its_image_count() -> None:
    assert {p.stem for p in NOTEBOOKS} == set(IMAGES)
