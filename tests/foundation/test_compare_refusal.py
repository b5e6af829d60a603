"""No figures over a broken run: `foglab compare`'s reading of runs and benchmarks/sim_vs_emu.py
refuse a run that is not `ok`, naming it and why; a degraded run's summary says first what
part of the workload it lost. Run folders are written as the store writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import compare as comparing
from experiments.results import RunWriter
from experiments.schema import TABLES
from experiments.summary import lost_workload, summarise

FAILED = {"gw-4": "no answer to starting the drivers (set run.epoch) within 30 s; its "
                  "container was running", "gw-5": "no answer", "gw-6": "no answer"}
# Six gateways of ten devices; the three behind the second broker never started.
EMITTED = {f"d-{i}": (120 if i < 30 else 0) for i in range(60)}


def write_run(folder: Path, backend: str, status: str, failed: dict | None = None,
              error: str | None = None) -> Path:
    """A run folder as experiments.runner writes one: manifest, tables, summary, finish."""
    writer = RunWriter(folder, {"experiment": "six-gateways", "backend": backend,
                                "status": "running", "error": None})
    tables = {name: schema.empty_table() for name, schema in TABLES.items()}
    writer.tables(tables)
    writer.summary(summarise(tables, 10.0, 1.0))
    if failed:
        writer.manifest["failed_nodes"] = failed
    writer.finish(status, error, facts={"emitted": sum(EMITTED.values()),
                                        "emitted_by_device": EMITTED})
    return folder


def test_a_degraded_run_is_refused_naming_it_and_what_it_lost(tmp_path) -> None:
    folder = write_run(tmp_path / "emu", "emu", "degraded", FAILED)
    with pytest.raises(comparing.BrokenRun) as refused:
        comparing.read_run(folder)
    said = str(refused.value)
    assert "emu run" in said and str(folder) in said and "degraded" in said
    assert "gw-4, gw-5, gw-6" in said and "30 of 60 devices emitted nothing" in said


def test_an_interrupted_run_is_refused_with_its_error(tmp_path) -> None:
    folder = write_run(tmp_path / "sim", "sim", "interrupted",
                       error="interrupted by the user (Ctrl-C)")
    with pytest.raises(comparing.BrokenRun, match="sim run .* interrupted.*Ctrl-C"):
        comparing.read_run(folder)


def test_an_ok_run_is_read(tmp_path) -> None:
    folder = write_run(tmp_path / "ok", "sim", "ok")
    assert comparing.read_run(folder).backend == "sim"
    summary = json.loads((folder / "summary.json").read_text())
    assert "lost_workload" not in summary


def test_a_degraded_run_s_summary_says_first_what_it_lost(tmp_path) -> None:
    folder = write_run(tmp_path / "emu", "emu", "degraded", FAILED)
    text = (folder / "summary.json").read_text()
    first = json.loads(text)
    assert next(iter(first)) == "lost_workload"
    assert text.splitlines()[1].startswith('  "lost_workload": "degraded: 3 nodes failed')
    assert "about 50% of the readings missing" in first["lost_workload"]
    assert first["delivered"] == 0  # the figures themselves are kept


def test_lost_workload_without_per_device_counts_says_so() -> None:
    line = lost_workload({"status": "degraded", "failed_nodes": {"gw-2": "x"}},
                         {"delivered": 3507})
    assert line.startswith("degraded: 1 node failed (gw-2);")
    assert "3,507 readings delivered" in line
    assert lost_workload({"status": "ok"}) is None


def test_sim_vs_emu_refuses_a_degraded_emulation(tmp_path, monkeypatch, capsys) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import sim_vs_emu
    finally:
        sys.path.pop(0)
    degraded = write_run(tmp_path / "emu", "emu", "degraded", FAILED)
    model = write_run(tmp_path / "sim", "sim", "ok")

    def run(config, label, backend, calibration, out, sets):
        return comparing.read_run(degraded if backend == "emu" else model)

    monkeypatch.setattr(sim_vs_emu, "run", run)
    monkeypatch.setattr(comparing, "emu_unavailable", lambda: None)
    config = next(iter(sim_vs_emu.CONFIGS))
    monkeypatch.setattr(sys, "argv", ["sim_vs_emu", "--configs", config, "--keep",
                                      str(tmp_path / "keep")])
    assert sim_vs_emu.main() == 1
    out = capsys.readouterr().out
    assert f"config={config} refused=" in out and "degraded" in out and "gw-4" in out


def test_the_compare_command_exits_non_zero_on_a_degraded_run(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from experiments import cli, compare_cli
    from experiments.runner import Outcome

    folders = {"sim": write_run(tmp_path / "sim", "sim", "ok"),
               "emu": write_run(tmp_path / "emu", "emu", "degraded", FAILED)}

    def execute(loaded, out, sweep_id=None):
        backend = sweep_id.rsplit("-", 1)[-1]
        return [Outcome(folders[backend], {}, 0, {}, None,
                        "degraded" if backend == "emu" else "ok")]

    monkeypatch.setattr(compare_cli, "execute", execute)
    monkeypatch.setattr(comparing, "emu_unavailable", lambda: None)
    result = CliRunner().invoke(cli.app, ["compare", "quickstart", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert not list(tmp_path.glob("quickstart/*-compare"))  # no table, no figures written
