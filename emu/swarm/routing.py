"""A Docker client that sends each container's calls to the engine of the node running it.

On a swarm of several nodes, a service's task container lives in its node's engine: the manager
creates and lists services, but `inspect_container`, `kill`, `wait`, `logs`, `exec_*` and
`get_archive` of that container only work on its own node. foglab's run code (emu.run,
emu.health, emu.cluster.inventory) calls these on `cluster.client.api` with the container's id,
as on one engine; RoutedClient keeps that working: container listings are merged over every
node's engine (so inventory sees every node's containers), a call naming a container goes to
the engine that listed it (or, unknown, to each engine until one knows it), an exec's follow-up
calls to the engine that made the exec, everything else (services, configs, networks, swarm,
nodes) to the manager.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import docker

# APIClient methods whose first argument is a container (id or name).
BY_CONTAINER = frozenset({
    "attach", "commit", "diff", "export", "get_archive", "inspect_container", "kill", "logs",
    "pause", "port", "put_archive", "remove_container", "rename", "resize", "restart", "start",
    "stats", "stop", "top", "unpause", "update_container", "wait", "exec_create",
})
BY_EXEC = frozenset({"exec_start", "exec_inspect", "exec_resize"})


class RoutedAPI:
    """APIClient's surface over several engines (see the module's docstring)."""

    def __init__(self, manager: Any, engines: Mapping[str, Any]) -> None:
        self.manager = manager
        self.engines = dict(engines)  # node hostname -> APIClient
        self._owner: dict[str, str] = {}  # container id / name -> node hostname
        self._execs: dict[str, Any] = {}
        self._lock = threading.Lock()

    def containers(self, *args: Any, **kwargs: Any) -> list[dict]:
        """Every engine's listing, merged; remembers which engine holds each container."""
        found: list[dict] = []
        for node, api in self.engines.items():
            listed = api.containers(*args, **kwargs)
            with self._lock:
                for summary in listed:
                    self._owner[summary["Id"]] = node
                    for name in summary.get("Names") or ():
                        self._owner[name.lstrip("/")] = node
            found.extend(listed)
        return found

    def node_of(self, container: str) -> str | None:
        """The node whose engine holds `container` (a full id, a name); None when none lists
        it (the engines are listed again before that answer)."""
        with self._lock:
            node = self._owner.get(container)
        if node is None:
            self.containers(all=True)
            with self._lock:
                node = self._owner.get(container) or next(
                    (n for key, n in self._owner.items() if key.startswith(container)), None)
        return node

    def engine_of(self, container: str) -> Any:
        """The engine holding `container`; the manager's when no engine lists it."""
        node = self.node_of(container)
        return self.engines[node] if node is not None else self.manager

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.manager, name)
        if name in BY_CONTAINER:
            def routed(container: Any, *args: Any, **kwargs: Any) -> Any:
                ident = container.get("Id") if isinstance(container, dict) else container
                api = self.engine_of(str(ident))
                result = getattr(api, name)(container, *args, **kwargs)
                if name == "exec_create":
                    with self._lock:
                        self._execs[result["Id"]] = api
                return result
            return routed
        if name in BY_EXEC:
            def by_exec(execution: Any, *args: Any, **kwargs: Any) -> Any:
                ident = execution.get("Id") if isinstance(execution, dict) else execution
                with self._lock:
                    api = self._execs.get(ident, self.manager)
                return getattr(api, name)(execution, *args, **kwargs)
            return by_exec
        return method


class RoutedClient:
    """A DockerClient whose `api` is a RoutedAPI; its other attributes are the manager's."""

    def __init__(self, manager: docker.DockerClient,
                 engines: Mapping[str, docker.DockerClient]) -> None:
        self.manager = manager
        self.nodes = dict(engines)
        self.api = RoutedAPI(manager.api, {n: c.api for n, c in engines.items()})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)

    def close(self) -> None:
        for client in {id(c): c for c in (self.manager, *self.nodes.values())}.values():
            client.close()
