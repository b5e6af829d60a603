"""A cluster's ZooKeeper servers: where they stand, and each one's zoo.cfg. Plain data and
text, without Docker.

By default one server; three make an ensemble, each server with a zoo.cfg listing all
(`server.N=`) and its `myid`. Servers run on the coordinators nearest their clients (least
total path latency from the agents, ties to the first declared); when there are fewer
coordinators than servers, containers named `zookeeper` (or `zookeeper-N` in an ensemble) are
added beside the first coordinator, or beside the broker nearest the agents when the topology
has no coordinator. A coordinator that hosts no server idles. Clients reach an added server
through the path to the node it stands beside.

At a dilation K the tick lasts K times as long on the host, so every bound counted in ticks
keeps its emulated value; an ensemble's quorum timers are scaled with it (`zookeeper_files`).
"""

from __future__ import annotations

import math

from emu.cluster.names import container_name
from topologies.errors import SpecError
from topologies.model import Node, Topology
from topologies.routing import NoRoute, Routes
from workloads.recovery import ZK_MAX_SESSION_TICKS, ZK_MIN_SESSION_TICKS, ZK_TICK_S

ZOOKEEPER_PORT = 2181
ZOOKEEPER_PEER_PORTS = (2888, 3888)
ZOOKEEPER_NAME = "zookeeper"
ZOOKEEPER_CONFIG = "/etc/foglab/zoo.cfg"
ZOOKEEPER_DATA = "/var/lib/zookeeper"
# ZooKeeper's timers beside the tick, for an ensemble's quorum (ms): the connection timeout
# between servers and the leader election's notification intervals (their defaults).
ZK_CNX_TIMEOUT_MS = 5000
ZK_ELECTION_NOTIFICATION_MS = (200, 60000)


def place_servers(topology: Topology, routes: Routes, count: int,
                  agents: list[Node]) -> tuple[list[str], dict[str, str | None]]:
    """The `count` servers' names in myid order, and the node each stands beside (None: no
    node to stand beside), for the clients standing at `agents`."""
    coordinators = central(routes, topology.of_kind("coordinator"), agents)
    hosts = [c.name for c in coordinators[:count]]
    anchor = (coordinators[0].name if coordinators else
              next((b.name for b in central(routes, topology.of_kind("broker"), agents)),
                   None))
    added = count - len(hosts)
    names = ([ZOOKEEPER_NAME] if count == 1 else
             [f"{ZOOKEEPER_NAME}-{i}" for i in range(len(hosts) + 1, count + 1)])
    names = names[:added] if added else []
    for name in names:
        if name in topology.nodes:
            raise SpecError(("nodes", name, "name"), name,
                            f"a node name other than {name}: the cluster adds a ZooKeeper "
                            "server of that name (or make the node kind: coordinator)",
                            f"topology {topology.name}")
    anchors = {host: host for host in hosts} | {name: anchor for name in names}
    return hosts + names, anchors


def central(routes: Routes, candidates: list[Node], clients: list[Node]) -> list[Node]:
    """Candidates by total path latency from the clients; unreachable ones last."""
    def latency(source: str, target: str) -> float | None:
        try:
            return routes.latency(source, target)
        except NoRoute:
            return None

    def total(candidate: Node) -> float:
        latencies = [latency(c.name, candidate.name) for c in clients]
        return math.inf if None in latencies else sum(latencies)

    order = {n.name: i for i, n in enumerate(candidates)}
    return sorted(candidates, key=lambda n: (total(n), order[n.name]))


def zookeeper_files(cluster: str, servers: list[str], server: str,
                    dilation: float = 1.0) -> tuple[tuple[str, str], ...]:
    """A server's zoo.cfg and, in an ensemble, every server.N (by container name) and its myid.

    The tick and the sessions it accepts come from workloads.recovery, which the model's
    failure detector reads too: a session expires on the first tick after its timeout. At a
    dilation K the tick lasts K times as long on the host, so every bound counted in ticks
    (sessions, initLimit, syncLimit) keeps its emulated value; an ensemble's quorum timers
    (cnxTimeout, the election's notification intervals: ZooKeeper reads unknown keys as
    `zookeeper.<key>` system properties) are scaled with it."""
    peer, election = ZOOKEEPER_PEER_PORTS
    tick_ms = round(ZK_TICK_S * 1000 * dilation)
    lines = [
        "# foglab's ZooKeeper server, written by emu.cluster.zookeeper_servers",
        f"tickTime={tick_ms}", f"minSessionTimeout={ZK_MIN_SESSION_TICKS * tick_ms}",
        f"maxSessionTimeout={ZK_MAX_SESSION_TICKS * tick_ms}",
        # An ensemble's start and follower lag, in ticks: 20 s and 10 s.
        f"initLimit={round(20 / ZK_TICK_S)}", f"syncLimit={round(10 / ZK_TICK_S)}",
        f"dataDir={ZOOKEEPER_DATA}",
        f"clientPort={ZOOKEEPER_PORT}", "maxClientCnxns=0", "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,stat,srvr,mntr",
    ]
    if len(servers) == 1:
        return ((ZOOKEEPER_CONFIG, "\n".join(lines) + "\n"),)
    lines += [
        # Bind the quorum ports on every interface: a container's own name may resolve to an
        # address of another of its networks.
        "quorumListenOnAllIPs=true",
        *_quorum_timers(dilation),
        *(f"server.{i}={container_name(cluster, name)}:{peer}:{election}"
          for i, name in enumerate(servers, start=1)),
    ]
    myid = servers.index(server) + 1
    return ((ZOOKEEPER_CONFIG, "\n".join(lines) + "\n"), (f"{ZOOKEEPER_DATA}/myid", f"{myid}\n"))


def _quorum_timers(dilation: float) -> list[str]:
    if dilation == 1:
        return []
    low, high = ZK_ELECTION_NOTIFICATION_MS
    return [f"# Quorum timers at dilation {dilation:g}: their defaults x {dilation:g}",
            f"cnxTimeout={round(ZK_CNX_TIMEOUT_MS * dilation)}",
            f"fastleader.minNotificationInterval={round(low * dilation)}",
            f"fastleader.maxNotificationInterval={round(high * dilation)}"]
