"""The deployment timing benchmark (benchmarks/deploy_timing.py): its summary, its figures and
ratio against the serial baseline, its tables and plot, and no cluster left behind."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.engine import docker_engine

PROJECT = Path(__file__).resolve().parents[2]
SCRIPT = PROJECT / "benchmarks" / "deploy_timing.py"
LABELS = {"foglab.test": "emu_deploy"}


def benchmark():
    """The benchmark script as a module (benchmarks/ is no package)."""
    if "deploy_timing" not in sys.modules:
        spec = importlib.util.spec_from_file_location("deploy_timing", SCRIPT)
        module = sys.modules["deploy_timing"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # dataclasses look their module up in sys.modules
    return sys.modules["deploy_timing"]


def commands_table() -> pd.DataFrame:
    rows = []
    for mode, durations in (("parallel", {"install": [1.0, 3.0, 2.0], "update": [0.5, 0.5, 0.5],
                                          "uninstall": [0.2, 0.4, 0.3]}),
                            ("serial", {"install": [8.0], "update": [1.0],
                                        "uninstall": [0.6]})):
        for command, per_repetition in durations.items():
            for repetition, duration in enumerate(per_repetition):
                for node in (1, 2):
                    rows.append({"gateways": 2, "mode": mode, "repetition": repetition,
                                 "command": command, "node": f"gw-{node}", "ok": True,
                                 "error": None, "latency_s": duration / node,
                                 "duration_s": duration})
    rows[-1] = {**rows[-1], "ok": False, "error": "no reply", "latency_s": None}
    return pd.DataFrame(rows)


def test_the_summary_has_one_row_per_count_mode_and_command_over_repetitions() -> None:
    module = benchmark()
    summary = module.summarise(commands_table())
    assert list(zip(summary["mode"], summary["command"], strict=True)) == [
        (mode, command) for mode in module.MODES for command in module.COMMANDS]
    install = summary.iloc[0]
    assert (install.gateways, install.repetitions) == (2, 3)
    assert install.mean_s == pytest.approx(2.0)
    assert install.std_s == pytest.approx(1.0)
    assert (install.min_s, install.max_s, install.median_s) == (1.0, 3.0, 2.0)
    assert install.latency_p50_s == pytest.approx(1.25)  # of 0.5, 1, 1, 1.5, 2, 3
    serial_uninstall = summary.iloc[5]
    assert (serial_uninstall.replies, serial_uninstall.failed) == (2, 1)


def test_figures_leave_out_the_cold_first_round_and_end_with_the_ratio() -> None:
    module = benchmark()
    lines = module.figures(commands_table(), [2])
    values = dict(line.split("=") for line in lines)
    assert float(values["install_s_2"]) == pytest.approx(2.5)  # median of 3.0 and 2.0
    assert float(values["install_first_s_2"]) == pytest.approx(1.0)
    assert float(values["serial_install_s_2"]) == pytest.approx(8.0)
    assert values["failed_2"] == "1"
    assert values["thesis_install_s_50"] == "10.47"
    assert lines[-1] == "ratio=0.312"  # 2.5 / 8


def test_an_empty_table_summarises_to_no_rows() -> None:
    assert benchmark().summarise(pd.DataFrame()).empty


@pytest.mark.emu
def test_the_benchmark_on_two_and_three_gateways(tmp_path) -> None:
    from emu.engines.docker import inventory

    client = docker_engine()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--gateways", "2,3", "--repetitions", "2",
         "--out", str(tmp_path), *(f"--label={k}={v}" for k, v in LABELS.items())],
        capture_output=True, text=True, timeout=600, cwd=PROJECT)
    assert done.returncode == 0, done.stderr[-3000:]
    values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert done.stdout.splitlines()[-1].startswith("ratio=")
    for n in (2, 3):
        for key in ("install", "update", "uninstall", "serial_install"):
            assert 0 < float(values[f"{key}_s_{n}"]) < 60, (key, n)
        assert values[f"failed_{n}"] == "0"
    assert float(values["ratio"]) > 0

    (folder,) = tmp_path.iterdir()
    commands = pd.read_parquet(folder / "commands.parquet")
    # Two parallel rounds and one serial round of each command, one row per node.
    assert len(commands) == (2 + 3) * 3 * 3
    assert commands["ok"].all(), commands[~commands["ok"]].to_string()
    assert (commands["latency_s"] > 0).all()
    assert (commands["latency_s"] <= commands["duration_s"] + 1e-6).all()
    serial = commands[commands["mode"] == "serial"]
    # Node after node: each request is sent after the previous node's reply.
    for (_, _), group in serial.groupby(["gateways", "command"]):
        group = group.sort_values("t_sent")
        assert (group["t_sent"].to_numpy()[1:] >= group["t_replied"].to_numpy()[:-1]).all()
    summary = pd.read_parquet(folder / "summary.parquet")
    assert len(summary) == 2 * 2 * 3 and (summary["failed"] == 0).all()
    assert (folder / "deploy-timing.png").stat().st_size > 0
    for cluster in inventory.clusters(client):
        assert not cluster.startswith("dt-"), cluster
    labelled = {"label": "foglab.test=emu_deploy"}
    assert client.api.containers(all=True, filters=labelled) == []
    assert client.api.networks(filters=labelled) == []
