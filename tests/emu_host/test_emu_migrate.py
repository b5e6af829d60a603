"""`foglab emu up --experiment` and `foglab emu migrate` from the command line: an experiment's
operator moved between two arm64 gateways of a cluster that is up, clear refusals that change
nothing, and nothing left after `down`."""

from __future__ import annotations

import glob
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.engine import docker_engine

pytestmark = pytest.mark.emu

PROJECT = Path(__file__).resolve().parents[2]
EXPERIMENT = PROJECT / "experiments" / "migrate-pause-transfer.yaml"
LABEL = "foglab.test=emu_host"
# The record's row: status, downtime, held, state bytes, chunks, lost, duplicated, reordered.
RECORD = re.compile(r"(done|failed)\s+([\d.]+) s\s+(\d+)\s+([\d,]+)\s+(\d+)\s+(\d+)\s+(\d+)"
                    r"\s+(\d+)")


def foglab(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command's outcome; `stdout` holds its errors too (they print there)."""
    return subprocess.run([sys.executable, "-m", "experiments.cli", *argv], cwd=PROJECT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200"}, check=False)


def windows(records: Path) -> pd.DataFrame:
    frames = [pd.read_csv(path) for path in records.glob("gw-*/windows.csv")
              if path.stat().st_size > 0]
    return pd.concat(frames).sort_values("t") if frames else pd.DataFrame()


@pytest.mark.slow
def test_an_experiments_operator_moves_on_a_cluster_that_is_up() -> None:
    from emu.engines.docker import inventory

    client = docker_engine()
    name = f"emig-{secrets.token_hex(3)}"
    try:
        up = foglab("emu", "up", "--experiment", str(EXPERIMENT), "--cluster", name,
                    "--detach", "--label", LABEL)
        assert up.returncode == 0, up.stdout
        assert "4 devices emitting; operators: count on gw-1" in up.stdout
        records = Path(inventory.clusters(client)[name].records)

        refused = {
            ("--strategy", "bogus"): (3, "unknown strategy 'bogus'; strategies on emu: "
                                         "pause_drain, pause_transfer"),
            ("--to", "gw-9"): (1, "no node 'gw-9' in cluster"),
            ("--to", "broker"): (1, "broker is a broker: an operator moves to a gateway or "
                                    "cloud VM"),
            ("--to", "gw-1"): (1, "count runs on gw-1 already"),
        }
        for options, (code, message) in refused.items():
            argv = ["--to", "gw-2", *options] if options[0] != "--to" else list(options)
            done = foglab("emu", "migrate", "count", *argv, "--cluster", name)
            assert done.returncode == code, (options, done.stdout)
            assert message in " ".join(done.stdout.split()), (options, done.stdout)
        unknown = foglab("emu", "migrate", "counter", "--to", "gw-2", "--cluster", name)
        assert unknown.returncode == 1
        assert "no operator 'counter' runs in cluster" in unknown.stdout
        assert "running: count on gw-1" in unknown.stdout  # the known ones
        nowhere = foglab("emu", "migrate", "count", "--to", "gw-2", "--cluster", "nosuch")
        assert nowhere.returncode == 1 and "no cluster 'nosuch'" in nowhere.stdout

        moved = foglab("emu", "migrate", "count", "--to", "gw-2", "--cluster", name)
        assert moved.returncode == 0, moved.stdout
        for phase in ("prepare", "pause", "resume", "release", "done"):
            assert f"] {phase}" in moved.stdout, phase
        (row,) = RECORD.findall(moved.stdout)
        status, downtime, held, state, chunks, lost, duplicated, _ = row
        assert status == "done" and 0 < float(downtime) < 5
        assert int(state.replace(",", "")) > 0 and int(chunks) >= 1
        assert (lost, duplicated) == ("0", "0")
        assert "count runs on gw-2 now" in moved.stdout
        time.sleep(4.5)  # two of gw-2's 2 s windows
        outputs = windows(records)
        # Counted on without a gap: gw-1's windows (the refusals, seconds of them, moved
        # nothing), then gw-2's, every input once.
        assert list(dict.fromkeys(outputs["node"])) == ["gw-1", "gw-2"]
        assert (outputs["last_sn"].diff().dropna() == outputs["count"].iloc[1:]).all()
        again = foglab("emu", "migrate", "count", "--to", "gw-2", "--cluster", name)
        assert again.returncode == 1 and "count runs on gw-2 already" in again.stdout

        down = foglab("emu", "down", "--cluster", name)
        assert down.returncode == 0, down.stdout
        assert inventory.containers(client, name) == [] and inventory.networks(client,
                                                                                name) == []
        assert not records.exists()
        assert glob.glob(os.path.join(tempfile.gettempdir(), f"foglab-{name}-*")) == []
    finally:
        inventory.remove(client, name)


def test_up_refuses_what_it_cannot_bring_up_before_anything_starts(tmp_path: Path) -> None:
    client = docker_engine()
    before = client.api.containers(all=True, filters={"label": LABEL})
    cases = [
        (("emu", "up"), "give a TOPOLOGY or an --experiment"),
        (("emu", "up", "two-gateways", "--experiment", str(EXPERIMENT)),
         "give a TOPOLOGY or an --experiment"),
        (("emu", "up", "--experiment", str(EXPERIMENT), "--agent-command", "sleep infinity"),
         "--agent-command replaces the agents"),
        (("emu", "up", "--experiment", "thesis-ch5-window"), "sweeps 5 points"),
        (("emu", "up", "--experiment", str(EXPERIMENT), "--set", "run.seed=x"), "run.seed"),
    ]
    for argv, message in cases:
        done = foglab(*argv, "--label", LABEL)
        assert done.returncode == 3, (argv, done.stdout)
        assert message in " ".join(done.stdout.split()), (argv, done.stdout)
    assert client.api.containers(all=True, filters={"label": LABEL}) == before
