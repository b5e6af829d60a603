"""`foglab` commands that take what a user has: topo show/draw of any experiment (its topology
inline or named), results show by the ids `results list` prints, `foglab list`, `--version`."""

from __future__ import annotations

import json
import os
import re
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.catalog import entries, names
from experiments.cli import app

PNG = b"\x89PNG\r\n\x1a\n"


def foglab(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def test_the_catalog_has_experiments_with_inline_topologies() -> None:
    inline = {e.name for e in entries("experiment") if e.topology == "inline"}
    assert {"migrate-parallel", "recovery", "broadcast-tree", "hybrid-mobility"} <= inline
    named = {e.name: e.topology for e in entries("experiment") if e.topology != "inline"}
    assert named["quickstart"] == "smart-city"


@pytest.mark.parametrize("experiment", names("experiment"))
def test_topo_show_takes_every_catalog_experiment(experiment: str) -> None:
    result = foglab("topo", "show", experiment)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "links (" in result.output


def test_topo_show_of_an_experiment_is_its_topology_with_its_changes() -> None:
    plain = foglab("topo", "show", "smart-city").output
    assert foglab("topo", "show", "quickstart").output == plain
    # a --set on the experiment's topology shows in the links
    changed = foglab("topo", "show", "quickstart", "--set", "topology.links.1.latency=35ms")
    assert changed.exit_code == 0, changed.output
    assert "35 ms" in changed.output and "35 ms" not in plain


def test_topo_show_and_draw_take_an_experiment_file(tmp_path: Path) -> None:
    source = Path(__file__).parents[2] / "experiments" / "migrate-parallel.yaml"
    mine = tmp_path / "mine.yaml"
    mine.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    shown = foglab("topo", "show", str(mine))
    assert shown.exit_code == 0, shown.output
    assert "gw-1" in shown.output or "gw" in shown.output
    out = tmp_path / "mine.png"
    drawn = foglab("topo", "draw", str(mine), "--out", str(out))
    assert drawn.exit_code == 0, drawn.output
    assert out.read_bytes()[:8] == PNG
    # a topology file is still read as one
    topology = Path(__file__).parents[2] / "topologies" / "smart-city.yaml"
    assert foglab("topo", "show", str(topology)).output == foglab("topo", "show",
                                                                  "smart-city").output


def test_an_experiment_file_with_an_error_names_its_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntopology: smart-city\nworkload: city-sensors\n"
                   "pipeline: [{name: s, on: cloud-1, reads: city}]\n"
                   "run: {duration: 10 parsecs}\n")
    result = foglab("topo", "show", str(bad))
    assert result.exit_code == 3
    assert f"{bad}:5" in result.output and "run.duration" in result.output


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder with a sweep of two quickstart runs, made where the CLI looks."""
    root = tmp_path_factory.mktemp("ids")
    here = Path.cwd()
    os.chdir(root)
    try:
        made = foglab("run", "quickstart", "--set", "run.duration=2s",
                      "--sweep", "run.seed=[1,2]")
    finally:
        os.chdir(here)
    assert made.exit_code == 0, made.output
    return root


def _runs(root: Path) -> list[Path]:
    return sorted(p.parent for p in (root / "results" / "quickstart").glob("*/manifest.json"))


def test_results_show_takes_the_ids_results_list_prints(two_runs: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(two_runs)
    listing = foglab("results", "list").output
    folders = _runs(two_runs)
    assert len(folders) == 2
    for folder in folders:
        assert folder.name in listing
        seed = json.loads((folder / "manifest.json").read_text())["seed"]
        for given in (folder.name, f"quickstart/{folder.name}", str(folder)):
            shown = foglab("results", "show", given)
            assert shown.exit_code == 0, shown.output
            assert any(line.split() == ["seed", str(seed)] for line in shown.output.splitlines())


def test_a_run_id_two_experiments_share_is_refused_naming_both(
        two_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _runs(two_runs)[0]
    twin = tmp_path / "results" / "other" / folder.name
    twin.mkdir(parents=True)
    (twin / "manifest.json").write_bytes((folder / "manifest.json").read_bytes())
    (tmp_path / "results" / "quickstart").symlink_to(folder.parent)
    monkeypatch.chdir(tmp_path)
    result = foglab("results", "show", folder.name)
    assert result.exit_code == 3
    assert f"other/{folder.name}" in result.output
    assert f"quickstart/{folder.name}" in result.output
    assert foglab("results", "show", f"other/{folder.name}").exit_code == 0


def test_version_names_the_package_and_its_revision() -> None:
    result = foglab("--version")
    assert result.exit_code == 0
    line = result.output.strip()
    assert re.fullmatch(rf"foglab {re.escape(metadata.version('foglab'))}"
                        r"( \(git [0-9a-f]{40}(-dirty)?\))?", line), line


def test_list_shows_each_catalog_entry_on_one_line() -> None:
    result = foglab("list")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for kind in ("experiment", "topology", "workload"):
        for entry in entries(kind):
            (line,) = [x for x in lines if x.split()[:1] == [entry.name]]
            assert entry.description[:40] in line
            if kind == "experiment":
                assert line.split()[1:3] == [entry.topology, entry.backend]
    assert entries("experiment")[0].description  # every shipped file describes itself
    backends = {e.name: e.backend for e in entries("experiment")}
    assert backends["quickstart"] == "sim" and backends["broadcast-tree-emu"] == "emu"
    only = foglab("list", "topologies").output
    assert "smart-city" in only and "quickstart" not in only


def test_results_list_says_when_it_finds_no_runs(two_runs: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(two_runs)
    result = foglab("results", "list", "--experiment", "nosuch")
    assert result.exit_code == 0
    assert result.output.strip() == ("no runs under results of nosuch; experiments with "
                                     "runs: quickstart")


@pytest.mark.parametrize(("text", "said"), [
    ("name: t\nnodes: [{name: gw, kind: gateway, speeed: 3}]\nlinks: []\n",
     ":2: nodes[0].speeed: no such field here"),
    ("name: t\nnodes: 3\nlinks: []\n", ":2: nodes: "),
    ("- a\n- b\n", ":1: (top level): a topology: a mapping with name, nodes and links"),
])
def test_a_bad_topology_file_names_its_line_and_field(text: str, said: str,
                                                      tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text, encoding="utf-8")
    result = foglab("topo", "show", str(path))
    assert result.exit_code == 3
    assert result.output.startswith(f"error: {path}{said}"), result.output
    assert len(result.output.strip().splitlines()) == 1
