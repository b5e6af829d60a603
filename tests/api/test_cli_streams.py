"""The command line for scripts: results on stdout and messages on stderr, one JSON document
with --json (also when a command fails), -q, exit codes with one meaning each, FOGLAB_RESULTS
for every results folder, and shell completion that offers the commands without importing
the heavy ones (docs/cli.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from experiments import results as stored
from experiments.cli import app
from experiments.cli_options import RESULTS_VARIABLE
from experiments.lazy_commands import LAZY
from topologies.exit_codes import ExitCode

PROJECT = Path(__file__).resolve().parents[2]
QUICK = ["--set", "run.duration=2s", "--set", "run.drain=1s"]


def foglab(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


def document(result) -> dict:
    """The one JSON document a --json command printed: stdout is that and nothing else."""
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> tuple[Path, dict]:
    """quickstart run once with --json: (its results folder, its document)."""
    root = tmp_path_factory.mktemp("results")
    result = foglab("run", "quickstart", *QUICK, "--out", str(root), "--json")
    assert result.exit_code == 0, result.output
    return root, document(result)


def test_an_error_goes_to_stderr_and_leaves_stdout_empty() -> None:
    result = foglab("schema", "--kind", "nope")
    assert result.exit_code == ExitCode.BAD_INPUT == 3
    assert result.stdout == ""
    assert result.stderr.startswith("error: --kind: expected one of experiment")


def test_run_json_is_one_document_with_each_run(ran) -> None:
    root, shown = ran
    assert shown["ok"] is True and shown["exit_code"] == 0
    assert shown["experiment"] == "quickstart" and shown["backend"] == "sim"
    (only,) = shown["runs"]
    assert only["status"] == "ok" and only["summary"]["delivered"] > 0
    assert Path(only["folder"]).parent == root / "quickstart"


def test_run_without_json_prints_the_table_on_stdout_and_notes_on_stderr(tmp_path) -> None:
    result = foglab("run", "quickstart", *QUICK, "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "delivered" in result.stdout and "results: " in result.stdout
    assert "delivered" not in result.stderr


def test_quiet_leaves_stderr_empty_on_a_run_that_goes_well(tmp_path) -> None:
    result = foglab("-q", "run", "quickstart", *QUICK, "--out", str(tmp_path), "--json")
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    assert document(result)["ok"] is True


def test_quiet_and_verbose_together_are_a_usage_error() -> None:
    assert foglab("-q", "-v", "list").exit_code == ExitCode.USAGE


@pytest.mark.parametrize("args, code, kind", [
    (["run", "nope-experiment"], 3, "bad-input"),
    (["validate", "quickstart", "--set", "run.seed=minus one"], 3, "bad-input"),
    (["list", "nonsense"], 3, "bad-input"),
    (["results", "show", "no-such-run"], 3, "bad-input"),
    (["compare", "a", "b", "c"], 3, "bad-input"),
    (["apply", "quickstart", "--against", "nope-experiment"], 3, "bad-input"),
    (["emu", "plan", "quickstart", "--hosts", "0"], 3, "bad-input"),
])
def test_a_failing_json_command_still_prints_one_document(args, code, kind, tmp_path) -> None:
    result = foglab(*args, "--json", env={RESULTS_VARIABLE: str(tmp_path)})
    assert result.exit_code == code, result.output
    shown = document(result)
    assert shown["ok"] is False and shown["exit_code"] == code
    assert shown["error"]["kind"] == kind and shown["error"]["exit_code"] == code
    assert shown["error"]["message"] and shown["error"]["message"] in result.stderr


def test_emu_status_json_without_docker_is_a_failure_document(monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    result = foglab("emu", "status", "--json")
    assert result.exit_code == ExitCode.FAILURE
    shown = document(result)
    assert shown["error"]["kind"] == "failure" and "no Docker Engine" in shown["error"]["message"]


def test_validate_list_and_apply_json_answers() -> None:
    valid = document(foglab("validate", "quickstart", "--sweep", "run.seed=[1,2]", "--json"))
    assert valid["ok"] and valid["backends"] == ["sim"]
    assert [p["values"] for p in valid["points"]] == [{"run.seed": 1}, {"run.seed": 2}]
    listed = document(foglab("list", "experiments", "--json"))
    assert "quickstart" in {e["name"] for e in listed["experiments"]}
    assert "topologies" not in listed
    same = foglab("apply", "quickstart", "--against", "quickstart", "--json")
    assert same.exit_code == 0 and document(same)["changes"] is False


def test_emu_plan_json_has_the_figures_and_each_host() -> None:
    result = foglab("emu", "plan", "quickstart", "--hosts", "3", "--cores", "8", "--json")
    assert result.exit_code == 0, result.output
    shown = document(result)
    assert len(shown["hosts"]) == 3 and shown["figures"]


def test_results_folder_comes_from_foglab_results(ran) -> None:
    root, shown = ran
    listed = document(foglab("results", "list", "--json", env={RESULTS_VARIABLE: str(root)}))
    assert [run["folder"] for run in listed["runs"]] == [shown["runs"][0]["folder"]]
    run_id = listed["runs"][0]["id"]
    one = document(foglab("results", "show", run_id, "--json",
                          env={RESULTS_VARIABLE: str(root)}))
    assert one["folder"] == shown["runs"][0]["folder"] and one["summary"]["delivered"] > 0


def test_the_results_variable_is_the_libraries_own() -> None:
    assert RESULTS_VARIABLE == stored.RESULTS_VARIABLE


def test_every_exit_code_is_in_the_docs_table() -> None:
    text = (PROJECT / "docs" / "cli.md").read_text(encoding="utf-8")
    for code in ExitCode:
        assert re.search(rf"^\| {code.value} \| `{code.name}` \|", text, re.M), code


def test_the_lazy_commands_summaries_are_their_own_help() -> None:
    group = typer.main.get_command(app)
    for name, lazy in LAZY.items():
        command = group.get_command(None, name)
        assert " ".join(command.help.split()).startswith(lazy.summary.rstrip(".")), name


def complete(words: str) -> tuple[list[str], str]:
    """What a TAB after `words` offers (typer's bash protocol, as the installed script runs),
    and which heavy modules the process had imported by its end."""
    cword = len(words.split()) if words.endswith(" ") else len(words.split()) - 1
    probe = ("import atexit, sys; sys.argv[0] = 'foglab'\n"
             "atexit.register(lambda: sys.stderr.write(' '.join(m for m in ('pydantic', "
             "'pandas', 'experiments.loader', 'emu.cli.main') if m in sys.modules)))\n"
             "from experiments.entry import main; main()")
    done = subprocess.run([sys.executable, "-c", probe], cwd=PROJECT, capture_output=True,
                          text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "_FOGLAB_COMPLETE": "complete_bash",
                               "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    assert done.returncode == 0, done.stderr
    return done.stdout.split(), done.stderr.strip()


def test_tab_offers_the_commands_without_importing_them() -> None:
    offered, heavy = complete("foglab ")
    assert {"run", "validate", "results", "list", "compare", "apply", "emu"} <= set(offered)
    assert heavy == ""
    offered, heavy = complete("foglab res")
    assert offered == ["results"] and heavy == ""


def test_tab_offers_a_groups_commands() -> None:
    offered, heavy = complete("foglab results ")
    assert offered == ["list", "show"] and heavy == ""
    offered, _ = complete("foglab emu ")
    assert {"up", "down", "status", "plan"} <= set(offered)
