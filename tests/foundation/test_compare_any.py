"""`foglab compare` of any two runs or configurations: two run folders or ids, and one
experiment run again with `--against` (two seeds, calibrated against not); the second is read
against the first, without the model-against-emulation targets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments import compare as comparing
from experiments.cli import app
from experiments.loader import load
from experiments.runner import run_experiment


def foglab(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False, env={"COLUMNS": "250"})


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    root = tmp_path_factory.mktemp("results")
    folders = []
    for seed in (7, 8):
        (outcome,) = run_experiment(load("quickstart", overrides=[
            "run.duration=3s", f"run.seed={seed}"]), root, sweep_id=f"seed{seed}")
        folders.append(outcome.folder)
    return root, folders


def test_two_runs_by_id_are_compared_the_second_against_the_first(two_seeds) -> None:
    root, (first, second) = two_seeds
    result = foglab("compare", first.name, second.name, "--out", str(root))
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert f"quickstart: {first.name} vs {second.name} (changes against {first.name})" in output
    assert "the second run differs from the first in: seed: 7 -> 8" in output
    assert "target" not in output  # the emulation's targets are not a seed's
    (written,) = root.glob("quickstart/*-compare/comparison.json")
    comparison = json.loads(written.read_text())
    assert comparison["reference"] == first.name
    delivered = next(f for f in comparison["figures"] if f["key"] == "delivered")
    a, b = delivered["values"][first.name], delivered["values"][second.name]
    assert delivered["errors"][second.name] == pytest.approx((b - a) / a)
    assert delivered["target"] is None


def test_two_run_folders_work_as_ids_do(two_seeds) -> None:
    root, (first, second) = two_seeds
    result = foglab("compare", str(first), str(second), "--out", str(root))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("args", "message"), [
    (["a", "b", "c"], "compare takes one experiment or two runs, got 3: a b c"),
    (["nothing", "SECOND"], "nothing is not a run folder (no manifest.json), nor a run id"),
    (["FIRST", "FIRST"], "are the same run: name two runs to compare"),
    (["FIRST", "SECOND", "--set", "run.seed=1"], "--set: two runs already made are compared"),
    (["quickstart", "--against", "run.seed=3", "--backends", "sim,emu"],
     "--backends: with --against both runs are on the experiment's backend"),
])
def test_mistakes_are_refused_in_one_line(two_seeds, args: list[str], message: str) -> None:
    root, (first, second) = two_seeds
    args = [{"FIRST": first.name, "SECOND": second.name}.get(a, a) for a in args]
    result = foglab("compare", *args, "--out", str(root))
    assert result.exit_code == 3
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_one_experiment_against_itself_with_another_seed(tmp_path: Path) -> None:
    result = foglab("compare", "quickstart", "--set", "run.duration=3s", "--against",
                    "run.seed=8", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "quickstart: run.seed=7 vs run.seed=8 (changes against run.seed=7)" in output
    assert "the second run differs from the first in: seed: 7 -> 8" in output
    assert len(list(tmp_path.glob("quickstart/*-first-p0-r0"))) == 1
    assert len(list(tmp_path.glob("quickstart/*-second-p0-r0"))) == 1


def test_differences_name_each_changed_field() -> None:
    first = {"backend": "sim", "seed": 7, "config": {"run": {"seed": 7, "calibration": None},
                                                      "pipeline": [{"cost": 0.001}]}}
    second = {"backend": "sim", "seed": 7, "config": {"run": {"seed": 7, "calibration": "x"},
                                                       "pipeline": [{"cost": 0.002}]}}
    assert comparing.differences(first, second) == [
        "pipeline.0.cost: 1ms -> 2ms", "run.calibration: None -> x"]
    assert comparing.differences(first, first) == []
    assert comparing.labels("a", "a") == ("1: a", "2: a")
