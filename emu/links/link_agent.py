"""A swarm node's link agent: the link relays of the emulated nodes on this node, run by foglab
as a global service (one task per node, in the node's own network stack: emu.engines.swarm.links).

On one host foglab's own process runs a relay per (client, service) link (emu.cluster.relays).
On a swarm of several hosts that would send every link's traffic through foglab's host; here
each node relays the links of the containers it runs: a client reaches its node's agent at
its default route's gateway (emu.agent.config.NODE_HOST), the agent shapes the traffic and
carries it to the service's address. Every node's agent listens for every link, on the same
port everywhere (a client's config names one address before Swarm places it); the traffic of
a link crosses only the agent of the node its client runs on.

It runs in the services image (python3 and emu/links: stdlib only) and is driven from
foglab's host over a control connection: one JSON object per line each way, the first from
the host carrying the run's token (read from the file FOGLAB_LINK_TOKEN_FILE names, or
FOGLAB_LINK_TOKEN) and perhaps the run's networks: `{"token", "targets": [cidr, ...],
"peers": [cidr, ...]}`. `targets` are what
the relays may carry connections to (the run's services); an `add` naming a host outside them
is refused, so that a holder of the token cannot open a forwarder to any address (the node's
sshd, a metadata service). `peers`, if given, are where clients may connect from (a relay
closes any other connection, emu.links.peers); without them any peer that reaches the port.
The first hello (or `networks` request) naming them fixes them for the agent's life; a later
one may not change them, and until then every `add` is refused. Then requests

    {"op": "networks", "targets": [cidr, ...], "peers": [cidr, ...]}  -> {}  (as in the hello)

    {"op": "add", "dilation": K, "hops": {"a>b": bps, ...}, "links": [{"key", "host", "port",
      "listen", "listen_host", "shape", "seed", "hops": [["a>b", "b>a"], ...], "protocol"},
      ...]}
        -> {"ports": {key: port}}     (listen 0: any free port; else that port, or an error;
                                       listen_host: the address to bind, 0.0.0.0 if none)
    {"op": "remove", "keys": [key, ...]}           -> {}  (closes those relays)
    {"op": "reshape", "key": key, "shape": {...}}   -> {}
    {"op": "counters"}                -> {"counters": {key: [connections, bytes_up, ...]}}
    {"op": "lag"}                     -> {"lag": the loop's worst lateness (emulated s) or null}

each answered {"ok": true, ...} or {"ok": false, "error": "..."}. The agent prints the control
port it listens on (`CONTROL_LINE`) for the host to read from its log.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import os
import socket
import sys
from dataclasses import astuple
from typing import Any

from emu.links.lag import LagProbe
from emu.links.peers import Network, Peers, network
from emu.links.relay import LinkRelay
from emu.links.shaping import TokenBucket, hop_bucket
from emu.links.spec import LinkShape, check_dilation

TOKEN_VARIABLE = "FOGLAB_LINK_TOKEN"
TOKEN_FILE_VARIABLE = "FOGLAB_LINK_TOKEN_FILE"  # the path of a file holding it (preferred)
CONTROL_LINE = "foglab link agent: control port "
LIMIT = 1 << 24  # the longest control line (an `add` of a few thousand links)


def shape_of(data: dict[str, Any]) -> LinkShape:
    return LinkShape(float(data["latency_s"]), float(data.get("jitter_s", 0)),
                     None if data.get("bandwidth_bps") is None else float(data["bandwidth_bps"]),
                     float(data.get("loss", 0)))


def shape_data(shape: LinkShape) -> dict[str, Any]:
    return {"latency_s": shape.latency_s, "jitter_s": shape.jitter_s,
            "bandwidth_bps": shape.bandwidth_bps, "loss": shape.loss}


class LinkAgent:
    """The relays of one node, by key, on the running loop; and the requests that drive them."""

    def __init__(self, token: str) -> None:
        self.token = token
        # What the run's relays may reach and who may use them (see `_fix_networks`): fixed
        # by the first hello that names them; None: not yet, every `add` is refused.
        self.targets: tuple[Network, ...] | None = None
        self.peers: Peers | None = None
        self.node = socket.gethostname()
        self.relays: dict[str, LinkRelay] = {}
        self.buckets: dict[str, TokenBucket] = {}
        self.dilation = 1.0
        self.probe = LagProbe()

    async def serve(self, host: str = "0.0.0.0", port: int = 0) -> asyncio.Server:
        server = await asyncio.start_server(self._control, host, port, limit=LIMIT)
        asyncio.get_running_loop().create_task(self.probe.run())
        return server

    async def _control(self, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        try:
            hello = json.loads(await reader.readline() or b"{}")
            if not hmac.compare_digest(str(hello.get("token", "")), self.token):
                await _answer(writer, {"ok": False, "error": "wrong token"})
                return
            try:
                self._fix_networks(hello)
            except (ValueError, PermissionError) as error:
                await _answer(writer, {"ok": False, "error": str(error)})
                return
            await _answer(writer, {"ok": True, "node": self.node})
            while line := await reader.readline():
                try:
                    answer = {"ok": True, **await self.handle(json.loads(line))}
                except Exception as error:  # noqa: BLE001 - the host gets every error
                    answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
                await _answer(writer, answer)
        except (ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    def _fix_networks(self, hello: dict[str, Any]) -> None:
        """The run's networks, from the host's hello or `networks` request: `targets`, the
        CIDRs its relays may carry connections to (the run's services), and `peers`, those
        their clients come from (none: any). The first message that names them fixes them: a
        later one (another holder of the token) may only name the same, so that no `add` can
        open a forwarder to an address outside the run (the node's sshd, a metadata service).
        """
        if "targets" not in hello:
            return
        targets = tuple(network(str(n)) for n in hello["targets"])
        peers = tuple(network(str(n)) for n in hello.get("peers") or ())
        if self.targets is None:
            self.targets = targets
            self.peers = Peers(peers, name=self.node) if peers else None
        elif set(targets) != set(self.targets) or set(peers) != set(
                self.peers.networks if self.peers else ()):
            raise PermissionError("the run's networks are fixed already: they may not be "
                                  "changed")

    def _check_target(self, key: str, host: str) -> None:
        if self.targets is None:
            raise PermissionError(f"link {key}: no networks were given when the host "
                                  f"connected: the agent opens no relay")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"link {key}: host {host!r} is not an IP address") from None
        if not any(address in n for n in self.targets):
            raise PermissionError(f"link {key}: {host} is outside the run's networks "
                                  f"({', '.join(map(str, self.targets))})")

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "networks":
            self._fix_networks(request)
            return {}
        if op == "add":
            return {"ports": await self.add(request)}
        if op == "remove":
            relays = [self.relays.pop(key) for key in request["keys"] if key in self.relays]
            await asyncio.gather(*(r.close() for r in relays), return_exceptions=True)
            return {}
        if op == "reshape":
            self.relays[request["key"]].reshape(shape_of(request["shape"]))
            return {}
        if op == "counters":
            return {"counters": {key: list(astuple(relay.counters()))
                                 for key, relay in self.relays.items()}}
        if op == "lag":
            probes, _, worst = self.probe.take()
            return {"lag": worst / self.dilation if probes else None}
        raise ValueError(f"no op {op!r}: networks, add, remove, reshape, counters or lag")

    async def add(self, request: dict[str, Any]) -> dict[str, int]:
        """Start the request's relays; if one cannot listen, close those it started."""
        self.dilation = check_dilation(request.get("dilation", 1.0))
        for hop, bandwidth in request.get("hops", {}).items():
            self.buckets.setdefault(hop, hop_bucket(float(bandwidth), self.dilation))
        for link in request["links"]:  # all checked before any starts
            self._check_target(str(link["key"]), str(link["host"]))
        started: dict[str, LinkRelay] = {}
        try:
            for link in request["links"]:
                key = link["key"]
                if key in self.relays:
                    raise KeyError(f"a relay for {key} is already running on {self.node}")
                relay = LinkRelay(
                    link["host"], int(link["port"]), shape_of(link["shape"]),
                    listen_host=str(link.get("listen_host") or "0.0.0.0"),
                    listen_port=int(link.get("listen", 0)),
                    seed=link.get("seed"), dilation=self.dilation,
                    hops=[(self.buckets[up], self.buckets[down]) for up, down in link["hops"]],
                    protocol=link.get("protocol"), peers=self.peers)
                try:
                    await relay.start()
                except OSError as error:
                    raise OSError(f"link {key}: node {self.node} cannot listen on port "
                                  f"{link.get('listen', 0)}: {error.strerror}") from None
                started[key] = relay
        except BaseException:
            await asyncio.gather(*(r.close() for r in started.values()), return_exceptions=True)
            raise
        self.relays.update(started)
        return {key: relay.port for key, relay in started.items()}


async def _answer(writer: asyncio.StreamWriter, answer: dict[str, Any]) -> None:
    writer.write(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
    await writer.drain()


def read_token(environ: dict[str, str] | os._Environ[str]) -> str:
    """The run's token: from the file TOKEN_FILE_VARIABLE names (a Docker secret: not in the
    service's environment, which `docker inspect` shows), else TOKEN_VARIABLE; "" if none."""
    path = environ.get(TOKEN_FILE_VARIABLE)
    if path:
        with open(path) as file:
            return file.read().strip()
    return environ.get(TOKEN_VARIABLE, "")


async def main() -> None:
    token = read_token(os.environ)
    if not token:
        sys.exit(f"neither {TOKEN_FILE_VARIABLE} nor {TOKEN_VARIABLE} is set: the link agent "
                 f"takes requests only with the run's token")
    agent = LinkAgent(token)
    server = await agent.serve()
    print(f"{CONTROL_LINE}{server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
