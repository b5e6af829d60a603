"""The `foglab` command line: run, validate, schema, topo and results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli import app

PNG = b"\x89PNG\r\n\x1a\n"
cli = CliRunner()


def foglab(*args: str):
    # a wide console, so that rich neither wraps messages nor shortens table cells
    return cli.invoke(app, list(args), catch_exceptions=False, env={"COLUMNS": "250"})


@pytest.fixture(scope="module")
def results_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("cli") / "out"
    result = foglab("run", "quickstart", "--set", "run.duration=20s", "--out", str(root))
    return root, result


def test_run_prints_a_summary_and_writes_results(results_root) -> None:
    root, result = results_root
    assert result.exit_code == 0, result.output
    assert "quickstart (sim)" in result.output
    for column in ("delivered", "lost", "p50 ms", "p99 ms"):
        assert column in result.output
    (folder,) = (root / "quickstart").iterdir()
    assert f"results: {folder}" in result.output
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "ok"
    assert manifest["config"]["run"]["duration"] == 20.0
    assert (folder / "messages.parquet").exists()
    assert (folder / "latency.png").read_bytes()[:8] == PNG


def test_validate_a_catalog_experiment() -> None:
    result = foglab("validate", "quickstart")
    assert result.exit_code == 0, result.output
    assert "valid" in result.output and "200 device" in result.output


def test_validate_counts_sweep_points() -> None:
    result = foglab("validate", "quickstart", "--sweep", "run.seed=[1,2,3]")
    assert result.exit_code == 0, result.output
    assert "3 sweep point(s)" in result.output


def test_a_bad_file_exits_2_with_the_error_and_runs_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntopology: smart-city\nworkload: city-sensors\n"
                   "pipeline: [{name: s, on: cloud-1, reads: city}]\n"
                   "run: {duration: 10 parsecs}\n")
    for command in ("run", "validate"):
        result = foglab(command, str(bad))
        assert result.exit_code == 2
        assert "error:" in result.output
        assert f"{bad}:5" in result.output and "run.duration" in result.output
        assert "parsecs" in result.output
    assert not (tmp_path / "results").exists()


def test_a_bad_set_option_exits_2_naming_it(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = foglab("run", "quickstart", "--set", "run.seed=minus one")
    assert result.exit_code == 2
    assert "--set run.seed=minus one" in result.output
    assert not (tmp_path / "results").exists()


def test_a_failed_run_exits_1_and_says_why(tmp_path: Path) -> None:
    result = foglab("run", "quickstart", "--set", "run.backend=hybrid", "--out", str(tmp_path))
    assert result.exit_code == 1
    assert "failed" in result.output and "not built yet" in result.output


def test_schema_prints_a_json_schema_of_the_experiment_file() -> None:
    result = foglab("schema")
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert {"topology", "workload", "pipeline", "run"} <= set(schema["properties"])
    assert set(schema["required"]) >= {"name", "topology", "workload", "pipeline", "run"}


def test_schema_of_a_topology_file_and_to_a_file(tmp_path: Path) -> None:
    out = tmp_path / "topology.schema.json"
    result = foglab("schema", "--kind", "topology", "--out", str(out))
    assert result.exit_code == 0
    assert {"nodes", "links", "profiles"} <= set(json.loads(out.read_text())["properties"])
    assert foglab("schema", "--kind", "nonsense").exit_code == 2


def test_topo_show_lists_groups_and_links() -> None:
    result = foglab("topo", "show", "smart-city")
    assert result.exit_code == 0, result.output
    for name in ("sensor", "gw-1", "gw-2", "gw-3", "gw-4", "broker-1", "cloud-1", "200",
                 "rpi4", "0.25 Mbit/s"):
        assert name in result.output


def test_topo_show_of_an_unknown_topology_exits_2() -> None:
    result = foglab("topo", "show", "atlantis")
    assert result.exit_code == 2
    assert "smart-city" in result.output


def test_topo_draw_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "x.png"
    result = foglab("topo", "draw", "smart-city", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == PNG


def test_results_list_and_show(results_root) -> None:
    root, _ = results_root
    (folder,) = (root / "quickstart").iterdir()
    listing = foglab("results", "list", "--root", str(root))
    assert listing.exit_code == 0
    assert "quickstart" in listing.output and "ok" in listing.output
    shown = foglab("results", "show", str(folder))
    assert shown.exit_code == 0
    assert "status       ok" in shown.output and "seed         7" in shown.output
    assert '"delivered"' in shown.output


def test_results_show_of_a_folder_that_is_not_a_run_exits_2(tmp_path: Path) -> None:
    result = foglab("results", "show", str(tmp_path))
    assert result.exit_code == 2
    assert "not a run folder" in result.output


def test_the_installed_command_runs() -> None:
    foglab_script = Path(sys.executable).parent / "foglab"
    done = subprocess.run([str(foglab_script), "validate", "quickstart"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "valid" in done.stdout
