"""Read grants at the move (emu.cluster.grants): in a closed run where an operator may move,
no other gateway reads its inputs before the move; the host grants them to the node it
moves to just before its instance starts there (the brokers reload the ACL on SIGHUP), and
takes them back after it left. On a real Mosquitto given the files a closed plan writes, and
on real containers for the move itself."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from emu.agent.config import OperatorConfig
from emu.cluster.access import Access
from emu.cluster.deployment import agent_configs
from emu.cluster.grants import (
    GRANTS_FILE,
    GrantError,
    Grants,
    ProcessBrokers,
    Refused,
    covers,
)
from emu.cluster.plan import plan_cluster
from emu.control.commands import Controller
from experiments.loader import parse_text
from tests.emu_cluster.test_access import _connect, _heard, closed_mosquitto
from tests.emu_cluster.test_access_exploits import _stop
from topologies.model import expand

# An operator that may move (a scheduled migration: a session of its own) on gw-1, reading
# the sensors' readings, which only gw-1 publishes (s/gw-1/...).
MOVING = """
name: grants
topology:
  name: grants
  nodes:
    - {name: sensor, kind: device, replicas: 2}
    - {name: gw, kind: gateway, replicas: 3}
    - {name: broker, kind: broker}
  links:
    - {from: sensor-*, to: gw-1, latency: 2ms}
    - {from: gw-*, to: broker, latency: 5ms}
workload:
  name: w
  streams: [{name: s, sources: sensor-*, rate: 10/s, arrivals: periodic, size: 100B, qos: 1}]
pipeline:
  - {name: count, task: passthrough, on: gw-1, reads: s}
scenario:
  migration: {strategy: pause_drain}
  migrations: [{at: 7s, operator: count, to: gw-2}]
run: {backend: emu, duration: 20s, seed: 3, drain: 3s, access: closed}
"""


def moving_access() -> tuple[Access, OperatorConfig]:
    """The access a closed plan of MOVING makes (as emu.run.emulate plans it: every gateway a
    target), and the moving operator's config as placed on gw-1."""
    spec = parse_text(MOVING).points[0].spec
    topology = expand(spec.topology)
    configs = agent_configs(topology, spec.workload, spec.pipeline, moving={"count"},
                            hold=True)
    plan = plan_cluster(topology, "grants", agents=configs, closed=True)
    assert plan.access is not None
    (count,) = configs["gw-1"].operators
    assert count.session  # it may move: it reads through a session of its own
    return plan.access, count


@contextlib.contextmanager
def granting(access: Access, folder: Path) -> Iterator[tuple[int, Grants]]:
    """A closed Mosquitto on loopback and the run's grants on it (reloaded by SIGHUP)."""
    with closed_mosquitto(access) as port:
        pid, acl = _mosquitto_of(port)
        yield port, Grants(access, ProcessBrokers(pid, acl, f"127.0.0.1:{port}"), folder)


def _mosquitto_of(port: int) -> tuple[int, Path]:
    """The pid and ACL file of the Mosquitto closed_mosquitto started on `port`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"mosquitto") and len(argv) > 2:
                conf = Path(argv[2].decode())
                if f"listener {port} " in conf.read_text():
                    return int(entry.name), conf.parent / "acl"
    raise AssertionError(f"no mosquitto on port {port}")


def _publish(client, topics: list[str], times: int = 1) -> None:
    for _ in range(times):
        for topic in topics:
            client.publish(topic, b"r", qos=1).wait_for_publish(5)


READINGS = ["s/gw-1/sensor-1", "s/gw-1/sensor-2"]


def test_before_the_move_no_other_gateway_reads_the_moving_operators_inputs(tmp_path) -> None:
    access, count = moving_access()
    # The old plan made `s/#` a pattern for every node: gw-2 and gw-3 heard all of gw-1's.
    assert access.common_reads == ()
    with granting(access, tmp_path) as (port, _):
        gw1, _ = _connect(port, *access.credentials("gw-1"))
        spies = {node: _connect(port, *access.credentials(node))[0] for node in ("gw-2", "gw-3")}
        heard = {node: _heard(spy, ["#", *count.reads]) for node, spy in spies.items()}
        at_gw1 = _heard(_connect(port, *access.credentials("gw-1"))[0], count.reads)
        _publish(gw1, READINGS, 5)
        time.sleep(0.5)
        assert heard == {"gw-2": [], "gw-3": []}
        assert len(at_gw1) == 10  # the operator's own node reads them
        _stop(gw1, *spies.values())


def test_a_grant_at_the_move_gives_the_target_its_inputs_and_no_other_node(tmp_path) -> None:
    access, count = moving_access()
    with granting(access, tmp_path) as (port, grants):
        gw1, _ = _connect(port, *access.credentials("gw-1"))
        gw2, _ = _connect(port, *access.credentials("gw-2"))
        gw3, _ = _connect(port, *access.credentials("gw-3"))
        at_gw2, at_gw3 = _heard(gw2, count.reads), _heard(gw3, ["#"])
        _publish(gw1, READINGS)
        # The move's first request to the target: the controller's hook grants first.
        grants.before("gw-2", "migrate.prepare", {"role": "target", "config": asdict(count)})
        _publish(gw1, READINGS, 5)
        time.sleep(0.5)
        # Subscribed before the grant, delivered after it: what the reload lets through, all
        # of it at QoS 1; nothing of what came before.
        assert sorted(at_gw2) == sorted(READINGS * 5)
        assert at_gw3 == []
        assert json.loads((tmp_path / GRANTS_FILE).read_text()) == {
            "gw-2": {"count": ["s/#"]}}
        assert os.stat(tmp_path / GRANTS_FILE).st_mode & 0o777 == 0o600
        # The same grant again writes nothing (the node holds it); one its patterns cover too.
        reloads = grants.reloads
        assert not grants.grant("gw-2", "count", count.reads)
        assert not grants.grant("gw-3", "own", ["s/gw-3/#"])
        assert grants.reloads == reloads
        # The source released after the move: what was granted at run time goes with it.
        grants.after("gw-2", "migrate.release", {"operator": "count"})
        at_gw2.clear()
        deadline = time.monotonic() + 10
        while True:  # a revoke does not wait for the reload: the broker takes it soon after
            _publish(gw1, READINGS[:1])
            time.sleep(0.1)
            if not at_gw2:
                break
            at_gw2.clear()
            assert time.monotonic() < deadline, "the revoke never took effect"
        assert json.loads((tmp_path / GRANTS_FILE).read_text()) == {}
        _stop(gw1, gw2, gw3)


def test_a_later_process_adds_to_the_runs_grants_and_a_parallel_target_keeps_them(
        tmp_path) -> None:
    access, count = moving_access()
    with granting(access, tmp_path) as (port, grants):
        grants.grant("gw-2", "count", count.reads)
        # `foglab emu migrate` later: another Grants on the same folder sees gw-2's grant.
        later = Grants(access, grants.brokers, tmp_path)
        later.grant("gw-3", "count", count.reads)
        acl = later.acl()
        assert "user gw-2\ntopic read s/#" in acl and "user gw-3\ntopic read s/#" in acl
        # A parallel migration's target released keeps the instance (and so its reads).
        later.after("gw-3", "migrate.release", {"operator": "count", "parallel": True})
        assert "gw-3" in json.loads((tmp_path / GRANTS_FILE).read_text())


def test_a_grant_that_cannot_be_made_keeps_the_request_from_going(tmp_path) -> None:
    access, count = moving_access()
    grants = Grants(access, Refused("its brokers are elsewhere"), tmp_path)
    with pytest.raises(GrantError, match="its brokers are elsewhere"):
        grants.before("gw-2", "install", asdict(count))
    assert grants.granted == {} and not (tmp_path / GRANTS_FILE).exists()
    with pytest.raises(GrantError, match="no node 'gw-9'"):
        grants.grant("gw-9", "count", count.reads)
    # The controller does not send it: the node's reply says why, nothing was published.
    control = Controller("127.0.0.1:1", grants=grants)
    result = control.send(["gw-2"], "install", asdict(count), timeout=0.1)
    assert not result.ok and "not granted its reads" in result.replies["gw-2"].error
    assert result.missing == []


def test_covers_reads_filters_as_mosquitto_matches_them() -> None:
    assert covers("s/#", "s/gw-1/x") and covers("s/#", "s/#") and covers("+/gw-2/#", "s/gw-2/#")
    assert covers("+/gw-2", "s/gw-2") and not covers("+/gw-2", "s/gw-2/x")
    assert not covers("s/+", "s/#") and not covers("s/gw-1/#", "s/#")
    assert not covers("clean/#", "s/#")


def test_a_grant_costs_one_reload_with_a_probe(tmp_path) -> None:
    access, count = moving_access()
    with granting(access, tmp_path) as (_, grants):
        started = time.monotonic()
        assert grants.grant("gw-2", "count", count.reads)
        print(f"a grant on a host Mosquitto: {(time.monotonic() - started) * 1000:.1f} ms")
        assert grants.reloads == 1



# On real containers --------------------------------------------------------------------------


def _received(running, node: str) -> list[str]:
    import csv

    path = running.records_dir(node) / "received.csv"
    if not path.exists():
        return []
    with path.open() as file:
        return [row["id"] for row in csv.DictReader(file) if row["stream"] == "s"]


def _sent(running) -> list[str]:
    import csv

    path = running.records_dir("gw-1") / "sent.csv"
    with path.open() as file:
        return [row["id"] for row in csv.DictReader(file)
                if row["stream"] == "s" and row["dropped"] in ("", "0", "False")]


# Alone: in one of three runs of CI's parallel phase on a fresh clone (load about 2 a core) the
# move failed at its resume, "operator 'count' was not prepared on gw-2", where alone it
# passes; not explained yet (the grant's probe logs in with a client id of its own).
@pytest.mark.emu
@pytest.mark.alone
def test_a_moved_operator_gets_its_inputs_on_its_new_gateway_and_no_other_before(
        client, tmp_path) -> None:
    import secrets

    from emu.engines.docker.engine import Cluster
    from emu.features.moves.dispatch import migrate
    from emu.live.agents import start_drivers, wait_agents_registered
    from tests.emu_cluster.test_cluster import LABELS, leftovers

    spec = parse_text(MOVING).points[0].spec
    topology = expand(spec.topology)
    configs = agent_configs(topology, spec.workload, spec.pipeline, moving={"count"},
                            hold=True)
    plan = plan_cluster(topology, f"grants-{secrets.token_hex(3)}", agents=configs,
                        labels=LABELS, closed=True)
    access = plan.access
    running = Cluster(plan, client, records=tmp_path)
    running.up()
    try:
        status = {s.node: s for s in running.status()}
        wait_agents_registered(running, status, [a.node for a in plan.agents()], timeout=120)
        broker = status["broker"].ip
        spies = {node: _spy(broker, access.credentials(node)) for node in ("gw-2", "gw-3")}
        with Controller.of_plan(plan, status, grants=running.grants()).connect() as control:
            start_drivers(running)
            time.sleep(3)
            # Before the move: gw-1's readings flow, and neither other gateway hears one.
            assert _received(running, "gw-1"), "the operator on gw-1 got nothing"
            assert [len(heard) for _, heard in spies.values()] == [0, 0]
            record = migrate(control, "count", "gw-1", "gw-2", "pause_drain", timeout=60)
            assert record.status == "done", record.error
            time.sleep(3)
            stopped = control.set_rate(["gw-1"], 0.0, timeout=30)
            assert stopped.ok, stopped.summary()
            time.sleep(3)
        # After it: gw-2 was granted the operator's reads (its spy, logged in as gw-2, hears
        # them now), gw-3 still nothing; the grant is in the run's scratch folder.
        assert len(spies["gw-2"][1]) > 0 and spies["gw-3"][1] == []
        acl = running.exec("broker", ["cat", "/etc/foglab/acl"]).output.decode()
        assert "user gw-2\ntopic read s/#" in acl and "user gw-3" not in acl
        # Nothing lost at QoS 1 across the move: every reading gw-1 sent was taken once, by
        # gw-1 before the move or gw-2 after it.
        before, after = _received(running, "gw-1"), _received(running, "gw-2")
        assert after, "the moved operator got nothing on gw-2"
        sent = _sent(running)
        assert sorted(before + after) == sorted(sent), (len(before), len(after), len(sent))
        print(f"sent {len(sent)}, on gw-1 {len(before)}, on gw-2 {len(after)}, "
              f"downtime {record.downtime:.3f} s, held {record.held}")
        for spy, _ in spies.values():
            spy.loop_stop()
            spy.disconnect()
    finally:
        running.down()
        assert leftovers(client, running.name) == ([], [])


def _spy(host: str, login: tuple[str, str]):
    """A client logged in as a node, subscribed to everything (`#`); what it hears."""
    import paho.mqtt.client as mqtt

    heard: list[str] = []
    spy = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    spy.username_pw_set(*login)
    spy.on_message = lambda c, u, m: heard.append(m.topic) if m.topic.startswith("s/") else None
    spy.connect(host, 1883)
    spy.loop_start()
    spy.subscribe("#", qos=1)
    return spy, heard


def test_an_engine_without_a_live_acl_grants_a_movers_targets_at_the_start() -> None:
    """A swarm's brokers read their ACL from a Docker config, fixed while they run
    (SwarmCluster.live_acl): a movable operator's reads go to its targets in the plan, or a
    move there would find its inputs refused; an engine that rewrites the ACL grants none."""
    from emu.engines.docker.engine import Cluster
    from emu.engines.swarm.engine import SwarmCluster

    spec = parse_text(MOVING).points[0].spec
    topology = expand(spec.topology)
    configs = agent_configs(topology, spec.workload, spec.pipeline, moving={"count"}, hold=True)
    plans = {engine: plan_cluster(topology, "grants", agents=configs, closed=True,
                                  live_acl=engine.live_acl) for engine in (Cluster, SwarmCluster)}
    assert plans[Cluster].access.common_reads == ()
    assert plans[SwarmCluster].access.common_reads == ("s/#",)


def test_an_install_on_several_nodes_is_one_grant_and_one_reload(tmp_path) -> None:
    """A request to many nodes (an install on every gateway) grants them all in one new ACL,
    one reload of each broker, not one a node (200 gateways at 89 ms each were 18 s); its
    uninstall revokes them all at once too."""
    access, count = moving_access()
    with granting(access, tmp_path) as (port, grants):
        assert grants.missing("gw-2", count.reads) and grants.missing("gw-3", count.reads)
        grants.before_all(["gw-1", "gw-2", "gw-3"], "install", asdict(count))
        assert grants.reloads == 1
        assert grants.missing("gw-2", count.reads) == grants.missing("gw-3", count.reads) == []
        assert sorted(grants.granted) == ["gw-2", "gw-3"]  # gw-1 held them: placed there
        gw3, _ = _connect(port, *access.credentials("gw-3"))
        heard = _heard(gw3, count.reads)
        gw1, _ = _connect(port, *access.credentials("gw-1"))
        _publish(gw1, READINGS, 2)
        time.sleep(0.5)
        assert len(heard) == 4  # the new ACL is the broker's: gw-3 reads what it was granted
        grants.after_all(["gw-2", "gw-3"], "uninstall", {"operator": "count"})
        assert grants.reloads == 2 and grants.granted == {}
        assert grants.missing("gw-3", count.reads)
        _stop(gw1, gw3)
