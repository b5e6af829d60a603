"""The emulated run's fault bookkeeping: dead agents, services' outages, commands' missing
replies, stopping dead containers, and records cut by a kill (no containers: the engine's
answers are given)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from emu.control.commands import CommandResult, Reply
from emu.run.emulate import EmuError, _settle, _stop_agents, _trim_cut_lines
from emu.run.health import Health, Seen, engine_time

EPOCH = 1000.0


def health(**states: Seen) -> tuple[Health, dict]:
    report = dict(states)
    clock = iter(range(10**6))
    watch = Health(lambda: report, ["gw-1", "gw-2"], ["broker-1"],
                   clock=lambda: EPOCH + next(clock), interval=0.0)
    watch.epoch = EPOCH
    return watch, report


def test_a_dead_agent_stays_dead_and_says_how_and_when() -> None:
    watch, report = health(**{"gw-1": Seen("running"), "gw-2": Seen("running"),
                              "broker-1": Seen("running", started=990.0)})
    assert watch.dead() == set()
    report["gw-2"] = Seen("exited", "Exited (137) 1 second ago")
    assert watch.dead() == {"gw-2"}
    report["gw-2"] = Seen("running")  # a container started again outside the schedule
    assert watch.dead() == {"gw-2"}
    assert watch.failed["gw-2"].startswith("container exited at t=")
    assert "Exited (137)" in watch.failed["gw-2"]
    del report["gw-1"]
    assert watch.dead() == {"gw-1", "gw-2"} and "removed" in watch.failed["gw-1"]


def test_an_agent_the_schedule_revives_is_alive_again_unless_it_failed_otherwise() -> None:
    watch, report = health(**{"gw-1": Seen("running"), "gw-2": Seen("exited"),
                              "broker-1": Seen("running", started=990.0)})
    assert watch.dead() == {"gw-2"}
    report["gw-2"] = Seen("running")
    watch.revived("gw-2")
    assert watch.dead() == set()
    watch.failed["gw-1"] = "no answer to set (publish.rate)"  # as _settle marks it
    watch.revived("gw-1")
    assert watch.dead() == {"gw-1"}


def test_a_broker_restart_between_polls_is_an_outage_not_a_failure() -> None:
    watch, report = health(**{"gw-1": Seen("running"), "gw-2": Seen("running"),
                              "broker-1": Seen("running", started=990.0)})
    watch.poll()
    report["broker-1"] = Seen("running", started=1020.5, finished=1020.1)
    watch.poll()
    watch.finish()
    assert watch.facts() == {"broker-1": [[20.1, 20.5]]}
    assert watch.failed == {}


def test_an_outage_seen_while_it_lasts_closes_when_the_broker_runs_again() -> None:
    watch, report = health(**{"broker-1": Seen("running", started=990.0)})
    watch.poll()
    report["broker-1"] = Seen("exited", started=990.0, finished=1012.0)
    watch.poll()
    assert watch.facts() == {"broker-1": [[12.0, None]]}
    report["broker-1"] = Seen("running", started=1013.0, finished=1012.0)
    watch.poll()
    watch.poll()
    assert watch.facts() == {"broker-1": [[12.0, 13.0]]}
    report["broker-1"] = Seen("exited", started=1013.0, finished=1030.0)
    watch.finish()
    assert watch.facts()["broker-1"][-1] == [30.0, None]
    assert watch.failed["broker-1"] == "down since t=30.0 s, not back by the end"


def test_engine_times_read_nanoseconds_and_the_zero_time() -> None:
    assert engine_time("2026-11-25T08:50:01.123456789Z") == pytest.approx(
        pd.Timestamp("2026-11-25T08:50:01.123456Z").timestamp())
    assert engine_time("2026-11-25T08:50:01Z") == pd.Timestamp("2026-11-25T08:50:01Z").timestamp()
    assert engine_time("0001-01-01T00:00:00Z") is None and engine_time(None) is None


def result(replies: dict[str, bool], missing: list[str], gone: list[str]) -> CommandResult:
    return CommandResult("set", {n: Reply(n, ok, None if ok else "set: no", 0.0, 1.0, 1.0)
                                 for n, ok in replies.items()}, missing, gone, 0.0, 30.0)


def test_a_node_that_does_not_answer_fails_alone_and_one_that_refuses_stops_the_run() -> None:
    failed = {"gw-2": "container exited at t=20.0 s"}
    _settle(result({"gw-1": True}, ["gw-2", "gw-3"], ["gw-2"]), "stopping the drivers", failed)
    assert failed["gw-2"] == "container exited at t=20.0 s"  # what happened first stays
    assert failed["gw-3"].startswith("no answer to stopping the drivers within 30 s")
    with pytest.raises(EmuError, match=r"starting the drivers failed: set: 1 ok, 1 failed "
                                       r"\(gw-2: set: no\)"):
        _settle(result({"gw-1": True, "gw-2": False}, [], []), "starting the drivers", {})


class Api:
    """The engine's answers to kill and wait, as the docker SDK gives them."""

    def __init__(self, states: dict[str, str]) -> None:
        self.states = states
        self.killed: list[str] = []

    def kill(self, container: str, signal: str) -> None:
        from docker.errors import APIError, NotFound

        state = self.states[container]
        if state == "removed":
            raise NotFound(f"No such container: {container}")
        if state not in ("running", "stuck"):
            raise APIError("409 Conflict", explanation=f"Container {container} is not running")
        self.killed.append(container)

    def wait(self, container: str, timeout: int) -> dict:
        import requests

        if self.states[container] == "stuck":
            raise requests.exceptions.ReadTimeout("read timed out")
        return {"StatusCode": 0}


class Nodes:
    """A cluster's nodes (emu.engines.docker.nodes.DockerNode) over the stand-in's answers."""

    def __init__(self, api: Api, containers: dict[str, str]) -> None:
        self.api, self.containers = api, containers

    def node(self, name: str):
        from emu.engines.docker.nodes import DockerNode

        return DockerNode(self.api, self.containers[name])


def test_stopping_agents_goes_past_dead_and_stuck_containers() -> None:
    pytest.importorskip("docker")
    api = Api({"c1": "running", "c2": "exited", "c3": "removed", "c4": "exited"})
    failed: dict[str, str] = {"gw-2": "container exited at t=20.0 s"}
    nodes = Nodes(api, {"gw-1": "c1", "gw-2": "c2", "gw-3": "c3", "gw-4": "c4"})
    _stop_agents(nodes, ["gw-1", "gw-2", "gw-3", "gw-4"], failed)
    assert api.killed == ["c1"]
    assert failed["gw-2"] == "container exited at t=20.0 s"
    assert failed["gw-3"] == "its container was removed before the run's end"
    assert failed["gw-4"] == ("its container was not running at the run's end: "
                              "Container c4 is not running")
    api = Api({"c1": "stuck"})  # running, and deaf to SIGTERM
    failed = {}
    _stop_agents(Nodes(api, {"gw-1": "c1"}), ["gw-1"], failed)
    assert failed["gw-1"].startswith("did not stop within 20 s of SIGTERM")


def test_a_line_cut_by_a_kill_is_dropped_and_whole_files_are_kept(tmp_path: Path) -> None:
    node = tmp_path / "gw-2"
    node.mkdir()
    (node / "sent.csv").write_bytes(b"id,stream\r\n1,city\r\n2,ci")
    (node / "received.csv").write_bytes(b"id,stream\r\n1,city\r\n")
    (node / "commands.csv").write_bytes(b"")
    _trim_cut_lines(tmp_path)
    assert (node / "sent.csv").read_bytes() == b"id,stream\r\n1,city\r\n"
    assert (node / "received.csv").read_bytes() == b"id,stream\r\n1,city\r\n"
    assert (node / "commands.csv").read_bytes() == b""



def cgroup(root: Path, container: str, cpu_s: float) -> None:
    """A container's cgroup v2 files as the engine's systemd layout has them."""
    path = root / "system.slice" / f"docker-{container}.scope"
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpu.stat").write_text(f"usage_usec {int(cpu_s * 1e6)}\nuser_usec 0\n")
    (path / "memory.current").write_text("1048576\n")
    (path / "cgroup.procs").write_text("1\n")
    (path / "cgroup.freeze").write_text("0\n")


def test_a_container_restarted_between_samples_never_gets_a_negative_cpu_share(
        tmp_path: Path) -> None:
    from emu.host.metrics import NodeSampler

    cgroup(tmp_path, "b1", 10.0)
    cgroup(tmp_path, "g1", 5.0)
    sampler = NodeSampler({"broker-1": "b1", "gw-1": "g1"}, {"broker-1": 1.0, "gw-1": 1.0},
                          EPOCH, root=tmp_path)
    sampler.sample(EPOCH + 1)
    cgroup(tmp_path, "b1", 0.2)  # restarted: its counter began again
    cgroup(tmp_path, "g1", 5.5)
    sampler.sample(EPOCH + 2)
    cgroup(tmp_path, "b1", 0.7)
    sampler.sample(EPOCH + 3)
    rows = pd.DataFrame(sampler.rows)
    assert (rows["cpu"] >= 0).all()
    # the restart's second: its 0.2 s since the restart; then 0.5 s in a second
    assert rows.query("node == 'broker-1'")["cpu"].tolist() == [pytest.approx(0.2),
                                                               pytest.approx(0.5)]
    assert rows.query("node == 'gw-1'")["cpu"].tolist() == [pytest.approx(0.5), 0.0]
