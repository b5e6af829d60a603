"""A swarm node's link agent (emu.links.link_agent) in a holder of the run's token's hands, on
loopback with real relays: an `add` toward an address outside the run's networks (the node's
sshd, a metadata service) is refused, the networks the host named first cannot be widened,
a relay given the clients' networks closes a connection from elsewhere, and the token is
read from a file (a Docker secret) rather than the environment."""

from __future__ import annotations

import socket

import pytest

from emu.cluster.plan import plan_cluster
from emu.engines.swarm.links import AgentControl, LinkAgentError, NodeLinks
from emu.links.link_agent import TOKEN_FILE_VARIABLE, TOKEN_VARIABLE, read_token, shape_data
from emu.links.spec import LinkShape
from tests.emu_cluster.test_cluster import small_topology
from tests.links.test_link_agent import SERVICE_HOST, agent_on_loopback, echo_on

TOKEN = "the-token"


def link(key: str, host: str, port: int) -> dict:
    return {"key": key, "host": host, "port": port, "listen": 0,
            "shape": shape_data(LinkShape(0.0)), "seed": 1, "hops": []}


def test_a_token_holder_cannot_open_a_forwarder_outside_the_runs_networks() -> None:
    with agent_on_loopback(TOKEN) as (agent, port):
        host = AgentControl("node-a", "127.0.0.1", port, TOKEN)
        # Before the host named the run's networks, nothing is relayed.
        with pytest.raises(LinkAgentError, match="no networks were given"):
            host.request("add", links=[link("gw>broker", SERVICE_HOST, 1883)])
        host.request("networks", targets=[f"{SERVICE_HOST}/32"])
        # The exploit: another holder of the token asks for forwarders to the node's sshd and
        # to a cloud's metadata address.
        intruder = AgentControl("node-a", "127.0.0.1", port, TOKEN)
        for target, port_ in (("127.0.0.1", 22), ("169.254.169.254", 80)):
            with pytest.raises(LinkAgentError, match=f"{target} is outside the run's networks"):
                intruder.request("add", links=[link("x>y", target, port_)])
        # Nor may it widen the networks, nor slip a bad target among good ones.
        with pytest.raises(LinkAgentError, match="fixed already"):
            intruder.request("networks", targets=["0.0.0.0/0"])
        with pytest.raises(LinkAgentError, match="fixed already"):
            intruder.request("networks", targets=[f"{SERVICE_HOST}/32", "127.0.0.1/32"])
        with pytest.raises(LinkAgentError, match="127.0.0.1 is outside"):
            intruder.request("add", links=[link("a>b", SERVICE_HOST, 1883),
                                           link("c>d", "127.0.0.1", 22)])
        with pytest.raises(LinkAgentError, match="'broker' is not an IP address"):
            intruder.request("add", links=[link("a>b", "broker", 1883)])
        assert agent.relays == {}  # none started, not even the good one of a refused batch
        # The same networks again (the host retrying) are no change; the run's service is.
        intruder.request("networks", targets=[f"{SERVICE_HOST}/32"])
        assert "gw>broker" in host.request(
            "add", links=[link("gw>broker", SERVICE_HOST, 1883)])["ports"]
        host.close()
        intruder.close()


def test_a_hello_with_other_networks_than_the_first_is_refused() -> None:
    with agent_on_loopback(TOKEN) as (_, port):
        first = AgentControl("node-a", "127.0.0.1", port, TOKEN)
        first.request("networks", targets=["10.0.0.0/24"])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            raw.sendall(b'{"token": "the-token", "targets": ["0.0.0.0/0"]}\n')
            answer = raw.makefile("rb").readline()
        assert b"fixed already" in answer
        first.close()


def test_the_agents_relays_close_connections_from_outside_the_clients_networks() -> None:
    ports = [18830]
    with agent_on_loopback(TOKEN) as (agent, control), echo_on(SERVICE_HOST, ports):
        with socket.create_connection(("127.0.0.1", control), timeout=5) as raw:
            raw.sendall(b'{"token": "the-token", "targets": ["127.0.0.77/32"], '
                        b'"peers": ["127.0.0.0/30"]}\n')
            reader = raw.makefile("rb")
            assert b'"ok":true' in reader.readline()
            host = AgentControl("node-a", "127.0.0.1", control, TOKEN)
            relay = host.request("add", links=[link("gw>broker", SERVICE_HOST, ports[0])])
            relay_port = relay["ports"]["gw>broker"]
            for source, answer in (("127.0.0.2", b"hello"), ("127.0.0.9", b"")):
                with socket.create_connection(("127.0.0.1", relay_port), timeout=5,
                                              source_address=(source, 0)) as client:
                    try:
                        client.sendall(b"hello")
                        assert client.recv(16) == answer
                    except ConnectionResetError:
                        assert answer == b""
            (connections, *_, refused) = host.request("counters")["counters"]["gw>broker"]
            assert (connections, refused) == (1, 1)
            host.close()
        assert agent.peers is not None


def test_the_token_is_read_from_a_file_before_the_environment(tmp_path) -> None:
    secret = tmp_path / "token"
    secret.write_text("from-the-file\n")
    assert read_token({TOKEN_FILE_VARIABLE: str(secret), TOKEN_VARIABLE: "x"}) == "from-the-file"
    assert read_token({TOKEN_VARIABLE: "from-env"}) == "from-env"
    assert read_token({}) == ""


def test_node_links_name_the_runs_services_as_the_agents_targets() -> None:
    plan = plan_cluster(small_topology(), "agent-access")
    links = NodeLinks(plan, seed=1)
    with agent_on_loopback(links.token) as (agent, control):
        links.connect({"node-a": ("127.0.0.1", control)})
        links.addresses(dict.fromkeys(plan.containers, SERVICE_HOST), {})
        assert [str(n) for n in agent.targets or ()] == [f"{SERVICE_HOST}/32"]
        links.close()
