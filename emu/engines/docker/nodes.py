"""One node's container on a Docker Engine, as the code around an engine acts on it
(emu.engines.base.NodeControl): kill it, stop it, start it again, change its CPU limit, ask
its state and its stats, wait for it to end.

A Swarm cluster's nodes are the same: its client routes a container's calls to the engine of
the node that runs it (emu.engines.swarm.routing). The fault schedule (emu.features.faults), the
`Fault` thread (emu.engines.docker.faults), the dead-node watch (emu.run.health), the end of a run
(emu.run.emulate) and the samplers of tasks on other nodes (emu.host.metrics) act through this, not
through the engine's API.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from emu.engines.base import NodeGone, NodeNotRunning

GRACE_S = 10  # docker stop's grace before SIGKILL, as its CLI's default
LOCATE_TIMEOUT_S = 10
CONFLICT = 409


@dataclass(frozen=True)
class DockerNode:
    """`container` (a name or an id) through `api`, the Docker SDK's low-level client. The
    engine's 404 is raised as NodeGone, its 409 (a call that needs the container running) as
    NodeNotRunning; its other errors and the transport's as they come."""

    api: Any
    container: str

    def kill(self, signal: str | None = None) -> None:
        """SIGKILL the container's processes, as `docker kill` (or `signal`, a name)."""
        with _engine_errors():
            if signal is None:
                self.api.kill(self.container)
            else:
                self.api.kill(self.container, signal=signal)

    def start(self) -> None:
        """Start a stopped or killed container again, as `docker start`."""
        with _engine_errors():
            self.api.start(self.container)

    def stop(self, grace: float = GRACE_S) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds, as `docker stop`."""
        with _engine_errors():
            self.api.stop(self.container, timeout=max(0, int(round(grace))))

    def restart(self, grace: float = GRACE_S) -> None:
        """`stop` then `start` in one call, as `docker restart`."""
        with _engine_errors():
            self.api.restart(self.container, timeout=max(0, int(round(grace))))

    def set_cpus(self, nano_cpus: int) -> None:
        """Change the container's CPU limit while it runs (0: no limit). The engine refuses a
        CPU quota on a container made with NanoCpus, and the SDK's update_container has no
        NanoCpus: the update request is sent as the engine's API has it."""
        with _engine_errors():
            url = self.api._url("/containers/{0}/update", self.container)
            self.api._raise_for_status(
                self.api._post_json(url, data={"NanoCpus": int(nano_cpus)}))

    def wait(self, timeout: float) -> None:
        """Until the container ended; the engine's or the transport's error past `timeout`."""
        with _engine_errors():
            self.api.wait(self.container, timeout=timeout)

    def state(self) -> dict:
        """The engine's State of the container (Status, Running, Paused, StartedAt, ...)."""
        with _engine_errors():
            return self.api.inspect_container(self.container)["State"]

    def stats(self) -> dict:
        """One reading of the engine's stats (cpu_stats, memory_stats)."""
        with _engine_errors():
            return self.api.stats(self.container, stream=False)

    def exec_stream(self, command: list[str], out: Callable[[bytes], object]) -> int:
        """Run a command in the container, each chunk of its stdout and stderr to `out` as it
        comes; its exit code."""
        with _engine_errors():
            execution = self.api.exec_create(self.container, command, stdout=True, stderr=True)
            for chunk in self.api.exec_start(execution["Id"], stream=True):
                out(chunk)
            return self.api.exec_inspect(execution["Id"])["ExitCode"] or 0


@contextlib.contextmanager
def _engine_errors() -> Iterator[None]:
    from docker.errors import APIError, NotFound

    try:
        yield
    except NotFound as error:
        raise NodeGone(str(error.explanation or error)) from error
    except APIError as error:
        if error.status_code != CONFLICT:
            raise
        raise NodeNotRunning(str(error.explanation or error)) from error


class DockerLocator:
    """A container's address on a network now, asked of this host's engine (the link relays'
    `locate`, emu.cluster.links.RelayLinks): None when the container is gone or not on it.
    One client of its own with a short timeout, made on first use, shared by the relays'
    threads; `close` ends it."""

    def __init__(self) -> None:
        self._client = None
        self._lock = threading.Lock()

    def __call__(self, container: str, network: str) -> str | None:
        import docker
        from docker.errors import NotFound

        with self._lock:
            if self._client is None:
                self._client = docker.from_env(timeout=LOCATE_TIMEOUT_S)
            client = self._client
        try:
            found = client.api.inspect_container(container)
        except NotFound:
            return None
        networks = (found.get("NetworkSettings") or {}).get("Networks") or {}
        return (networks.get(network) or {}).get("IPAddress") or None

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
