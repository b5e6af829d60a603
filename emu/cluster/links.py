"""Apply a cluster's link shapes: user-space relays on the host, or kernel netem on interfaces.

Relay (hosts without netem, like foglab's own). One LinkRelay per (client, service) pair, all on
one event loop thread (RelaySet). A relay listens on the host's address on the client's site
network (its bridge's gateway address) and carries connections to the service container's
address; the client's AgentConfig names the relay, so its traffic, and only it, takes the
pair's shape. A relay takes connections from its client only (emu.links.peers), and from
the host itself (its own addresses, which no container holds): one from outside the
client's bridge network (a container of another run reaching the host's address) is closed
at once; one from the network is checked against the client's address, which the relay looks
up from the engine at its client's first connection (the container is given its address only
once it starts) and again when a connection from another address comes, at most once a
second (a revived container may come back with another address). Refusals are counted
(`RelayCounters.refused`) and logged once per relay. Relays whose paths cross one
topology hop with a bandwidth share a token bucket per direction of it, so gateways behind
one uplink share its bandwidth as they would on the real link. The relays live in the
process that brought the cluster up.

Netem. Clients use the services' addresses directly (Docker DNS by container name), so each
service joins its clients' site networks. netem shapes what leaves an interface: the client's
shape goes on its eth0 (toward the services) and on the host side of its veth pair (back from
them), so a round trip pays the latency twice, as through a relay. One interface carries all
of a client's links: it takes the shape of the client's broker link, and its ZooKeeper traffic
shares it.

Time dilation (`ClusterPlan.dilation`, K). `shapes` and the plan's links stay emulated (what the
topology says, what reshape is given: the run's tables read them); what a shaper installs is
`installed(shape)`, the shape dilated by K (emu.links.spec.LinkShape.dilated), relay and netem
alike, and shared hops' buckets carry B/K. The relay also stalls a lost chunk K times the RTO.
netem drops real packets instead, so a loss there costs the kernel's RTO, which is not dilated:
1/K of it in emulated time: with loss at K > 1, the relay is the faithful shaper.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import TYPE_CHECKING, TypeVar

from emu.cluster.plan import ClusterPlan
from emu.cluster.plan_links import LinkPlan
from emu.cluster.relays import RelaySet
from emu.links.netem import NetemShaper, netns_of_pid
from emu.links.peers import Network, Peers, network
from emu.links.relay import LinkRelay, RelayCounters
from emu.links.shaping import TokenBucket, hop_bucket
from emu.links.spec import LinkShape

if TYPE_CHECKING:
    pass

Key = tuple[str, str]  # (client, service)
T = TypeVar("T")
Locate = Callable[[str, str], "str | None"]  # (container, network) -> its address there


class Links(ABC):
    """How a cluster's links are shaped; `shaper` is what the results record."""

    shaper: str

    def __init__(self, plan: ClusterPlan) -> None:
        self.plan = plan
        self.shapes: dict[Key, LinkShape] = {link.key: link.shape for link in plan.links}

    def installed(self, shape: LinkShape) -> LinkShape:
        """What the shaper runs on the host for an emulated shape: dilated by the plan's K."""
        return shape.dilated(self.plan.dilation)

    def service_networks(self) -> dict[str, set[str]]:
        """Networks each service must join, besides its own, for its clients to reach it."""
        return {}

    @abstractmethod
    def addresses(self, services: Mapping[str, str], bridges: Mapping[str, str]) -> dict[Key, str]:
        """Where each client finds each of its services ("host:port"), given the services' IPs
        on their own networks and the host's address on each network (by segment)."""

    def attach(self, pids: Mapping[str, int]) -> None:  # noqa: B027 - a no-op unless netem
        """Shape the clients, now running (their init pids by node)."""

    def admit(self, client: str, address: str) -> None:  # noqa: B027 - a no-op unless relays
        """A client's address, as the engine found it once the client started (its relays
        need not look it up at its first connection)."""

    @abstractmethod
    def reshape(self, client: str, service: str, shape: LinkShape) -> None:
        """Change a link's shape while it runs."""

    def counters(self) -> dict[Key, RelayCounters]:
        return {}

    # Whether `lag` measures anything: relays deliver every chunk by a timer, netem does not.
    measures_lag = False

    def lag(self) -> float | None:
        """How late the relays' timers fired since the last call, at worst (emulated s)."""
        return None

    def facts(self) -> dict[str, object]:
        """What the shaper saw beyond the counters, for the run's facts (none here)."""
        return {}

    def stalls(self, since: Mapping[Key, RelayCounters] | None = None) -> dict[str, int]:
        """Chunks each link direction held back for a retransmission (the relay's loss) since
        the `since` counters, keyed "src>dst" as the model's `retransmissions` fact: only
        where there were some. netem drops real packets, which the kernel counts, not this."""
        since = since or {}
        found: dict[str, int] = {}
        for (client, service), now in self.counters().items():
            before = since.get((client, service))
            for key, count, earlier in (
                    (f"{client}>{service}", now.stalls_up, before.stalls_up if before else 0),
                    (f"{service}>{client}", now.stalls_down,
                     before.stalls_down if before else 0)):
                if count > earlier:
                    found[key] = count - earlier
        return found

    def close(self) -> None:  # noqa: B027 - nothing to close unless relays run
        """Stop shaping; what lives in containers goes with them."""

    def _check(self, client: str, service: str) -> LinkPlan:
        return self.plan.link(client, service)


class RelayLinks(Links):
    shaper = "relay"

    def __init__(self, plan: ClusterPlan, seed: int | None = None,
                 locate: Locate | None = None) -> None:
        """`locate(container name, network)`: a client container's address on its network
        now, None if it has none; the engine's (emu.engines.docker.nodes.DockerLocator).
        Without it a client is admitted by its bridge's network alone, never located."""
        super().__init__(plan)
        self.relays = RelaySet(f"relays-{plan.cluster}", plan.dilation)
        self.seed = secrets.randbits(32) if seed is None else seed
        self.listening: dict[Key, str] = {}
        self.peers: dict[str, Peers] = {}  # client -> who may use its relays
        self._locate = locate

    def addresses(self, services: Mapping[str, str], bridges: Mapping[str, str]) -> dict[Key, str]:
        """Each link's relay on its client's bridge, open to its client only: from the
        bridge's network at once, from the client's own address once located."""
        relays: dict[Key, LinkRelay] = {}
        hosts: dict[Key, str] = {}
        shared = self._shared_hops()
        networks = {host: interface_network(host) for host in set(bridges.values())}
        own = local_addresses()
        for index, link in enumerate(self.plan.links):
            client = self.plan.containers[link.client]
            host = bridges[client.segment]
            hosts[link.key] = host
            if link.client not in self.peers:
                self.peers[link.client] = Peers(
                    [networks[host]], locate=functools.partial(self.locate, client.name,
                                                               client.network),
                    name=link.client, host=own)
            hops = [(shared[a, b], shared[b, a]) for a, b in pairwise(link.path)
                    if (a, b) in shared]
            relays[link.key] = LinkRelay(services[link.service], link.port, link.shape,
                                         listen_host=host, seed=self.seed + index, hops=hops,
                                         dilation=self.plan.dilation, protocol=link.role,
                                         peers=self.peers[link.client])
        if not self.relays.running:
            self.relays.start()
        ports = self.relays.add(relays)
        self.listening = {key: f"{hosts[key]}:{port}" for key, port in ports.items()}
        return dict(self.listening)

    def admit(self, client: str, address: str) -> None:
        peers = self.peers.get(client)
        if peers is not None:
            peers.address = address

    def locate(self, container: str, network: str) -> str | None:
        """A container's address on a network now (a relay's lookup, off its loop)."""
        return self._locate(container, network) if self._locate is not None else None

    def _shared_hops(self) -> dict[tuple[str, str], TokenBucket]:
        """A bucket per direction of each topology hop with a bandwidth that two or more
        relays cross: their traffic shares the hop's bandwidth, as on the real link."""
        crossing: dict[frozenset[str], list[float]] = {}
        for link in self.plan.links:
            for (a, b), bandwidth in zip(pairwise(link.path), link.bandwidths, strict=False):
                if bandwidth is not None:
                    crossing.setdefault(frozenset((a, b)), []).append(bandwidth)
        buckets: dict[tuple[str, str], TokenBucket] = {}
        k = self.plan.dilation
        for hop, bandwidths in crossing.items():
            if len(bandwidths) > 1:
                a, b = sorted(hop)
                buckets[a, b] = hop_bucket(bandwidths[0], k)
                buckets[b, a] = hop_bucket(bandwidths[0], k)
        return buckets

    def reshape(self, client: str, service: str, shape: LinkShape) -> None:
        self._check(client, service)
        self.relays.reshape((client, service), shape)
        self.shapes[(client, service)] = shape

    def counters(self) -> dict[Key, RelayCounters]:
        return self.relays.counters()

    measures_lag = True

    def lag(self) -> float | None:
        return self.relays.lag()

    def close(self) -> None:
        self.relays.stop()
        close = getattr(self._locate, "close", None)
        if close is not None:
            close()


def outside_a_running_loop(function: Callable[[], T]) -> T:
    """Call `function`, on a thread of its own if this one runs an asyncio loop: pyroute2's
    synchronous calls run a loop of their own in the calling thread, which fails ("This event
    loop is already running") in one that runs a loop already, as Jupyter's kernel does."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return function()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(function).result()


def interface_network(address: str) -> Network:
    """The network of the host's interface that holds `address` (a bridge's gateway): the
    addresses a relay listening there may be reached from on that bridge."""
    from pyroute2 import IPRoute

    def find() -> Network:
        with IPRoute() as ipr:
            for message in ipr.get_addr(address=address):
                return network(f"{address}/{message['prefixlen']}")
        raise LookupError(f"no interface of this host has address {address}: a relay cannot "
                          f"listen there")

    return outside_a_running_loop(find)


def local_addresses() -> frozenset[str]:
    """The host's own addresses, all of them: the host's connection to a relay on a bridge's
    address comes out of Docker's masquerade rule for the bridge's subnet (its packets leave
    by `lo`, not the bridge) with another of them as its source."""
    from pyroute2 import IPRoute

    def find() -> frozenset[str]:
        with IPRoute() as ipr:
            return frozenset(message.get_attr("IFA_ADDRESS") for message in ipr.get_addr()
                             if message.get_attr("IFA_ADDRESS"))

    return outside_a_running_loop(find)


def host_side_veth(pid: int, ifname: str = "eth0") -> str:
    """The host's end of the veth pair whose other end is `ifname` in a process's netns."""
    from pyroute2 import IPRoute

    def find() -> str:
        with IPRoute(netns=netns_of_pid(pid), flags=0) as ipr:
            found = list(ipr.get_links(ifname=ifname))
            if not found:
                raise LookupError(f"no interface {ifname} in the netns of pid {pid}")
            peer = found[0].get_attr("IFLA_LINK")
        with IPRoute() as ipr:
            links = list(ipr.get_links(peer))
        if not links:
            raise LookupError(f"no host interface {peer}, the peer of {ifname} of pid {pid}")
        return links[0].get_attr("IFLA_IFNAME")

    return outside_a_running_loop(find)


class NetemLinks(Links):
    shaper = "netem"
    WORKERS = 8

    def __init__(self, plan: ClusterPlan) -> None:
        super().__init__(plan)
        self.interfaces: dict[str, list[tuple[str, str | None]]] = {}  # client -> (if, netns)

    def service_networks(self) -> dict[str, set[str]]:
        joined: dict[str, set[str]] = {}
        for link in self.plan.links:
            client, service = self.plan.containers[link.client], self.plan.containers[link.service]
            if client.network != service.network:
                joined.setdefault(link.service, set()).add(client.network)
        return joined

    def addresses(self, services: Mapping[str, str], bridges: Mapping[str, str]) -> dict[Key, str]:
        return {link.key: self.plan.containers[link.service].address for link in self.plan.links}

    def client_shape(self, client: str) -> LinkShape:
        links = self.plan.links_of(client)
        mqtt = next((link for link in links if link.role == "mqtt"), links[0])
        return self.shapes[mqtt.key]

    def attach(self, pids: Mapping[str, int]) -> None:
        clients = [c for c in pids if self.plan.links_of(c)]

        def shape(client: str) -> None:
            pid = pids[client]
            interfaces = [("eth0", netns_of_pid(pid)), (host_side_veth(pid), None)]
            self.interfaces[client] = interfaces
            for ifname, netns in interfaces:
                with NetemShaper(ifname, netns) as shaper:
                    shaper.apply(self.installed(self.client_shape(client)))

        with ThreadPoolExecutor(self.WORKERS) as pool:
            list(pool.map(shape, clients))

    def reshape(self, client: str, service: str, shape: LinkShape) -> None:
        """Reshape the client's interface: every link of the client takes the shape."""
        self._check(client, service)
        for link in self.plan.links_of(client):
            self.shapes[link.key] = shape
        installed = self.installed(shape)
        for ifname, netns in self.interfaces.get(client, []):
            with NetemShaper(ifname, netns) as shaper:
                shaper.apply(installed)


def make_links(shaper: str, plan: ClusterPlan, seed: int | None = None,
               locate: Locate | None = None) -> Links:
    """The links of a plan by their shaper; `locate`: the engine's (RelayLinks)."""
    if shaper == "netem":
        return NetemLinks(plan)
    if shaper == "relay":
        return RelayLinks(plan, seed, locate)
    raise ValueError(f"a shaper is netem or relay, not {shaper!r}")
