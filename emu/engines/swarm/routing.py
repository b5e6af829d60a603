"""A Docker client that sends each container's calls to the engine of the node running it.

On a swarm of several nodes, a service's task container lives in its node's engine: the manager
creates and lists services, but `inspect_container`, `kill`, `wait`, `logs`, `exec_*` and
`get_archive` of that container only work on its own node. foglab's run code (emu.run.emulate,
emu.run.health, emu.engines.docker.inventory) calls these on `cluster.client.api` with the
container's id, as on one engine; RoutedClient keeps that working: container listings are merged
over every
node's engine (so inventory sees every node's containers), a call naming a container goes to
the engine that listed it (or, unknown, to each engine until one knows it), an exec's follow-up
calls to the engine that made the exec, everything else (services, configs, networks, swarm,
nodes) to the manager.

A node that leaves mid-run (its host or its engine gone) is a fault, as a crashed gateway is.
A listing asks each node's engine with a short timeout (LIST_TIMEOUT_S: a node that vanished
answers nothing, and a kept-alive connection would wait for the SDK's long timeout); one that
does not answer is asked about at the manager: if the manager has it down, the node is `left`
(when, on the host's clock), else its last listing stands (the engine is slow, not gone).
From then on a listing skips a node that left, and a call naming one of its containers raises
NodeLeft (a docker NotFound: the run treats that container as gone) at once. The manager is
not routed around: a swarm whose manager leaves has no control.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from docker.errors import NotFound
from requests.exceptions import ConnectionError as Unreachable
from requests.exceptions import Timeout

if TYPE_CHECKING:
    import docker

# APIClient methods whose first argument is a container (id or name).
BY_CONTAINER = frozenset({
    "attach", "commit", "diff", "export", "get_archive", "inspect_container", "kill", "logs",
    "pause", "port", "put_archive", "remove_container", "rename", "resize", "restart", "start",
    "stats", "stop", "top", "unpause", "update_container", "wait", "exec_create",
})
BY_EXEC = frozenset({"exec_start", "exec_inspect", "exec_resize"})
# How long a node's engine may take to list its containers before the manager is asked
# whether the node is still in the swarm.
LIST_TIMEOUT_S = 5.0


class NodeLeft(NotFound):
    """A call to the engine of a swarm node that left (or does not answer)."""

    def __init__(self, node: str, detail: object = "") -> None:
        super().__init__(f"swarm node {node} left the swarm (its engine does not answer"
                         + (f": {detail})" if detail else ")"))
        self.node = node


class RoutedAPI:
    """APIClient's surface over several engines (see the module's docstring)."""

    def __init__(self, manager: Any, engines: Mapping[str, Any]) -> None:
        self.manager = manager
        self.engines = dict(engines)  # node hostname -> APIClient
        self._owner: dict[str, str] = {}  # container id / name -> node hostname
        self._execs: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.left: dict[str, float] = {}  # node -> since when it did not answer, once down
        self._silent: dict[str, float] = {}  # node -> its first unanswered call since an answer
        self._listers: dict[str, Any] = {}  # node -> an APIClient with LIST_TIMEOUT_S
        self._listed: dict[tuple[str, str], list[dict]] = {}  # (node, arguments) -> listing

    def _call(self, node: str | None, api: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        """api.name(...), on `node`'s engine; NodeLeft if the node left."""
        if node is not None and node in self.left:
            raise NodeLeft(node)
        try:
            return getattr(api, name)(*args, **kwargs)
        except (Unreachable, Timeout) as error:
            if node is None or not self._down(node):
                raise
            raise NodeLeft(node, type(error).__name__) from None

    def _down(self, node: str) -> bool:
        """Whether the manager has the node down (or no longer lists it): then it `left`, at
        the first call its engine did not answer since it last did."""
        if node in self.left:
            return True
        with self._lock:
            silent = self._silent.setdefault(node, time.time())
        states = {(n.get("Description") or {}).get("Hostname"): (n.get("Status") or {}).get(
            "State") for n in self.manager.nodes()}
        if states.get(node) == "ready":
            return False
        with self._lock:
            self.left.setdefault(node, silent)
        return True

    def _lister(self, node: str) -> Any:
        """The node's engine with a short timeout (over plain TCP or a unix socket, as
        emu.engines.swarm.nodes' engines; TLS or SSH engines are asked through their own client)."""
        if node not in self._listers:
            api = self.engines[node]
            base = getattr(api, "base_url", "")
            socket = getattr(getattr(api, "_custom_adapter", None), "socket_path", None)
            url = (base if isinstance(base, str) and base.startswith("http://")
                   else f"unix://{socket}" if isinstance(socket, str) else None)
            if url is not None:
                from docker import APIClient

                api = APIClient(base_url=url, timeout=LIST_TIMEOUT_S)
            self._listers[node] = api
        return self._listers[node]

    def containers(self, *args: Any, **kwargs: Any) -> list[dict]:
        """Every engine's listing, merged (but a node that left's); remembers which engine
        holds each container. An engine that does not answer within LIST_TIMEOUT_S while the
        manager still has its node gives its last listing of the same arguments."""
        found: list[dict] = []
        arguments = repr((args, sorted(kwargs.items())))
        for node in self.engines:
            if node in self.left:
                continue
            try:
                listed = self._lister(node).containers(*args, **kwargs)
            except (Unreachable, Timeout):
                if self._down(node):
                    continue
                listed = self._listed.get((node, arguments), [])
            else:
                self._silent.pop(node, None)
            self._listed[(node, arguments)] = listed
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
                node = self.node_of(str(ident))
                api = self.engines[node] if node is not None else self.manager
                result = self._call(node, api, name, container, *args, **kwargs)
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
