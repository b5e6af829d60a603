"""`foglab run -j N`: a sim sweep's runs in worker processes give the serial run's folders,
tables and points; other backends are refused before anything runs; a stop signal marks the
runs under way interrupted and leaves no process behind (issue 43)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import foglab
from experiments.cli import app
from experiments.loader import load
from experiments.runner import Reporter, run_experiment

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["run.duration=4s"]


class Heard(Reporter):
    """What a reporter is told, in order."""

    def __init__(self):
        self.calls: list[tuple] = []

    def start(self, total_runs, total_seconds=0.0):
        self.calls.append(("start", total_runs, total_seconds))

    def current_run(self, label):
        self.current = label

    def run_started(self, label, folder, duration):
        self.calls.append(("started", label))

    def progress(self, seconds):
        self.calls.append(("progress", self.current, seconds))

    def run_finished(self, label, folder, summary, error):
        self.calls.append(("finished", label, error))


def _files(root: Path) -> dict[str, bytes]:
    """Each table's, points table's and runs list's bytes by path (manifests hold times)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.suffix == ".parquet" or p.name in ("runs.json", "summary.json")}


def test_two_jobs_give_the_serial_runs_folders_bytes_and_order(tmp_path: Path) -> None:
    experiment = load("quickstart", QUICK, ["workload.streams.0.rate=[1/s, 2/s, 3/s]"])
    experiment.points[1].spec.run.repetitions = 2  # a point of two repetitions among them
    serial = run_experiment(experiment, tmp_path / "serial", sweep_id="S")
    heard = Heard()
    parallel = run_experiment(experiment, tmp_path / "parallel", heard, sweep_id="S", jobs=2)
    assert [(o.index, o.repetition, o.status) for o in parallel] == \
        [(0, 0, "ok"), (1, 0, "ok"), (1, 1, "ok"), (2, 0, "ok")]
    assert [o.folder.name for o in parallel] == [o.folder.name for o in serial]
    assert [o.summary for o in parallel] == [o.summary for o in serial]
    first, second = _files(tmp_path / "serial"), _files(tmp_path / "parallel")
    assert len(first) > 20 and first.keys() == second.keys()
    assert [name for name in first if first[name] != second[name]] == []
    # Every run was heard starting, moving (of its own label) and finishing.
    assert heard.calls[0] == ("start", 4, 16.0)
    started = {c[1] for c in heard.calls if c[0] == "started"}
    finished = {c[1] for c in heard.calls if c[0] == "finished" and c[2] is None}
    assert started == finished and len(started) == 4
    for label in started:
        moves = [c[2] for c in heard.calls if c[0] == "progress" and c[1] == label]
        assert moves and moves[-1] == 4.0 and moves == sorted(moves)


def test_resume_and_jobs_combine(tmp_path: Path) -> None:
    first = foglab.run("quickstart", set=QUICK, sweep=["run.seed=[1, 2]"], out=tmp_path)
    again = foglab.run("quickstart", set=QUICK, sweep=["run.seed=[1, 2, 3, 4]"], out=tmp_path,
                       resume=True, jobs=2)
    assert again.ok and [o.index for o in again.outcomes] == [0, 1, 2, 3]
    assert [o.folder for o in again.outcomes[:2]] == [o.folder for o in first.outcomes]
    assert [o.point["run.seed"] for o in again.outcomes] == [1, 2, 3, 4]
    (sweep,) = [f for f in (tmp_path / "quickstart").glob("*-sweep")
                if len(json.loads((f / "runs.json").read_text())) == 4]
    assert [r["point"] for r in json.loads((sweep / "runs.json").read_text())] == [0, 1, 2, 3]


def test_jobs_on_a_sweep_with_an_emulated_point_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "run", "quickstart", "--set", "run.duration=2s", "--sweep", "run.backend=[sim, emu]",
        "-j", "2", "--out", str(tmp_path / "out")], env={"COLUMNS": "250"})
    assert result.exit_code == 3, result.output  # bad input (topologies.exit_codes)
    assert "-j/--jobs 2: sweep point p1 runs on emu (run.backend)" in result.output
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="at least 1"):
        foglab.run("quickstart", set=QUICK, out=tmp_path, jobs=0)


@pytest.mark.parametrize(("sent", "code", "why"), [
    (signal.SIGTERM, 143, "interrupted by SIGTERM"),
    (signal.SIGINT, 130, "interrupted by the user (Ctrl-C)")])
def test_a_stop_signal_marks_the_runs_under_way_and_leaves_no_worker(
        tmp_path: Path, sent: int, code: int, why: str) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it; SIGTERM to the
    parent alone, as a supervisor does."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "experiments.cli", "run", "quickstart", "--set",
               "run.duration=2h", "--sweep", "run.seed=[1, 2, 3]", "-j", "2", "--out", str(out)]
    started = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(out.glob("quickstart/*/manifest.json"))) < 2:
            assert time.monotonic() < deadline and started.poll() is None, "no runs started"
            time.sleep(0.2)
        time.sleep(1.0)
        workers = _children(started.pid)
        assert len(workers) == 2
        if sent == signal.SIGINT:
            os.killpg(started.pid, sent)
        else:
            started.send_signal(sent)
        output = started.communicate(timeout=120)[0]
    finally:
        if started.poll() is None:
            os.killpg(started.pid, signal.SIGKILL)
    assert started.returncode == code, output
    manifests = [json.loads(p.read_text()) for p in out.glob("quickstart/*/manifest.json")]
    assert sorted((m["status"], m["error"]) for m in manifests) == [("interrupted", why)] * 2
    assert "are marked interrupted" in output and "0 of 3 runs had finished" in output
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()
                and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]]


def _children(pid: int) -> list[int]:
    found = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in found.read_text().split()]
