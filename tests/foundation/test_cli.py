"""The `foglab` command line: run, validate, schema, topo and results."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli import app

PNG = b"\x89PNG\r\n\x1a\n"
MIGRATION = """
name: move
topology: thesis-azure
workload:
  name: events
  streams: [{name: events, sources: producer-*, rate: 100/s, arrivals: periodic, size: 100B}]
pipeline:
  - {name: count, task: passthrough, on: source, reads: events, cost: 5us, window: {size: 5s}}
scenario:
  migration: {strategy: pause_transfer, state_per_event: 84B, store: zookeeper}
  migrations: [{at: 10s, operator: count, to: target}]
run: {duration: 30s, seed: 3}
"""
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


def test_a_bad_file_exits_3_with_the_error_and_runs_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntopology: smart-city\nworkload: city-sensors\n"
                   "pipeline: [{name: s, on: cloud-1, reads: city}]\n"
                   "run: {duration: 10 parsecs}\n")
    for command in ("run", "validate"):
        result = foglab(command, str(bad))
        assert result.exit_code == 3
        assert "error:" in result.output
        assert f"{bad}:5" in result.output and "run.duration" in result.output
        assert "parsecs" in result.output
    assert not (tmp_path / "results").exists()


def test_a_bad_set_option_exits_3_naming_it(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = foglab("run", "quickstart", "--set", "run.seed=minus one")
    assert result.exit_code == 3
    assert "--set run.seed=minus one" in result.output
    assert not (tmp_path / "results").exists()


class _Broken:
    """A backend that fails, standing in for one whose run raises (the runner is under test)."""

    name = "sim"

    def run(self, plan, progress):
        raise RuntimeError("the backend broke [on purpose]")


def test_a_failed_run_exits_1_and_says_why(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("experiments.runner.backend", lambda name: _Broken())
    result = foglab("run", "quickstart", "--out", str(tmp_path))
    assert result.exit_code == 1
    assert "failed" in result.output
    assert "the backend broke [on purpose]" in result.output  # brackets shown as written


def test_hybrid_without_mobility_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    result = foglab("run", "quickstart", "--set", "run.backend=hybrid", "--out", str(tmp_path))
    assert result.exit_code == 3
    assert "--set run.backend=hybrid: run.backend" in result.output
    assert "has no scenario.mobility" in result.output
    assert list(tmp_path.iterdir()) == []


def test_schema_prints_a_json_schema_of_the_experiment_file() -> None:
    result = foglab("schema")
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert {"topology", "workload", "pipeline", "run"} <= set(schema["properties"])
    assert set(schema["required"]) >= {"name", "topology", "workload", "run"}
    assert {"required": ["pipeline"]} in schema["oneOf"]  # or jobs (docs/jobs.md)


def test_schema_of_a_topology_file_and_to_a_file(tmp_path: Path) -> None:
    out = tmp_path / "topology.schema.json"
    result = foglab("schema", "--kind", "topology", "--out", str(out))
    assert result.exit_code == 0
    assert {"nodes", "links", "profiles"} <= set(json.loads(out.read_text())["properties"])
    assert foglab("schema", "--kind", "nonsense").exit_code == 3  # bad input


def test_topo_show_lists_groups_and_links() -> None:
    result = foglab("topo", "show", "smart-city")
    assert result.exit_code == 0, result.output
    for name in ("sensor", "gw-1", "gw-2", "gw-3", "gw-4", "broker-1", "cloud-1", "200",
                 "rpi4", "0.25 Mbit/s"):
        assert name in result.output


def test_topo_show_of_an_unknown_topology_exits_3() -> None:
    result = foglab("topo", "show", "atlantis")
    assert result.exit_code == 3
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
    lines = shown.output.splitlines()
    assert any(line.split() == ["status", "ok"] for line in lines), shown.output
    assert any(line.split() == ["seed", "7"] for line in lines), shown.output
    assert '"delivered"' not in shown.output  # a table, not raw JSON
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    # the figures table by its column names (columns are two spaces or more apart)
    header = next(i for i, line in enumerate(lines) if "delivered" in line.split())
    figures = dict(zip(re.split(r"\s{2,}", lines[header].strip()),
                       lines[header + 2].split(), strict=True))
    assert figures["delivered"] == f"{summary['delivered']:,}"
    assert figures["lost"] == f"{summary['lost']:,}"
    assert figures["p50 ms"] == f"{summary['latency_s']['p50'] * 1000:.1f}"
    assert "migrations" not in shown.output  # the quickstart moves nothing


def test_results_show_lists_migrations_with_their_downtime(tmp_path: Path) -> None:
    experiment = tmp_path / "move.yaml"
    experiment.write_text(MIGRATION, encoding="utf-8")
    assert foglab("run", str(experiment), "--out", str(tmp_path / "out")).exit_code == 0
    (folder,) = (tmp_path / "out" / "move").iterdir()
    shown = foglab("results", "show", str(folder))
    assert shown.exit_code == 0
    (moved,) = json.loads((folder / "summary.json").read_text(encoding="utf-8"))["migrations"]
    row = next(line.split() for line in shown.output.splitlines()
               if line.split()[:2] == ["count", "pause_transfer"])
    assert row[2:5] == [moved["source"], moved["target"], "done"]
    assert row[6] == f"{moved['downtime'] * 1000:.1f}"


def test_results_show_of_a_folder_that_is_not_a_run_exits_3(tmp_path: Path) -> None:
    result = foglab("results", "show", str(tmp_path))
    assert result.exit_code == 3
    assert "not a run folder" in result.output


def test_the_installed_command_runs() -> None:
    foglab_script = Path(sys.executable).parent / "foglab"
    done = subprocess.run([str(foglab_script), "validate", "quickstart"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "valid" in done.stdout


def test_help_and_errors_show_square_brackets() -> None:
    shown = foglab("run", "--help")
    assert "KEY=[v1,v2]" in shown.output and "run.seed=[1,2,3]" in shown.output
    refused = foglab("validate", "quickstart", "--sweep", "run.seed=1,2")
    assert refused.exit_code == 3
    assert "--sweep KEY=[v1, v2, ...] with at least one value" in refused.output
    typed = foglab("validate", "quickstart", "--set", "name=[a]")
    assert "(got ['a'])" in typed.output


def test_a_set_option_for_an_unknown_top_level_field_is_named(tmp_path: Path) -> None:
    result = foglab("validate", "quickstart", "--set", "nosuch.key=1")
    assert result.exit_code == 3
    assert "error: --set nosuch.key=1: nosuch: no such field here" in result.output
    assert "quickstart.yaml" not in result.output
    # a field the file wrote, made wrong by an option inside it, still names the option
    nested = foglab("validate", "quickstart", "--set", "run.duration.x=1")
    assert "--set run.duration.x=1" in nested.output


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    """foglab in a process of its own, its output in a pipe (not a terminal), as `| tee` has."""
    env = {k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}
    return subprocess.Popen([str(Path(sys.executable).parent / "foglab"), *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


@pytest.mark.slow
def test_sigterm_marks_the_run_interrupted_and_piped_output_shows_progress(
        tmp_path: Path) -> None:
    """`timeout 200 foglab run ...`: exit 143, status interrupted, and where the results are;
    output to a pipe gets a progress line every few seconds before that."""
    import signal

    process = _start(["run", "quickstart", "--set", "run.duration=10h", "--out", "out"],
                     tmp_path)
    try:
        # What the run will cost, said before it starts (experiments.estimate).
        assert process.stdout.readline().startswith("estimate: 1 run(s), 7,200,000 readings")
        first = process.stdout.readline()  # the first progress line, about 5 s in
        # the runs' bar says the time left: `runs (ETA 4m 23s): 0/1 (0%)`
        assert re.search(r"runs \(ETA [0-9hms ]+\): 0/1 \(0%\) \| run p0 r0: ", first), first
        assert "/36,000 (" in first, first
        process.send_signal(signal.SIGTERM)
        output = first + process.stdout.read()
        assert process.wait(timeout=60) == 143, output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    (folder,) = (tmp_path / "out" / "quickstart").iterdir()
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "interrupted"
    assert manifest["error"] == "interrupted by SIGTERM"
    assert f"interrupted: run out/quickstart/{folder.name} is marked interrupted" in output
    assert "Traceback" not in output


def test_piped_tables_are_full_width(tmp_path: Path) -> None:
    process = _start(["run", "quickstart", "--set", "run.duration=10s",
                      "--sweep", "workload.streams.0.rate=[1/s,2/s]", "--sweep", "run.seed=[1,2]",
                      "--out", "out"], tmp_path)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    header = next(line for line in output.splitlines() if "delivered" in line)
    for column in ("rep", "rate", "seed", "delivered", "lost", "readings/s", "p50 ms", "p95 ms",
                   "p99 ms", "jitter"):
        assert column in header, header
    assert "…" not in output
    assert len(header) > 80


def test_log_progress_says_where_each_running_task_is() -> None:
    import io
    import time

    from rich.console import Console

    from topologies.terminal import LogProgress

    out = io.StringIO()
    progress = LogProgress(console=Console(file=out, width=200), every=0.05)
    with progress:
        runs = progress.add_task("runs", total=1)
        run = progress.add_task("run p0 r0", total=600)
        progress.add_task("hidden", total=10, visible=False)
        progress.update(run, completed=150)
        time.sleep(0.3)
        said = out.getvalue().splitlines()
        progress.update(run, completed=600, description="run p0 r0 (draining)")
        time.sleep(0.3)
        finished = out.getvalue().splitlines()[len(said):]
        progress.update(run, visible=False)
        progress.update(runs, visible=False)
        time.sleep(0.3)
        silent = out.getvalue().splitlines()[len(said) + len(finished):]
    assert said, "no progress line"
    for line in said:
        assert line.endswith("] runs: 0/1 (0%) | run p0 r0: 150/600 (25%)"), line
    # a task at its end still says what it does, as a live bar would show it
    assert finished and finished[-1].endswith("| run p0 r0 (draining): 600/600 (100%)")
    assert len(silent) <= 1  # no task visible: no more lines (one may have been on its way)
    assert "hidden" not in out.getvalue()
