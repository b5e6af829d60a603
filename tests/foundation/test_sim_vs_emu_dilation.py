"""benchmarks/sim_vs_emu.py's `--dilation`: every run (the models' and the emulation's) gets it
as `run.dilation`, the emulated run's K is printed per configuration, `worst_p95=` always and
`worst_real_speed=` at `real-speed` only; a bad value is refused naming it. The runs are the
model's, short, the emulation's a stand-in (the calibrated model's run marked as emu's): what
the benchmark measures is not tested here, only what it passes and prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from experiments import compare as comparing


@pytest.fixture
def bench(monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import sim_vs_emu
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(comparing, "emu_unavailable", lambda: None)
    return sim_vs_emu


def main(bench, monkeypatch, tmp_path, dilation: str, emu_k: float):
    sets_seen: list[list[str]] = []

    real_run = bench.run

    def run(config, label, backend, calibration, out, sets):
        """The model's run for every label; the emulation's stand-in is the calibrated model's
        run marked as emu's, with the K emu would record."""
        sets_seen.append(list(sets))
        if backend == "emu":
            calibration = bench.MODELS["sim"]
        found = real_run(config, label, "sim", calibration, out, sets)
        if backend == "emu":
            manifest = json.loads((found.folder / "manifest.json").read_text())
            manifest["backend"] = "emu"
            manifest.setdefault("facts", {})["dilation"] = emu_k
            (found.folder / "manifest.json").write_text(json.dumps(manifest))
            found = comparing.read_run(found.folder)
        return found

    monkeypatch.setattr(bench, "run", run)
    monkeypatch.setattr(sys, "argv", ["sim_vs_emu", "--configs", "links", "--idle", "0",
                                      "--dilation", dilation, "--duration", "5", "--drain", "1",
                                      "--keep", str(tmp_path / "k")])
    status = bench.main()
    return status, sets_seen


def test_every_run_gets_the_dilation_and_real_speed_prints_its_worst(
        bench, monkeypatch, tmp_path, capsys) -> None:
    status, sets_seen = main(bench, monkeypatch, tmp_path, "real-speed", 6.584)
    out = capsys.readouterr().out
    assert status == 0
    assert len(sets_seen) == 3  # calibrated, uncalibrated, emu
    assert all("run.dilation=real-speed" in sets for sets in sets_seen)
    assert "dilation=real-speed" in out.splitlines()[0]
    assert "config=links" in out and " K=6.584" in out
    said = dict(line.split("=", 1) for line in out.splitlines() if line.startswith("worst"))
    # emu's stand-in is the calibrated model's run: its errors are 0; the uncalibrated model
    # is the one real-speed judges.
    assert said["worst"] == said["worst_p95"] == "0.000"
    assert said["worst_real_speed"] == said["worst_uncalibrated"] != "nan"
    assert said["worst_real_speed_p95"] != "nan"


def test_a_number_is_passed_as_k_and_real_speed_lines_are_left_out(
        bench, monkeypatch, tmp_path, capsys) -> None:
    status, sets_seen = main(bench, monkeypatch, tmp_path, "4", 4.0)
    out = capsys.readouterr().out
    assert status == 0
    assert all("run.dilation=4" in sets for sets in sets_seen)
    assert " K=4" in out and "worst_p95=" in out
    assert "worst_real_speed" not in out


@pytest.mark.parametrize("bad", ["0.5", "fast", "-2"])
def test_a_bad_dilation_is_refused_naming_it(bench, monkeypatch, capsys, bad) -> None:
    monkeypatch.setattr(sys, "argv", ["sim_vs_emu", f"--dilation={bad}"])
    with pytest.raises(SystemExit) as exited:
        bench.main()
    assert exited.value.code == 2
    assert f"--dilation {bad!r}" in capsys.readouterr().err
