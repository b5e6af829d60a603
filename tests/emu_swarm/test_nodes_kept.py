"""A swarm node whose volume is kept from an earlier run (SwarmNodes(keep_volumes=True)) on a
bridge whose subnet that run's node chose for its own docker_gwbridge: the node reaches the host
at the bridge's gateway (where the registry listens), its engine's bridges beside the new one.

Before the fix, the node's engine restored that docker_gwbridge with the host's gateway address
on it, and every pull from the registry there was refused (CI, 2026-12-07)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from emu.engines.swarm.nodes import SwarmNodes, remove
from tests.engine import docker_engine

pytestmark = [pytest.mark.emu, pytest.mark.alone]

NAME = "foglab-test-swarm-kept"
GWBRIDGE_S = 90  # the engine makes docker_gwbridge a moment after the swarm starts


def _gwbridge_subnet(client) -> str:
    from docker.errors import NotFound

    deadline = time.monotonic() + GWBRIDGE_S
    while True:
        try:
            return _subnet(client.networks.get("docker_gwbridge"))
        except NotFound:
            assert time.monotonic() < deadline, "no docker_gwbridge in the node"
            time.sleep(0.5)


def _subnet(network) -> str:
    return network.attrs["IPAM"]["Config"][0]["Subnet"]


def _accepting(address: str) -> tuple[socket.socket, threading.Thread]:
    """A listener on the host at address: it answers each connection `ok` and closes it."""
    server = socket.create_server((address, 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                connection.sendall(b"ok\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def test_a_kept_volume_brings_no_old_bridge_onto_the_nodes_new_subnet() -> None:
    host = docker_engine()
    remove(NAME, host=host, keep_volumes=False)
    try:
        with SwarmNodes(1, name=NAME, keep_volumes=True, host=host) as nodes:
            inner = _gwbridge_subnet(nodes.nodes[0].client)
        # The next run's bridge on that subnet, as when the host's engine hands it out next.
        with SwarmNodes(1, name=NAME, keep_volumes=True, subnet=inner, host=host) as nodes:
            bridge = host.networks.get(nodes.network)
            assert _subnet(bridge) == inner
            gateway = nodes.gateway
            node = nodes.nodes[0]
            server, thread = _accepting(gateway)
            try:
                port = server.getsockname()[1]
                code, output = host.containers.get(node.name).exec_run(
                    ["bash", "-c", f"exec 3<>/dev/tcp/{gateway}/{port} && head -n1 <&3"])
            finally:
                server.close()
                thread.join(5)
            assert (code, output.decode().strip()) == (0, "ok")
            assert _gwbridge_subnet(node.client) != inner
    finally:
        remove(NAME, host=host, keep_volumes=False)


@pytest.mark.parametrize(("subnet", "why"), [("172.30.0.0/33", "not a valid netmask"),
                                             ("10.9.8.7/24", "host bits set"),
                                             ("10.0.0.0/30", "too small")])
def test_a_bad_subnet_is_named_before_anything_is_made(subnet: str, why: str) -> None:
    with pytest.raises(ValueError, match=rf"SwarmNodes subnet '{subnet}'.*{why}"):
        SwarmNodes(1, name=NAME, subnet=subnet)
