"""What an engine is (the protocol every engine class keeps), its errors, and what its
start-up holds (what it made, Ctrl-C deferred); the start-up's sequence is emu.engines.startup.

`Engine` is what a run (emu.run.emulate), the command line (emu.cli.main) and the features call:
bring the plan up, report the containers, reach and shape their links, run a command in one, read
its logs and records, bring a crashed node back, and bring everything down leaving nothing. Its
class attributes are what the code around an engine asks before it makes one: whether the
brokers take a new ACL while they run (`live_acl`), which run fields it takes
(`run_options`), and the hooks `foglab emu down` calls around the generic removal of a
cluster found on the host (`before_remove`, `after_remove`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, Self, runtime_checkable

if TYPE_CHECKING:
    import docker

    from emu.cluster.grants import Grants
    from emu.cluster.plan import ClusterPlan
    from emu.links.spec import LinkShape

DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class NodeStatus:
    """A container of a cluster as the engine reports it."""

    node: str
    kind: str
    role: str
    name: str
    container: str      # the full id
    state: str          # created, running, exited, ...
    status: str         # e.g. "Up 3 minutes"
    ip: str             # on its own site network
    image: str
    network: str


@dataclass(frozen=True)
class Removed:
    """What `down` removed of a cluster."""

    containers: int
    networks: int
    scratch: str | None  # the scratch folder removed, if any
    owner_ended: bool


@dataclass(frozen=True)
class RunOption:
    """A run field an engine takes besides the plan: the keyword its class is made with, and
    what the field asks for (named when another engine is refused it)."""

    keyword: str
    what: str


class ClusterError(RuntimeError):
    """A cluster could not be brought up (after cleaning up) or is not there."""


class NodeGone(LookupError):
    """A node's container is no more: removed, or its host left (a NodeControl's call)."""


class NodeNotRunning(RuntimeError):
    """A call that needs a running container found it stopped (what the engine said)."""


@runtime_checkable
class NodeControl(Protocol):
    """One node's container as the code around an engine acts on it (`Engine.node`): a
    fault's kill, stop, start and CPU limit; the end of a run's stop and wait; the dead-node
    watch's state; a sampler's stats where the node's cgroup is not on this host. A container
    removed raises NodeGone; a call that needs it running and it is not, NodeNotRunning."""

    container: str

    def kill(self, signal: str | None = None) -> None: ...

    def start(self) -> None: ...

    def stop(self, grace: float = ...) -> None: ...

    def restart(self, grace: float = ...) -> None: ...

    def set_cpus(self, nano_cpus: int) -> None: ...

    def wait(self, timeout: float) -> None: ...

    def state(self) -> dict: ...

    def stats(self) -> dict: ...


@runtime_checkable
class Engine(Protocol):
    """A cluster plan brought up on a container engine. Made with the plan (and the keywords
    of emu.engines.docker.engine.Cluster: client, records, seed, progress, agent_command, ...)."""

    engine_name: ClassVar[str]  # its name in the registry (emu.engines.ENGINES)
    live_acl: ClassVar[bool]
    run_options: ClassVar[Mapping[str, RunOption]]
    plan: ClusterPlan
    facts: dict[str, object]

    def up(self) -> Self: ...

    def down(self) -> Removed: ...

    def status(self) -> list[NodeStatus]: ...

    def departed(self) -> dict[str, float]: ...

    def revive(self, node: str, revival: dict) -> None: ...

    def address(self, client: str, service: str) -> str: ...

    def reshape(self, client: str, service: str, shape: LinkShape) -> None: ...

    def exec(self, node: str, command: Sequence[str] | str): ...

    def logs(self, node: str, follow: bool = False) -> Iterator[bytes]: ...

    def records_dir(self, node: str) -> Path: ...

    def node(self, name: str) -> NodeControl: ...

    def grants(self) -> Grants | None: ...

    @classmethod
    def before_remove(cls, client: docker.DockerClient, cluster: str) -> None: ...

    @classmethod
    def after_remove(cls, client: docker.DockerClient, cluster: str) -> None: ...


@dataclass
class Made:
    """What this process made, beyond what the labels find."""

    scratch: Path | None = None
    ids: dict[str, str] = field(default_factory=dict)  # node -> container id


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C (and SIGTERM, SIGHUP) back while the engine makes or removes something,
    so a second one cannot leave strays; raise KeyboardInterrupt after. Only the main thread
    receives signals, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {number: signal.signal(number, lambda number, frame: caught.append(number))
                for number in DEFERRED_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if caught:
        raise KeyboardInterrupt(signal.Signals(caught[0]).name)
