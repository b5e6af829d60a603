"""The deployment timing experiment: tables, summary and plot, and no cluster left behind."""

from __future__ import annotations

import pandas as pd
import pytest

from emu.deploy_timing import COMMANDS, summarise
from tests.engine import docker_engine

LABELS = {"foglab.test": "emu_deploy"}


def commands_table() -> pd.DataFrame:
    rows = []
    for gateways, durations in ((2, {"install": [1.0, 3.0], "update": [0.5, 0.5],
                                     "uninstall": [0.2, 0.4]}),):
        for command, per_repetition in durations.items():
            for repetition, duration in enumerate(per_repetition):
                for node in range(1, gateways + 1):
                    rows.append({"gateways": gateways, "repetition": repetition,
                                 "command": command, "node": f"gw-{node}", "ok": True,
                                 "error": None, "latency_s": duration / node,
                                 "duration_s": duration})
    rows[-1] = {**rows[-1], "ok": False, "error": "no reply", "latency_s": None}
    return pd.DataFrame(rows)


def test_the_summary_has_one_row_per_count_and_command_over_repetitions() -> None:
    summary = summarise(commands_table())
    assert list(summary["command"]) == list(COMMANDS)
    install = summary.iloc[0]
    assert (install.gateways, install.repetitions) == (2, 2)
    assert install.mean_s == pytest.approx(2.0)
    assert install.std_s == pytest.approx(2 ** 0.5)
    assert (install.min_s, install.max_s, install.median_s) == (1.0, 3.0, 2.0)
    assert install.latency_p50_s == pytest.approx(1.25)  # of 0.5, 1, 1.5, 3
    uninstall = summary.iloc[2]
    assert (uninstall.replies, uninstall.failed) == (4, 1)


def test_an_empty_table_summarises_to_no_rows() -> None:
    assert summarise(pd.DataFrame()).empty


@pytest.mark.emu
def test_deploy_timing_on_two_and_three_gateways(tmp_path) -> None:
    from emu.cluster import inventory
    from emu.deploy_timing import run_deploy_timing

    client = docker_engine()
    result = run_deploy_timing([2, 3], 2, tmp_path, client=client, labels=LABELS)

    commands = pd.read_parquet(result.folder / "commands.parquet")
    assert len(commands) == (2 + 3) * 2 * len(COMMANDS)
    assert commands["ok"].all(), commands[~commands["ok"]].to_string()
    assert (commands["latency_s"] > 0).all()
    assert (commands["latency_s"] <= commands["duration_s"] + 1e-6).all()
    counts = commands.groupby(["gateways", "repetition", "command"]).size()
    assert counts.to_dict() == {(n, r, c): n for n in (2, 3) for r in (0, 1) for c in COMMANDS}
    summary = pd.read_parquet(result.folder / "summary.parquet")
    assert [(row.gateways, row.command) for row in summary.itertuples()] == [
        (n, c) for n in (2, 3) for c in COMMANDS]
    assert (summary["repetitions"] == 2).all() and (summary["failed"] == 0).all()
    assert (result.folder / "summary.json").exists()
    assert (result.folder / "deploy-timing.png").stat().st_size > 0
    for cluster in result.clusters:
        assert inventory.containers(client, cluster) == []
        assert inventory.networks(client, cluster) == []
    assert client.api.containers(all=True, filters={"label": "foglab.test=emu_deploy"}) == []
