"""A closed cluster on real containers, attacked as issue 40 reads it: a container of another
run, and a neighbour of the same run, connect to a gateway's relay (the host's address on the
gateway's bridge) and are cut off before a byte reaches the broker; nobody finds a password
or the ZooKeeper identity in `docker inspect` (the agents read them from a 0400 file, and
still log in and register with them)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from emu.agent.config import SECRET_FIELDS, SECRETS_FILE
from emu.cluster.plan import plan_cluster
from emu.cluster.services import MQTT_CONNECT
from emu.engines.docker import inventory
from emu.engines.docker.engine import Cluster
from emu.images import GATEWAY
from emu.live.agents import wait_agents_registered
from tests.emu_cluster.test_cluster import LABELS, leftovers, small_topology

if TYPE_CHECKING:
    import docker

pytestmark = pytest.mark.emu

# Run in a container: connect to host:port, send an MQTT CONNECT, print what came back (hex)
# before the far end closed, or "reset".
KNOCK = """
import socket, sys
host, port, message = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
with socket.create_connection((host, port), timeout=10) as s:
    s.settimeout(10)
    try:
        s.sendall(message)
        got = b""
        while data := s.recv(64):
            got += data
            if len(got) >= 4:
                break
        print(got.hex() or "closed")
    except ConnectionResetError:
        print("reset")
"""


@pytest.fixture(scope="module")
def cluster(client: docker.DockerClient) -> Iterator[tuple[Cluster, dict]]:
    plan = plan_cluster(small_topology(), f"era-{secrets.token_hex(3)}", labels=LABELS,
                        closed=True)
    running = Cluster(plan, client)
    running.up()
    try:
        status = {s.node: s for s in running.status()}
        # The agents log in and register with the secrets of their file, not of their
        # environment: ZooKeeper refuses foglab's znodes without the run's identity.
        wait_agents_registered(running, status, [a.node for a in plan.agents()], timeout=180)
        yield running, status
    finally:
        running.down()
        assert leftovers(client, running.name) == ([], [])


def knock(client: docker.DockerClient, image: str, network: str, address: str) -> str:
    """What a container on `network` gets back from `address` for an MQTT CONNECT."""
    host, port = address.rsplit(":", 1)
    output = client.containers.run(image, ["python3", "-c", KNOCK, host, port,
                                           MQTT_CONNECT.hex()], network=network, remove=True,
                                   labels=LABELS, entrypoint=[])
    return output.decode().strip()


def test_a_container_of_another_run_is_refused_by_a_runs_relay(cluster, client) -> None:
    running, _ = cluster
    if running.shaper.shaper != "relay":
        pytest.skip(f"links shaped by {running.shaper.shaper}: no relays to knock on")
    address = running.address("gw-1", "broker")
    image = running.images[GATEWAY.name]
    before = running.links.counters()[("gw-1", "broker")]
    # Run A: a network and a container of its own, which reach the host's address on run B's
    # gateway bridge (Linux answers a host address on every interface).
    other = client.networks.create(f"era-other-{secrets.token_hex(3)}", driver="bridge",
                                   labels=LABELS)
    try:
        assert knock(client, image, other.name, address) in ("closed", "reset")
    finally:
        other.remove()
    # The broker of run B would have answered a CONNACK (refused: no login) had it been
    # reached: nothing reached it.
    after = running.links.counters()[("gw-1", "broker")]
    assert after.refused == before.refused + 1
    assert (after.connections, after.bytes_up) == (before.connections, before.bytes_up)


def test_a_neighbour_of_the_same_run_is_refused_by_another_clients_relay(cluster) -> None:
    running, _ = cluster
    if running.shaper.shaper != "relay":
        pytest.skip(f"links shaped by {running.shaper.shaper}: no relays to knock on")
    host, port = running.address("gw-1", "broker").rsplit(":", 1)
    before = running.links.counters()[("gw-1", "broker")]
    result = running.exec("gw-2", ["python3", "-c", KNOCK, host, port, MQTT_CONNECT.hex()])
    assert result.output.decode().strip() in ("closed", "reset")
    after = running.links.counters()[("gw-1", "broker")]
    assert after.refused == before.refused + 1 and after.bytes_up == before.bytes_up
    # Its own relay takes it: the broker answers (CONNACK 5, not authorised: no login here).
    own = running.address("gw-2", "broker").rsplit(":", 1)
    result = running.exec("gw-2", ["python3", "-c", KNOCK, *own, MQTT_CONNECT.hex()])
    assert result.output.decode().strip() == bytes([0x20, 2, 0, 5]).hex()


def the_runs_secrets(running: Cluster) -> set[str]:
    """Every password and identity of the run, from the plan: the agents' secret fields
    (and the password part of an identity `user:password`), and the access's passwords."""
    found: set[str] = set()
    for container in running.plan.containers.values():
        if container.agent is not None:
            for name in SECRET_FIELDS:
                value = getattr(container.agent, name)
                found |= {value, value.rpartition(":")[2]} - {""}
    access = running.plan.access
    assert access is not None
    for name, value in vars(access).items():
        if "password" in name:
            found |= set(value.values()) if isinstance(value, dict) else {value}
    return {secret for secret in found if isinstance(secret, str) and secret}


def test_docker_inspect_shows_no_password_nor_identity(cluster, client) -> None:
    running, _ = cluster
    found = the_runs_secrets(running)
    assert len(found) >= len(running.plan.agents())  # a password per node at least
    containers = inventory.containers(client, running.name)
    assert len(containers) >= len(running.plan.containers)
    for container in containers:
        seen = client.api.inspect_container(container["Id"])
        shown = json.dumps([seen["Config"].get("Env"), seen["Config"].get("Cmd"),
                            seen.get("Args"), seen.get("Path"),
                            seen["Config"].get("Entrypoint"), seen["Config"].get("Labels")])
        leaked = [s[:4] + "..." for s in found if s in shown]
        assert leaked == [], f"{seen['Name']} shows secrets in docker inspect: {leaked}"


def test_the_secrets_file_is_roots_alone(cluster) -> None:
    """An agent started afresh reads its secrets from a file root's alone; one the zygote
    forks took them in the zygote's request (a socket only root reaches), and has no file."""
    running, _ = cluster
    forked = [agent.node for agent in running.plan.agents() if running._forked(agent)]
    assert 0 < len(forked) < len(running.plan.agents())  # both kinds checked
    for agent in running.plan.agents():
        listed = running.exec(agent.node, ["stat", "-c", "%a %u", SECRETS_FILE,
                                           SECRETS_FILE.rsplit("/", 1)[0]])
        if agent.node in forked:
            assert listed.exit_code != 0 and b"No such file" in listed.output, listed.output
            continue
        assert listed.exit_code == 0, listed.output
        assert listed.output.decode().split("\n")[:2] == ["400 0", "700 0"]


def test_a_forked_agents_relays_know_its_address_from_its_start(cluster) -> None:
    """The zygote's check of a forked agent's container found its address: its relays have it
    from the start, with no lookup of the engine at its first connection (200 gateways' lookups
    were 200 more calls to the engine as they started)."""
    running, status = cluster
    forked = [agent.node for agent in running.plan.agents() if running._forked(agent)]
    assert forked
    for node in forked:
        assert running.links.peers[node].address == status[node].ip
