"""A swarm's links, shaped on the node each client runs on: a link agent per node.

On one host foglab's process relays every link (emu.cluster.links.RelayLinks). On a swarm a
global service runs a link agent (emu.links.link_agent) in each node's own network stack; the
agents relay the links, so a link's traffic goes from its client to its node's agent and from
there to the service, not through foglab's host. NodeLinks drives them over a control
connection each: it gives every agent every link (on the same port on every node: a client's
config names one address, `NODE_HOST:port`, which its agent resolves to its default route's
gateway, its own node), sends reshapes to all of them, and sums their counters (a link's
traffic crosses one agent, its client's node's).

Shared hops (gateways behind one uplink share its bandwidth) are shared within a node: the
gateways of a site placed on one node share the hop as on one host; a site's gateways spread
over several nodes would each get the hop's bandwidth on their node.
"""

from __future__ import annotations

import contextlib
import json
import random
import secrets
import socket
import threading
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from emu.agent.config import NODE_HOST
from emu.cluster.links import Key, Links
from emu.cluster.plan import ClusterPlan
from emu.links.link_agent import shape_data
from emu.links.relay import RelayCounters
from emu.links.spec import LinkShape

CONTROL_TIMEOUT_S = 60.0  # connecting, and an `add` of many links
# The links' ports, the same on every node: a block of consecutive ports at a random base
# below Linux's ephemeral range (32768 up), where a node's own connections take theirs; a
# block taken on some node is given back everywhere and another tried.
PORTS = (20000, 32768)
PORT_TRIES = 8
REQUEST_TIMEOUT_S = 10.0  # any other request: an agent that does not answer has left


class LinkAgentError(RuntimeError):
    """A link agent refused a request or could not be reached; the message names the node."""


class AgentControl:
    """A control connection to one node's link agent: one request at a time."""

    def __init__(self, node: str, host: str, port: int, token: str,
                 timeout: float = CONTROL_TIMEOUT_S) -> None:
        self.node = node
        self._lock = threading.Lock()
        try:
            self._socket = socket.create_connection((host, port), timeout=timeout)
        except OSError as error:
            raise LinkAgentError(f"the link agent of swarm node {node} does not answer at "
                                 f"{host}:{port}: {error}") from None
        self._file = self._socket.makefile("rwb")
        self._call({"token": token})

    def request(self, op: str, timeout: float = REQUEST_TIMEOUT_S,
                **arguments: Any) -> dict[str, Any]:
        with self._lock:
            self._socket.settimeout(timeout)
            return self._call({"op": op, **arguments})

    def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            self._file.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            self._file.flush()
            line = self._file.readline()
        except OSError as error:
            raise LinkAgentError(f"the link agent of swarm node {self.node}: {error}") from None
        if not line:
            raise LinkAgentError(f"the link agent of swarm node {self.node} closed its control "
                                 f"connection")
        answer = json.loads(line)
        if not answer.pop("ok", False):
            raise LinkAgentError(f"the link agent of swarm node {self.node}: "
                                 f"{answer.get('error')}")
        return answer

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
            self._socket.close()


def link_key(key: Key) -> str:
    return f"{key[0]}>{key[1]}"


class NodeLinks(Links):
    """The plan's links on the link agents of a swarm's nodes (see the module's docstring).

    `connect(controls)` hands it the agents (node -> (host, port) of its control port), which
    the swarm engine started with `token` (NodeLinks makes one; the engine gives it to the
    agents' service)."""

    shaper = "relay"
    measures_lag = True

    def __init__(self, plan: ClusterPlan, seed: int | None = None) -> None:
        super().__init__(plan)
        self.seed = secrets.randbits(32) if seed is None else seed
        self.token = secrets.token_hex(16)
        self.agents: dict[str, AgentControl] = {}
        self.ports: dict[Key, int] = {}
        self.carriers: dict[str, set[str]] = {}  # "client>service" -> nodes that carried it
        self.gone: dict[str, str] = {}  # node -> why its agent is no longer asked
        self._counted: dict[str, dict[str, list[int]]] = {}  # node -> its agent's last counters

    def connect(self, controls: Mapping[str, tuple[str, int]]) -> None:
        for node, (host, port) in sorted(controls.items()):
            self.agents[node] = AgentControl(node, host, port, self.token)

    def addresses(self, services: Mapping[str, str], bridges: Mapping[str, str]) -> dict[Key, str]:
        """Every link on every node's agent, on one port everywhere (a block of PORTS; one
        taken on some node: the block is given back and another tried, PORT_TRIES times;
        then the error names the node and the port)."""
        if not self.agents:
            raise LinkAgentError("no link agent is connected")
        links, hops = self._requests(services)
        # The agents relay to the run's services only (emu.links.link_agent: fixed at the first).
        targets = sorted({f"{link['host']}/32" for link in links})
        for agent in self.agents.values():
            agent.request("networks", targets=targets)
        low, high = PORTS
        if len(links) > high - low:
            raise LinkAgentError(f"{len(links)} links do not fit ports {low} to {high - 1}")
        keys = [link["key"] for link in links]
        draw = random.Random(self.seed)
        for attempt in range(PORT_TRIES):
            base = draw.randrange(low, high - len(links) + 1)
            for offset, link in enumerate(links):
                link["listen"] = base + offset
            listening: list[AgentControl] = []
            try:
                for agent in self.agents.values():
                    agent.request("add", CONTROL_TIMEOUT_S, dilation=self.plan.dilation,
                                  hops=hops, links=links)
                    listening.append(agent)
                break
            except LinkAgentError as error:
                if "cannot listen" not in str(error) or attempt == PORT_TRIES - 1:
                    raise
                for agent in listening:
                    agent.request("remove", keys=keys)
        ports = {link["key"]: link["listen"] for link in links}
        self.ports = {link.key: ports[link_key(link.key)] for link in self.plan.links}
        return {key: f"{NODE_HOST}:{port}" for key, port in self.ports.items()}

    def _requests(self, services: Mapping[str, str]) -> tuple[list[dict], dict[str, float]]:
        """The agents' `add`: each link's relay, and the buckets of hops two or more cross."""
        crossing: dict[frozenset[str], list[float]] = {}
        for link in self.plan.links:
            for (a, b), bandwidth in zip(pairwise(link.path), link.bandwidths, strict=False):
                if bandwidth is not None:
                    crossing.setdefault(frozenset((a, b)), []).append(bandwidth)
        hops: dict[str, float] = {}
        for hop, bandwidths in crossing.items():
            if len(bandwidths) > 1:
                a, b = sorted(hop)
                hops[f"{a}>{b}"] = hops[f"{b}>{a}"] = bandwidths[0]
        links = []
        for index, link in enumerate(self.plan.links):
            shared = [[f"{a}>{b}", f"{b}>{a}"] for a, b in pairwise(link.path)
                      if f"{a}>{b}" in hops]
            links.append({"key": link_key(link.key), "host": services[link.service],
                          "port": link.port, "listen": 0, "shape": shape_data(link.shape),
                          "seed": self.seed + index, "hops": shared, "protocol": link.role})
        return links, hops

    def reshape(self, client: str, service: str, shape: LinkShape) -> None:
        """Reshape the link on every node (only its client's node carries its traffic)."""
        self._check(client, service)
        self._ask("reshape", key=link_key((client, service)), shape=shape_data(shape))
        self.shapes[(client, service)] = shape

    def counters(self) -> dict[Key, RelayCounters]:
        """Each link's counters, summed over the nodes' agents (a gone agent's as it last
        counted them, so the sums never go back)."""
        total: dict[Key, list[int]] = {}
        keys = {link_key(link.key): link.key for link in self.plan.links}
        for node, answer in self._ask("counters"):
            self._counted[node] = answer["counters"]
        for node, counted in self._counted.items():
            for key, values in counted.items():
                found = total.setdefault(keys[key], [0] * len(values))
                for i, value in enumerate(values):
                    found[i] += value
                if values[0]:  # a connection: the link's client runs on this node
                    self.carriers.setdefault(key, set()).add(node)
        return {key: RelayCounters(*values) for key, values in total.items()}

    def lag(self) -> float | None:
        """The worst lateness of any node's relay loop since the last call (emulated s)."""
        lags = [answer["lag"] for _, answer in self._ask("lag")]
        known = [lag for lag in lags if lag is not None]
        return max(known) if known else None

    def _ask(self, op: str, **arguments: Any) -> list[tuple[str, dict[str, Any]]]:
        """Each agent's answer, but those of nodes that left (an agent that does not answer
        is gone with its node, and with it its clients: emu.engines.swarm.routing's NodeLeft)."""
        answers = []
        for node, agent in self.agents.items():
            if node in self.gone:
                continue
            try:
                answers.append((node, agent.request(op, **arguments)))
            except LinkAgentError as error:
                self.gone[node] = str(error)
        return answers

    def facts(self) -> dict[str, object]:
        """Which node's agent carried each link ("client>service" -> nodes), as far as the
        counters read so far saw (its client's node, or several if it moved), and the agents
        that stopped answering."""
        found: dict[str, object] = {"link_carriers": {
            key: sorted(nodes) for key, nodes in sorted(self.carriers.items())}}
        if self.gone:
            found["link_agents_gone"] = dict(self.gone)
        return found

    def close(self) -> None:
        """Drop the control connections; the agents go with their service at `down`."""
        for agent in self.agents.values():
            agent.close()
        self.agents.clear()
