"""A Ctrl-C at any moment of `foglab emu up` or of an emulated `foglab run` (its faults in
effect) removes what was made and ends with exit 130, without a traceback."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emu.engines.docker import inventory

pytestmark = [pytest.mark.emu, pytest.mark.slow]

ONE_GATEWAY = ("name: one\nnodes:\n  - {name: gw, kind: gateway}\n"
               "  - {name: broker, kind: broker}\n"
               "links:\n  - {from: gw, to: broker, latency: 5ms}\n")
LABEL = "foglab.test=cli_interrupts"


@pytest.fixture(scope="module")
def client():
    from engine import docker_engine

    return docker_engine()


def _foglab(args: list[str], cwd: Path, ignoring: bool = False) -> subprocess.Popen:
    """`foglab ARGS`; `ignoring`: started with SIGINT ignored, as a non-interactive shell
    starts its `&` jobs (Python then installs no Ctrl-C handler of its own)."""
    def ignore() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    return subprocess.Popen([str(Path(sys.executable).parent / "foglab"), *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"},
                            preexec_fn=ignore if ignoring else None)


def _interrupt(process: subprocess.Popen, after: float) -> tuple[int, str]:
    time.sleep(after)
    process.send_signal(signal.SIGINT)
    try:
        output, _ = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"still running 240 s after SIGINT:\n{output}")
    return process.returncode, output


def _nothing_left(client, cluster_labels: str) -> tuple[list, list]:
    containers = client.containers.list(all=True, filters={"label": cluster_labels})
    networks = client.networks.list(filters={"label": cluster_labels})
    return [c.name for c in containers], [n.name for n in networks]


@pytest.mark.parametrize(("after", "ignoring"), [(0.3, False), (0.3, True), (2.5, False),
                                                 (6.0, False), (12.0, False)])
def test_emu_up_interrupted_at_any_moment(tmp_path: Path, client, after: float,
                                          ignoring: bool) -> None:
    topology = tmp_path / "one.yaml"
    topology.write_text(ONE_GATEWAY)
    name = f"int-{secrets.token_hex(3)}"
    process = _foglab(["emu", "up", str(topology), "--cluster", name, "--label", LABEL,
                       "--agent-command", "sleep infinity"], tmp_path, ignoring)
    try:
        code, output = _interrupt(process, after)
        assert code == 130, output
        assert "Traceback" not in output and "Aborted" not in output, output
        assert inventory.containers(client, name) == [], output
        assert inventory.networks(client, name) == [], output
    finally:
        inventory.remove(client, name)


def test_emu_up_interrupted_while_it_holds_the_cluster(tmp_path: Path, client) -> None:
    topology = tmp_path / "one.yaml"
    topology.write_text(ONE_GATEWAY)
    name = f"int-{secrets.token_hex(3)}"
    process = _foglab(["emu", "up", str(topology), "--cluster", name, "--label", LABEL,
                       "--agent-command", "sleep infinity"], tmp_path)
    try:
        said = []
        for line in process.stdout:  # until it says the cluster is up
            said.append(line)
            if line.startswith("up in "):
                break
        assert inventory.containers(client, name), "".join(said)
        code, output = _interrupt(process, 0.5)
        output = "".join(said) + output
        assert code == 130, output
        assert f"cluster {name} down: removed 3 containers" in output
        assert "Traceback" not in output, output
        assert inventory.containers(client, name) == []
    finally:
        inventory.remove(client, name)


EMULATED = """
name: tiny
topology:
  name: {topology}
  nodes:
    - {name: sensor, kind: device, replicas: 2}
    - {name: gw, kind: gateway}
    - {name: broker, kind: broker}
  links:
    - {from: sensor-*, to: gw, latency: 2ms}
    - {from: gw, to: broker, latency: 5ms}
workload:
  name: w
  streams: [{name: s, sources: sensor-*, rate: 5/s, size: 100B}]
pipeline:
  - {name: sink, task: passthrough, on: gw, reads: s}
scenario:  # in effect through the run: an interrupt during it leaves nothing behind either
  faults:
    - {at: 0s, slow: gw, factor: 2, for: 19s}
    - {at: 0s, delay: {from: gw, to: broker}, latency: 20ms, for: 19s}
run: {backend: emu, duration: 20s, seed: 1}
"""


@pytest.mark.parametrize("after", [1.0, 8.0, 25.0])
def test_an_emulated_run_interrupted_at_any_moment(tmp_path: Path, client, after: float) -> None:
    experiment = tmp_path / "tiny.yaml"
    topology = f"tiny-{secrets.token_hex(3)}"  # finds this run's cluster among others'
    experiment.write_text(EMULATED.replace("{topology}", topology))
    process = _foglab(["run", str(experiment), "--out", "out"], tmp_path)
    code, output = _interrupt(process, after)
    assert code == 130, output
    assert "Traceback" not in output and "Aborted" not in output, output
    left = [name for name, info in inventory.clusters(client).items()
            if info.topology == topology]
    for name in left:
        inventory.remove(client, name)
    assert left == [], output
    folders = list((tmp_path / "out" / "tiny").glob("*")) if (tmp_path / "out").exists() else []
    for folder in folders:  # a run folder, if one was made, says it was interrupted
        manifest = json.loads((folder / "manifest.json").read_text())
        assert manifest["status"] == "interrupted", manifest
        assert f"run out/tiny/{folder.name} is marked interrupted" in output
