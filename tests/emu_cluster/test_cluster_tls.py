"""A cluster with TLS up on real containers (run.access: closed, run.tls: true,
emu.cluster.tls): the agents register through ZooKeeper and answer the host over TLS, and a
plain client gets nothing from the broker or from ZooKeeper."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from emu.cluster.plan import plan_cluster
from emu.cluster.services import MQTT_CONNECT
from emu.control.commands import Controller
from emu.engines.docker.engine import Cluster
from emu.live.agents import wait_agents_registered
from tests.emu_cluster.test_cluster import LABELS, leftovers, small_topology

if TYPE_CHECKING:
    import docker

pytestmark = pytest.mark.emu


def test_tls_needs_closed() -> None:
    with pytest.raises(ValueError, match="tls needs closed"):
        plan_cluster(small_topology(), "c", host_cpus=2, closed=False, tls=True)


@pytest.fixture(scope="module")
def cluster(client: docker.DockerClient) -> Iterator[tuple[Cluster, dict]]:
    plan = plan_cluster(small_topology(), f"etl-{secrets.token_hex(3)}", labels=LABELS,
                        closed=True, tls=True)
    running = Cluster(plan, client)
    running.up()
    try:
        status = {s.node: s for s in running.status()}
        wait_agents_registered(running, status, [a.node for a in plan.agents()], timeout=120)
        yield running, status
    finally:
        running.down()
        assert leftovers(client, running.name) == ([], [])


def _plain(host: str, port: int, request: bytes) -> bytes:
    """What a plain TCP client gets back for `request` (nothing, or a reset)."""
    try:
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(request)
            return sock.recv(64)
    except (ConnectionResetError, TimeoutError):
        return b""


def test_the_controller_reaches_every_agent_over_tls(cluster) -> None:
    running, status = cluster
    with Controller.of_plan(running.plan, status, grants=running.grants()).connect() as control:
        pinged = control.ping([a.node for a in running.plan.agents()], timeout=90)
    if not pinged.ok:
        for node in ("broker", *pinged.missing):
            print(node, b"".join(running.logs(node)).decode()[-2000:])
    assert pinged.ok, pinged.summary()


def test_a_plain_client_gets_nothing_from_the_broker_nor_zookeeper(cluster) -> None:
    running, status = cluster
    (server,) = running.plan.zookeeper
    # Open or closed, a plain client got a CONNACK (0 or 5) and `imok`; TLS answers neither.
    assert not _plain(status["broker"].ip, 1883, MQTT_CONNECT).startswith(b"\x20\x02")
    assert _plain(status[server].ip, 2181, b"ruok") != b"imok"


def test_kazoo_without_tls_cannot_open_a_session(cluster) -> None:
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    running, status = cluster
    (server,) = running.plan.zookeeper
    outsider = KazooClient(hosts=f"{status[server].ip}:2181", timeout=5,
                           connection_retry={"max_tries": 1})
    with pytest.raises(KazooTimeoutError):
        outsider.start(timeout=10)
    outsider.close()


def test_tls_with_a_rabbitmq_broker_is_refused_naming_it() -> None:
    from tests.emu_rabbitmq.test_kind import topology

    with pytest.raises(ValueError, match="broker b is of kind rabbitmq"):
        plan_cluster(topology({"kind": "rabbitmq"}), "c", host_cpus=2, closed=True, tls=True)


def test_a_run_with_tls_delivers_every_reading_the_radios_kept(tmp_path) -> None:
    """The quickstart-sized run of tests/emu_rabbitmq/test_run.py on Mosquitto, closed and
    with TLS: every reading the radios did not lose arrives once."""
    import json

    from experiments.loader import parse_text
    from experiments.runner import run_experiment
    from tests.emu_rabbitmq.test_run import EXPERIMENT

    text = (EXPERIMENT.replace(", broker: {kind: rabbitmq}", "")
            .replace("drain: 2s}", "drain: 2s, access: closed, tls: true}"))
    (outcome,) = run_experiment(parse_text(text), tmp_path, sweep_id="tls")
    assert outcome.error is None, outcome.error
    counts = json.loads((outcome.folder / "manifest.json").read_text())["facts"]["messages"]
    assert counts["sent"] > 0 and counts["received"] == counts["sent"] - counts["dropped"]
    assert counts["lost"] == counts["duplicated"] == 0
