"""A swarm node's link agent: the link relays of the emulated nodes on this node, run by foglab
as a global service (one task per node, in the node's own network stack: emu.swarm.links).

On one host foglab's own process runs a relay per (client, service) link (emu.cluster.relays).
On a swarm of several hosts that would send every link's traffic through foglab's host; here
each node relays the links of the containers it runs: a client reaches its node's agent at
its default route's gateway (emu.agent.config.NODE_HOST), the agent shapes the traffic and
carries it to the service's address. Every node's agent listens for every link, on the same
port everywhere (a client's config names one address before Swarm places it); the traffic of
a link crosses only the agent of the node its client runs on.

It runs in the services image (python3 and emu/links: stdlib only) and is driven from
foglab's host over a control connection: one JSON object per line each way, the first from
the host carrying the run's token (FOGLAB_LINK_TOKEN), then requests

    {"op": "add", "dilation": K, "hops": {"a>b": bps, ...}, "links": [{"key", "host", "port",
      "listen", "shape", "seed", "hops": [["a>b", "b>a"], ...], "protocol"}, ...]}
        -> {"ports": {key: port}}     (listen 0: any free port; else that port, or an error)
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
import json
import os
import socket
import sys
from dataclasses import astuple
from typing import Any

from emu.links.lag import LagProbe
from emu.links.relay import LinkRelay, TokenBucket, hop_bucket
from emu.links.spec import LinkShape, check_dilation

TOKEN_VARIABLE = "FOGLAB_LINK_TOKEN"
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

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
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
        raise ValueError(f"no op {op!r}: add, remove, reshape, counters or lag")

    async def add(self, request: dict[str, Any]) -> dict[str, int]:
        """Start the request's relays; if one cannot listen, close those it started."""
        self.dilation = check_dilation(request.get("dilation", 1.0))
        for hop, bandwidth in request.get("hops", {}).items():
            self.buckets.setdefault(hop, hop_bucket(float(bandwidth), self.dilation))
        started: dict[str, LinkRelay] = {}
        try:
            for link in request["links"]:
                key = link["key"]
                if key in self.relays:
                    raise KeyError(f"a relay for {key} is already running on {self.node}")
                relay = LinkRelay(
                    link["host"], int(link["port"]), shape_of(link["shape"]),
                    listen_host="0.0.0.0", listen_port=int(link.get("listen", 0)),
                    seed=link.get("seed"), dilation=self.dilation,
                    hops=[(self.buckets[up], self.buckets[down]) for up, down in link["hops"]],
                    protocol=link.get("protocol"))
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


async def main() -> None:
    token = os.environ.get(TOKEN_VARIABLE, "")
    if not token:
        sys.exit(f"{TOKEN_VARIABLE} is not set: the link agent takes requests only with it")
    agent = LinkAgent(token)
    server = await agent.serve()
    print(f"{CONTROL_LINE}{server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
