"""A closed cluster up on real containers (run.access: closed, emu.cluster.access): the agents
log in and register with the run's identity, the host's controller reaches them, and a client
without the cluster's logins is refused by its broker and by its ZooKeeper."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from emu.cluster.broker_kinds import CLOSED_CONFIG
from emu.cluster.plan import plan_cluster
from emu.cluster.services import MQTT_CONNECT, _exchange
from emu.control.commands import Controller
from emu.engines.docker.engine import Cluster
from emu.live.agents import wait_agents_registered
from tests.emu_cluster.test_cluster import LABELS, leftovers, small_topology

if TYPE_CHECKING:
    import docker

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def cluster(client: docker.DockerClient) -> Iterator[tuple[Cluster, dict]]:
    plan = plan_cluster(small_topology(), f"ecc-{secrets.token_hex(3)}", labels=LABELS,
                        closed=True)
    running = Cluster(plan, client)
    running.up()
    try:
        status = {s.node: s for s in running.status()}
        # Through ZooKeeper with the run's identity: every agent registered with it.
        wait_agents_registered(running, status, [a.node for a in plan.agents()], timeout=120)
        yield running, status
    finally:
        running.down()
        assert leftovers(client, running.name) == ([], [])


def test_the_controller_reaches_every_agent_with_the_hosts_login(cluster) -> None:
    running, status = cluster
    with Controller.of_plan(running.plan, status).connect() as control:
        # The gateways are Pis under QEMU: on a CI dry run's loaded host one registered agent
        # had not answered after 30 s (its log clean); what counts here is that it answers.
        pinged = control.ping([a.node for a in running.plan.agents()], timeout=90)
    print(pinged.summary())
    if not pinged.ok:
        for node in ("broker", *pinged.missing):
            print(node, b"".join(running.logs(node)).decode()[-2000:])
    assert pinged.ok, pinged.summary()


def test_the_broker_refuses_a_client_without_a_login(cluster) -> None:
    running, status = cluster
    assert running.exec("broker", ["grep", "-c", "allow_anonymous false",
                                   CLOSED_CONFIG]).output.strip() == b"1"
    # CONNACK, return code 5: not authorised.
    assert _exchange(status["broker"].ip, 1883, MQTT_CONNECT, 4) == bytes([0x20, 2, 0, 5])


def test_zookeeper_refuses_foglabs_znodes_to_a_client_without_the_identity(cluster) -> None:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    running, status = cluster
    (server,) = running.plan.zookeeper
    outsider = KazooClient(hosts=f"{status[server].ip}:2181", timeout=10)
    outsider.start(timeout=30)
    try:
        with pytest.raises(NoAuthError):
            outsider.get_children("/iot/gateways")
        with pytest.raises(NoAuthError):
            outsider.get("/iot/gateways/gw-1")
        assert outsider.get_children("/zookeeper")  # ZooKeeper's own stay open
    finally:
        outsider.stop()
        outsider.close()
