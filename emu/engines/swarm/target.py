"""Which swarm of several nodes `run.engine: swarm` runs on, and how foglab reaches each node.

A swarm of one node is this host's own engine: nothing to say. On several nodes foglab needs
two facts the swarm cannot give it:
- each node's engine (hostname as the swarm lists it -> engine URL): a task's container is
  inspected, signalled, exec'd and its records copied out through its own node's engine;
- how the nodes get foglab's images: a registry (`image_ref(tag)` -> the reference they pull).

A program (the tests) sets them with `use_target(SwarmTarget(...))`; a user through the
environment: FOGLAB_SWARM_ENGINES="node1=tcp://10.0.0.1:2375,node2=tcp://10.0.0.2:2375"
(the first is the manager unless FOGLAB_SWARM_MANAGER names another) and FOGLAB_SWARM_REGISTRY
(HOST:PORT of a registry the host pushes to and every node pulls from:
emu.engines.swarm.image_registry.ExternalRegistry). The links need nothing of the host: each node's
link agent relays its own containers' links (emu.engines.swarm.links).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

ENGINES_ENV = "FOGLAB_SWARM_ENGINES"
MANAGER_ENV = "FOGLAB_SWARM_MANAGER"
REGISTRY_ENV = "FOGLAB_SWARM_REGISTRY"


@dataclass(frozen=True)
class SwarmTarget:
    """A multi-node swarm: `engines` node hostname -> engine URL, `manager` one of them,
    `image_ref` tag -> the nodes' reference; `addresses` node hostname -> its address where
    its engine URL names none (a unix socket: emu.engines.swarm.nodes)."""

    engines: Mapping[str, str]
    manager: str
    image_ref: Callable[[str], str] = field(compare=False)
    addresses: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.manager not in self.engines:
            raise ValueError(f"swarm target: manager {self.manager!r} is not one of the "
                             f"engines {sorted(self.engines)}")
        unaddressed = sorted(node for node, url in self.engines.items()
                             if url.startswith("unix://") and node not in self.addresses)
        if unaddressed:
            raise ValueError(f"swarm target: node(s) {', '.join(unaddressed)} have an engine on "
                             f"a unix socket and no address (addresses=...)")

    def address_of(self, node: str) -> str:
        """A node's address (given, else its engine URL's host): where its published ports
        answer."""
        if node in self.addresses:
            return self.addresses[node]
        url = self.engines[node]
        return url.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")


_current: list[SwarmTarget] = []


@contextlib.contextmanager
def use_target(target: SwarmTarget) -> Iterator[SwarmTarget]:
    """Within the block, SwarmCluster runs on `target` unless given a client."""
    _current.append(target)
    try:
        yield target
    finally:
        _current.remove(target)


def current_target(environ: Mapping[str, str] = os.environ) -> SwarmTarget | None:
    """The target set by use_target, else the environment's, else None (a one-node swarm)."""
    if _current:
        return _current[-1]
    text = environ.get(ENGINES_ENV, "").strip()
    if not text:
        return None
    engines: dict[str, str] = {}
    for item in text.split(","):
        node, equals, url = item.strip().partition("=")
        if not (equals and node and "://" in url):
            raise ValueError(f"{ENGINES_ENV}: {item!r} is not NODE=URL "
                             f"(e.g. node1=tcp://10.0.0.1:2375)")
        engines[node] = url
    if not environ.get(REGISTRY_ENV):
        raise ValueError(f"{ENGINES_ENV} is set: {REGISTRY_ENV} must be too (docs/swarm.md)")
    from emu.engines.swarm.image_registry import ExternalRegistry

    registry = ExternalRegistry(environ[REGISTRY_ENV])
    return SwarmTarget(engines, environ.get(MANAGER_ENV) or next(iter(engines)),
                       registry.push)
