"""`foglab emu apply` on a cluster that is up: the plan from what the agents run, carried out
and read back; an agent started again is seen with what it really runs.

One small cluster for the module (three arm64 gateways, one broker, two sensors at one reading
a second), brought up as `foglab emu up --experiment base.yaml` does, in this process so that
a gateway can be killed and revived (its agent starts again from its first config)."""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from tests.engine import docker_engine

pytestmark = pytest.mark.emu

HERE = Path(__file__).parent
BASE, PARAM, JOBS = (HERE / f"{name}.yaml" for name in ("base", "param", "jobs"))


@dataclass
class Outcome:
    returncode: int
    stdout: str


def foglab(*argv: str) -> Outcome:
    """The command's outcome, run in this process (the `foglab` entry point's app: a process
    per command would import it each time); `stdout` holds its errors too."""
    from typer.testing import CliRunner

    from experiments.cli import app

    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Outcome(result.exit_code, result.output)


@pytest.fixture(scope="module")
def cluster():
    """The base experiment's cluster, up with its drivers started: (its Cluster, name)."""
    import experiments.emu_commands  # noqa: F401 - hands emu.cli.main the experiment loader
    from emu.cli.main import deployed_or_exit
    from emu.cluster.plan import plan_cluster
    from emu.engines.docker.engine import Cluster
    from emu.live.agents import start_drivers

    client = docker_engine()
    name = f"eapply-{secrets.token_hex(3)}"
    deployed = deployed_or_exit(None, str(BASE), [], None)
    plan = plan_cluster(deployed.topology, name, agents=deployed.agents,
                        labels={"foglab.test": "emu_apply", **deployed.labels})
    with Cluster(plan, client) as running:
        epoch = start_drivers(running)
        yield running, name, epoch


def listed(name: str, node: str) -> dict:
    """What `operators.list` answers from the node's agent now."""
    from emu.cli.clusters import docker_client
    from emu.control.commands import Controller
    from emu.live.agents import agents_and_brokers

    agents, brokers, _ = agents_and_brokers(docker_client(), name)
    with Controller(brokers[agents[node].broker]) as control:
        reply = control.send([node], "operators.list").replies[node]
    assert reply.ok, reply.error
    return reply.result


def apply(name: str, experiment: Path, *options: str) -> Outcome:
    return foglab("emu", "apply", str(experiment), "--cluster", name, *options)


def test_an_unchanged_experiment_plans_nothing(cluster) -> None:
    _, name, _ = cluster
    done = apply(name, BASE, "--dry-run")
    assert done.returncode == 0, done.stdout
    assert "Plan: 0 to deploy, 0 to modify, 0 to delete." in done.stdout
    assert "No changes" in done.stdout


def test_a_changed_parameter_is_one_in_place_row_applied_and_read_back(cluster) -> None:
    _, name, _ = cluster
    planned = apply(name, PARAM, "--dry-run")
    assert planned.returncode == 4, planned.stdout
    assert "Plan: 0 to deploy, 1 to modify, 0 to delete." in planned.stdout
    assert re.search(r"clean\s+modify\s+in-place", planned.stdout), planned.stdout
    assert listed(name, "gw-1")["clean"]["config"]["params"]["ranges"]["temperature"] == \
        [-20, 50]  # a dry run changes nothing

    done = apply(name, PARAM)
    assert done.returncode == 0, done.stdout
    assert re.search(r"clean\s+modify\s+in-place\s+1\s+[\d.]+", done.stdout), done.stdout
    assert "runs what the experiment describes" in done.stdout
    assert listed(name, "gw-1")["clean"]["config"]["params"]["ranges"]["temperature"] == \
        [-20, 45]
    assert apply(name, PARAM, "--dry-run").returncode == 0


def counts(running) -> pd.DataFrame:
    """local-count's windows so far, on every node, in window order."""
    frames = [pd.read_csv(path) for path in running.records_root.glob("gw-*/windows.csv")
              if path.stat().st_size > 0]
    found = pd.concat(frames) if frames else pd.DataFrame({"operator": [], "window": []})
    return found[found["operator"] == "local-count"].sort_values("window")


def wait_for(check, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.25)


def test_a_job_deleted_one_added_and_a_window_moved_with_its_state(cluster) -> None:
    running, name, _ = cluster
    wait_for(lambda: len(counts(running)) >= 1)  # gw-2 has closed a window
    done = apply(name, JOBS)
    assert done.returncode == 0, done.stdout
    assert "Plan: 1 to deploy, 1 to modify, 1 to delete." in done.stdout  # clean applied
    for row in (r"alert\s+deploy", r"extra\s+delete", r"local\s+modify\s+move"):
        assert re.search(row, done.stdout), (row, done.stdout)
    gw3 = listed(name, "gw-3")
    assert sorted(gw3) == ["alert", "local-count"]
    assert gw3["alert"]["config"]["job"] == "alert"
    assert sorted(listed(name, "gw-2")) == ["local-tap"]
    assert apply(name, JOBS, "--dry-run").returncode == 0
    wait_for(lambda: (counts(running)["node"] == "gw-3").sum() >= 2)
    counted = counts(running)
    # Counted on across the move: gw-2's windows then gw-3's, on one grid, none lost.
    assert list(dict.fromkeys(counted["node"])) == ["gw-2", "gw-3"]
    assert (counted["window"].diff().dropna() == 1).all()
    assert (counted["first_sn"].iloc[1:].to_numpy() ==
            counted["last_sn"].iloc[:-1].to_numpy() + 1).all()


def test_after_an_agent_starts_again_apply_sees_what_it_runs(cluster) -> None:
    """gw-1 killed and revived: its agent starts from its first config (the base's bound),
    so the applied parameter is gone, and apply finds that, not what it did before."""
    running, name, epoch = cluster
    running.node("gw-1").kill()
    running.revive("gw-1", {"epoch": epoch, "incarnation": 1, "away": []})
    deadline = time.monotonic() + 60
    while True:
        planned = apply(name, JOBS, "--dry-run")
        if "no answer from gw-1" not in planned.stdout or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert planned.returncode == 4, planned.stdout
    assert "Plan: 0 to deploy, 1 to modify, 0 to delete." in planned.stdout
    assert re.search(r"clean\s+modify\s+in-place", planned.stdout), planned.stdout
    assert listed(name, "gw-1")["clean"]["config"]["job"] is None  # as `up` installed it
    done = apply(name, JOBS)
    assert done.returncode == 0, done.stdout
    assert listed(name, "gw-1")["clean"]["config"]["params"]["ranges"]["temperature"] == \
        [-20, 45]


def test_bad_input_is_refused_naming_it_and_nothing_changes(cluster, tmp_path) -> None:
    _, name, _ = cluster
    missing = apply(name, tmp_path / "nope.yaml", "--dry-run")
    # A file that is not there is a bad input (exit 3); an operator on a node the cluster
    # runs no agent on is a failure against that cluster (exit 1): topologies.exit_codes.
    assert missing.returncode == 3 and "nope.yaml" in missing.stdout, missing.stdout
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(JOBS.read_text().replace("on: gw-3, reads: clean, task",
                                                  "on: gw-9, reads: clean, task")
                         .replace("replicas: 3", "replicas: 9"))
    refused = apply(name, elsewhere)
    assert refused.returncode == 1, refused.stdout
    assert "gw-9" in refused.stdout and "no running agent" in refused.stdout
    assert apply(name, JOBS, "--dry-run").returncode == 0  # nothing changed
