"""A swarm node's link agent (emu.links.link_agent) driven by the host's NodeLinks
(emu.engines.swarm.links) on loopback: real relays, a real echo server as the broker; the address an
emulated node resolves (emu.agent.config.NODE_HOST); a port taken on a second node, a wrong
token."""

from __future__ import annotations

import asyncio
import random
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from emu.agent.config import NODE_HOST, AgentConfig, default_gateway, local_address, localized
from emu.cluster.plan import plan_cluster
from emu.engines.swarm.links import PORTS, AgentControl, LinkAgentError, NodeLinks
from emu.links.link_agent import LinkAgent
from emu.links.spec import LinkShape
from tests.emu_cluster.test_cluster import GW_LATENCY_S, small_topology

SERVICE_HOST = "127.0.0.77"  # the broker and ZooKeeper stand-ins: echo servers on their ports
# The kernel's route table (/proc/net/route) with a default route via 127.0.0.1, as an emulated
# node's container sees its default route via its node.
ROUTES = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
          "eth0\t00000000\t0100007F\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
          "eth0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n")


@contextmanager
def agent_on_loopback(token: str) -> Iterator[tuple[LinkAgent, int]]:
    """A link agent on its own loop thread, its control port on loopback."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    agent = LinkAgent(token)
    server = asyncio.run_coroutine_threadsafe(agent.serve("127.0.0.1", 0), loop).result()
    try:
        yield agent, server.sockets[0].getsockname()[1]
    finally:
        async def close() -> None:
            server.close()
            await asyncio.gather(*(r.close() for r in agent.relays.values()))
            # Control connections still open (and the lag probe) end here, not at the loop's
            # close, where their writer.close() would find the loop closed.
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@contextmanager
def echo_on(host: str, ports: list[int]) -> Iterator[None]:
    servers = []
    for port in ports:
        server = socket.create_server((host, port), reuse_port=True)
        servers.append(server)

        def serve(listening: socket.socket) -> None:
            while True:
                try:
                    connection, _ = listening.accept()
                except OSError:
                    return
                threading.Thread(target=echo, args=(connection,), daemon=True).start()

        threading.Thread(target=serve, args=(server,), daemon=True).start()
    try:
        yield
    finally:
        for server in servers:
            server.close()


def echo(connection: socket.socket) -> None:
    with connection:
        while data := connection.recv(65536):
            connection.sendall(data)


def round_trip(address: str, count: int = 5) -> float:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as connection:
        times = []
        for _ in range(count):
            start = time.perf_counter()
            connection.sendall(b"x" * 32)
            received = b""
            while len(received) < 32:
                received += connection.recv(64)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


@pytest.fixture
def routes(tmp_path) -> str:
    path = tmp_path / "route"
    path.write_text(ROUTES)
    return str(path)


def test_a_node_resolves_its_own_node_from_its_default_route(routes, tmp_path) -> None:
    assert default_gateway(routes) == "127.0.0.1"
    assert local_address(f"{NODE_HOST}:4100", routes) == "127.0.0.1:4100"
    assert (local_address(f"{NODE_HOST}:1,zk-2:2181,{NODE_HOST}:3", routes)
            == "127.0.0.1:1,zk-2:2181,127.0.0.1:3")
    assert local_address("10.0.0.5:1883", routes) == "10.0.0.5:1883"  # nothing to resolve
    config = AgentConfig(node="gw-1", mqtt=f"{NODE_HOST}:4100", zookeeper=f"{NODE_HOST}:4101",
                         spares={"broker-2": f"{NODE_HOST}:4102"},
                         other_brokers={"broker-3": "10.0.0.9:1883"})
    resolved = localized(config, routes)
    assert (resolved.mqtt, resolved.zookeeper) == ("127.0.0.1:4100", "127.0.0.1:4101")
    assert resolved.spares == {"broker-2": "127.0.0.1:4102"}
    assert resolved.other_brokers == {"broker-3": "10.0.0.9:1883"}
    bare = tmp_path / "bare"
    bare.write_text(ROUTES.splitlines(keepends=True)[0] + ROUTES.splitlines(keepends=True)[2])
    with pytest.raises(OSError, match=f"no default route.*{NODE_HOST} cannot be resolved"):
        local_address(f"{NODE_HOST}:1", str(bare))


def test_the_links_of_a_plan_run_on_a_node_agent_shaped_and_reshaped(routes) -> None:
    plan = plan_cluster(small_topology(), "agent-test")
    ports = sorted({link.port for link in plan.links})
    links = NodeLinks(plan, seed=1)
    with echo_on(SERVICE_HOST, ports), agent_on_loopback(links.token) as (_, control):
        links.connect({"node-a": ("127.0.0.1", control)})
        services = dict.fromkeys(plan.containers, SERVICE_HOST)
        addresses = links.addresses(services, {})
        # One address form for every link: the node's own agent, on one port per link.
        assert {a.split(":")[0] for a in addresses.values()} == {NODE_HOST}
        assert len({a.split(":")[1] for a in addresses.values()}) == len(plan.links)
        key = next(k for k in addresses if k[0] == "gw-1" and plan.link(*k).role == "mqtt")
        local = local_address(addresses[key], routes)
        # A round trip pays the link's one-way latency twice (never less).
        # Above, a bound at CI's worst (load 6 on two cores added 20 ms to a round trip, and a
        # single one here): not the reshaped link's 200 ms, and after the reshape not a third
        # crossing.
        assert 2 * GW_LATENCY_S <= round_trip(local) < 2 * GW_LATENCY_S + 0.1
        links.reshape(*key, LinkShape(0.1))
        assert 0.2 <= round_trip(local) < 0.3
        assert links.shapes[key] == LinkShape(0.1)
        counters = links.counters()
        assert counters[key].connections == 2 and counters[key].bytes_up == 2 * 5 * 32
        assert sum(c.connections for k, c in counters.items() if k != key) == 0
        assert links.facts() == {"link_carriers": {f"{key[0]}>{key[1]}": ["node-a"]}}
        lag = links.lag()
        assert lag is not None and 0 <= lag < 0.5
        links.close()


def test_a_port_taken_on_another_node_is_named() -> None:
    plan = plan_cluster(small_topology(), "agent-test")
    links = NodeLinks(plan, seed=1)
    with (agent_on_loopback(links.token) as (_, first),
          agent_on_loopback(links.token) as (_, second)):
        # Two "nodes" on one host: the second can never listen where the first does (every
        # block of ports tried is given back, then the last error is raised).
        links.connect({"node-a": ("127.0.0.1", first), "node-b": ("127.0.0.1", second)})
        with pytest.raises(LinkAgentError, match=r"node-b: OSError: link .* cannot listen on "
                                                  r"port \d+"):
            links.addresses(dict.fromkeys(plan.containers, SERVICE_HOST), {})
        links.close()


def test_a_control_connection_without_the_token_is_refused() -> None:
    with agent_on_loopback("the-token") as (agent, port):
        with pytest.raises(LinkAgentError, match="node-a: wrong token"):
            AgentControl("node-a", "127.0.0.1", port, "another")
        control = AgentControl("node-a", "127.0.0.1", port, "the-token")
        with pytest.raises(LinkAgentError, match="no op 'drop'"):
            control.request("drop")
        assert control.request("counters") == {"counters": {}}
        control.close()
        assert agent.relays == {}


def test_a_block_of_ports_taken_on_a_node_is_given_back_and_another_tried() -> None:
    plan = plan_cluster(small_topology(), "agent-test")
    links = NodeLinks(plan, seed=5)
    low, high = PORTS
    first = random.Random(5).randrange(low, high - len(plan.links) + 1)
    with (socket.create_server(("0.0.0.0", first + 1)),  # one port of the first block: taken
          agent_on_loopback(links.token) as (agent, control)):
        links.connect({"node-a": ("127.0.0.1", control)})
        addresses = links.addresses(dict.fromkeys(plan.containers, SERVICE_HOST), {})
        ports = sorted(int(a.rsplit(":", 1)[1]) for a in addresses.values())
        assert ports[0] != first and ports == list(range(ports[0], ports[0] + len(ports)))
        assert low <= ports[0] and ports[-1] < high
        assert len(agent.relays) == len(plan.links)  # none left of the first try
        links.close()
