"""Who may connect to a link relay: its client, and nobody else.

Why. A relay listens on the host's address on its client's network (the bridge's gateway), and
Linux answers a host address on every interface: a container of another run, on another
bridge, reaches this run's relays at that address, and through them this run's brokers and
ZooKeeper (emu.cluster.links). A relay stands for one (client, service) link, so it need take
connections only from its client.

How. `Peers` holds what a relay knows of its client: the networks it may come from (its run's
network: a connection from anywhere else is refused at once, with no lookup), and its address
there once known. The address is known only after the client's container started (Docker
gives it then), and may change when the container starts again (a revived node), so a
connection from the network but not from the known address is checked by `locate`, the
client's address now (the cluster asks the engine), at most once per `REFRESH_S` for a client
(a neighbour knocking again and again costs one lookup a second, not one a connection). The
relays of one client share their `Peers`: its MQTT and ZooKeeper links cost one lookup.

The host's own addresses are admitted too: a process of the host reaches every container
directly anyway, and the host's tools measure a link through its relay
(tests/emu_cluster/test_cluster_dilation.py). No container holds them, and a container's
connection to the host's address arrives unchanged (the host's own leaves by `lo`, where
Docker's masquerade rule for the bridge's subnet gives it another of the host's addresses).

A swarm's link agent (emu.links.link_agent) cannot locate its clients (a task's address is the
swarm's to give): it admits its run's networks only.

The accepted path costs one `getpeername` and a comparison per connection; a connection is
never read before it is admitted (emu.links.carry).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable, Iterable

REFRESH_S = 1.0

log = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def network(text: str) -> Network:
    """A network from "a.b.c.d/n", naming the value when it is not one."""
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not a network (address/prefix)") from None


class Peers:
    """Who may connect to the relays of one client (see the module's docstring)."""

    def __init__(self, networks: Iterable[Network | str], address: str | None = None,
                 locate: Callable[[], str | None] | None = None, name: str = "",
                 host: Iterable[str] = ()) -> None:
        """`networks`: where a connection may come from; `address`: the client's, if known;
        `locate`: the client's address now (blocking: run off the loop), None if there is
        none; `name`: the client, for the log; `host`: the host's own addresses, always
        admitted: a process of the host reaches every container
        directly anyway, and the host's tools measure links through the relays."""
        self.host = frozenset(host)
        self.networks = tuple(n if not isinstance(n, str) else network(n) for n in networks)
        if not self.networks:
            raise ValueError(f"peers of {name or 'a relay'}: no network to admit from")
        self.address = address
        self.locate = locate
        self.name = name
        self._looked = -REFRESH_S
        self._lookup: asyncio.Future[str | None] | None = None

    def inside(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in n for n in self.networks)

    def check(self, host: str) -> bool | None:
        """True: admit; False: refuse; None: ask `confirm` (from the network, not the known
        address, and the address can be looked up)."""
        if host == self.address or host in self.host:
            return True
        if not self.inside(host):
            return False
        if self.locate is None:
            return self.address is None  # the networks alone, until an address is given
        return None

    async def confirm(self, host: str) -> bool:
        """Whether `host` is the client's address now, after a lookup unless one was made
        less than REFRESH_S ago (then the known address answers)."""
        loop = asyncio.get_running_loop()
        if self._lookup is None and loop.time() - self._looked >= REFRESH_S:
            assert self.locate is not None
            self._looked = loop.time()
            self._lookup = loop.run_in_executor(None, self.locate)
        lookup = self._lookup
        if lookup is not None:
            try:
                found = await asyncio.shield(lookup)
            except Exception as error:  # noqa: BLE001 - an unknown client is refused
                log.warning("relays of %s: cannot locate the client: %s", self.name, error)
                found = None
            finally:
                if self._lookup is lookup:
                    self._lookup = None
            if found:
                self.address = found
        return host == self.address
