"""The start-up and removal every engine shares: `up` and `down` written once, in terms of
steps each engine supplies as methods (emu.engines.docker.engine.Cluster,
emu.engines.swarm.engine.SwarmCluster), and the steps that know no container engine.

`up`: what the engine refuses comes before anything is made (the plain engine: a plan beyond
this host's cap; Swarm: what a swarm cannot run), then a cluster of the same name. Then, in
order: the links, the images, a records directory per node, the networks, what the
containers read (Swarm's configs), the services (brokers, ZooKeeper, idle coordinators), the
engine's machinery (the plain engine's zygote, Swarm's link agents), the services' addresses
(the agents need them in their config), the agents; then wait until every service answers
and every agent runs. Anything that goes wrong meanwhile (an engine's error, a service that
never answers, Ctrl-C) removes everything made so far (`down`) before the error propagates.

`down`: the links closed, then what the cluster made removed by its label (the engine's
`_remove`), with Ctrl-C held back until it is done.
"""

from __future__ import annotations

import contextlib
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Self

from emu.cluster.access import save as save_access
from emu.cluster.services import mqtt_answers, zookeeper_answers
from emu.engines.base import ClusterError, Made, NodeStatus, Removed, interrupts_deferred

if TYPE_CHECKING:
    from emu.cluster.links import Links
    from emu.cluster.plan import ClusterPlan, ContainerPlan

# (stage, done, total, detail): stages are shaper, image, networks, containers, zygote, ready.
Progress = Callable[[str, int, int, str], None]
WORKERS = 16
READY_TIMEOUT_S = 180
Addresses = dict[tuple[str, str], str]  # (client, service) -> where the client reaches it


def _noop(stage: str, done: int, total: int, detail: str) -> None:
    pass


class Startup:
    """A cluster plan's start-up and removal, whatever runs its containers: `up`, `down` and
    the context manager, made of the steps below. An engine's class supplies those that
    raise NotImplementedError here, and overrides the no-ops it needs.

    `records`: the folder under which each node's records directory (mounted at /records)
    is made; without it, a scratch folder that `down` removes. `agent_command` replaces the
    agents' `python3 -m emu.agent` (a test, or a stand-in). `progress` hears each stage and
    each container started, on the calling thread: raising there (Ctrl-C) aborts `up` and
    cleans up.
    """

    def __init__(self, plan: ClusterPlan, *, records: Path | None,
                 agent_command: Sequence[str] | None, workers: int, progress: Progress | None,
                 ready_timeout_s: float, seed: int | None) -> None:
        self.plan = plan
        self.records = Path(records) if records is not None else None
        self.agent_command = tuple(agent_command) if agent_command is not None else None
        self.workers = workers
        self.progress = progress or _noop
        self.ready_timeout_s = ready_timeout_s
        self.seed = seed
        self.links: Links | None = None
        self.addresses: Addresses = {}
        # Each site network's address of the host, where its relays listen (by segment):
        # none where the networks are no bridges of this host (Swarm's).
        self.bridges: dict[str, str] = {}
        self.images: dict[str, str] = {}
        self.facts: dict[str, object] = {}
        self._made: Made | None = None
        self._cancel = threading.Event()
        self._images_s = 0.0

    @property
    def name(self) -> str:
        return self.plan.cluster

    # -- up ------------------------------------------------------------------------------------

    def up(self) -> Self:
        """Make and start everything; on any failure remove what was made, then raise. What
        the engine refuses (`_refuse`: the plain engine's host cap, emu.cluster.capacity) comes
        first."""
        if self._made is not None:
            raise ClusterError(f"cluster {self.name} is already up")
        self._refuse()
        if self._taken():
            raise ClusterError(f"a cluster named {self.name} exists already: "
                               f"foglab emu down --cluster {self.name}, or choose another name")
        self._arrange()
        started = time.monotonic()
        self._cancel.clear()
        self._made = Made()
        try:
            self.links = self._make_links()
            self._ensure_images()
            self._images_s = time.monotonic() - started
            self._make_records()
            self._create_networks()
            self._store_files()
            total = len(self.plan.containers)
            services = self.plan.services()
            self._start(services, {}, 0, total)
            self._start_machinery()
            ips = {s.node: s.ip for s in self.status()}
            self._connect_services()
            self.addresses = self.links.addresses(ips, self.bridges)
            self._before_agents()
            self._start(self.plan.agents(), self.addresses, len(services), total)
            self._after_agents()
            self._wait_ready()
            self._after_ready()
            self._check_agents_run()
            self._running()
        except BaseException:
            self._abort()
            raise
        self.facts = self._facts(time.monotonic() - started)
        return self

    # The engine's steps, in `up`'s order. Before anything is made:

    def _refuse(self) -> None:
        """Raise ClusterError for a plan (or host) this engine cannot run."""

    def _taken(self) -> bool:
        """Whether the engine holds something of a cluster of this name already."""
        raise NotImplementedError

    def _arrange(self) -> None:
        """Settle what the engine decides from its host before it makes anything."""

    # Then, each undone by `down` if a later one fails:

    def _make_links(self) -> Links:
        """The plan's links as this engine shapes them (its shaper chosen)."""
        raise NotImplementedError

    def _ensure_images(self) -> None:
        """Every image the plan runs, built or found (`images`: name -> tag)."""
        raise NotImplementedError

    def _create_networks(self) -> None:
        raise NotImplementedError

    def _store_files(self) -> None:
        """The plan's files and secrets, where the engine keeps them apart from containers."""

    def _start(self, plans: list[ContainerPlan], addresses: Addresses, done: int,
               total: int) -> None:
        """Start the containers of `plans` (their agents given `addresses`), reporting each
        as the `done`-th of `total`."""
        raise NotImplementedError

    def _start_machinery(self) -> None:
        """What of the engine's own runs beside the nodes (the zygote, link agents)."""

    def _connect_services(self) -> None:
        """Join each service to the networks its clients reach it on (the links say)."""

    def _before_agents(self) -> None:
        """Anything the agents' start waits for (the zygote listening)."""

    def _after_agents(self) -> None:
        """Anything done once the agents run (netem attached to them)."""

    def _after_ready(self) -> None:
        """Anything done once every service answers (the agents' CPU shares back)."""

    def _running(self) -> None:
        """Anything noted once the cluster runs (where Swarm placed each task)."""

    def _facts(self, seconds: float) -> dict[str, object]:
        """The run's facts of the cluster, up in `seconds`."""
        raise NotImplementedError

    # What the steps ask of the engine while up:

    def status(self) -> list[NodeStatus]:
        raise NotImplementedError

    def _run(self, plan: ContainerPlan, addresses: Addresses) -> str | None:
        """Make one container plan run (on a worker thread: `_in_parallel`)."""
        raise NotImplementedError

    def _ended(self, plan: ContainerPlan, error: Exception | None = None) -> None:
        """Raise ClusterError for a container plan that ended as it started, with its log."""
        raise NotImplementedError

    def _log_tail(self, node: str, lines: int = 20) -> str:
        raise NotImplementedError

    # -- the steps no engine changes -----------------------------------------------------------

    @property
    def records_root(self) -> Path:
        return self._records_base()

    def _records_base(self) -> Path:
        assert self._made is not None
        root = self.records or self._made.scratch
        assert root is not None
        return root

    def records_dir(self, node: str) -> Path:
        return self.records_root / node

    def _make_records(self) -> None:
        assert self._made is not None
        access = self.plan.access
        if self.records is None or access is not None:
            # Named before it is made: a Ctrl-C between the two leaves nothing `down` misses.
            scratch = Path(tempfile.gettempdir()) / f"foglab-{self.name}-{secrets.token_hex(4)}"
            self._made.scratch = scratch
            scratch.mkdir(mode=0o700)
        if access is not None:  # a closed cluster's secrets, for the host's `foglab emu`
            save_access(access, self._made.scratch)  # commands from another process
        for node in self.plan.containers:
            self.records_dir(node).mkdir(parents=True, exist_ok=True)

    def _in_parallel(self, plans: list[ContainerPlan], addresses: Addresses,
                     each: Callable[[ContainerPlan], object] | None = None,
                     name: str = "start") -> None:
        """`self._run(plan, addresses)` for every plan on a pool of `workers` threads; `each`
        on this thread as each ends. A failure or an interrupt cancels what has not begun."""
        if not plans:
            return
        pool = ThreadPoolExecutor(min(self.workers, len(plans)), thread_name_prefix=name)
        try:
            futures: dict[Future[str | None], ContainerPlan] = {
                pool.submit(self._run, plan, addresses): plan for plan in plans}
            for future in as_completed(futures):
                future.result()
                if each is not None:
                    each(futures[future])
        except BaseException:
            # In-flight starts finish (their containers carry the label), queued ones never run;
            # a second Ctrl-C must not cut this wait, or one could make a container after
            # `down` listed them.
            self._cancel.set()
            with interrupts_deferred():
                pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _wait_ready(self) -> None:
        """Wait until every broker and ZooKeeper server answers, or fail naming the first
        that does not."""
        status = {s.node: s for s in self.status()}
        ensemble = len(self.plan.zookeeper) > 1
        checks: dict[str, Callable[[], bool]] = {}
        for service in self.plan.services():
            ip = status[service.node].ip
            if service.role == "broker":
                checks[service.node] = lambda ip=ip, port=service.port: mqtt_answers(ip, port)
            elif service.role == "zookeeper":
                checks[service.node] = lambda ip=ip, port=service.port: zookeeper_answers(
                    ip, port, quorum=ensemble)
        deadline = time.monotonic() + self.ready_timeout_s
        pending = dict(checks)
        self.progress("ready", 0, len(checks), ", ".join(pending))
        while pending:
            for node, check in list(pending.items()):
                if check():
                    del pending[node]
                    self.progress("ready", len(checks) - len(pending), len(checks), node)
            if not pending:
                break
            states = {s.node: s.state for s in self.status()}
            stopped = [n for n in pending if states.get(n) != "running"]
            if stopped or time.monotonic() > deadline:
                node = (stopped or list(pending))[0]
                why = (f"its container is {states.get(node)}" if stopped else
                       f"no answer within {self.ready_timeout_s:.0f} s")
                raise ClusterError(f"{self.plan.containers[node].role} {node} of cluster "
                                   f"{self.name} does not answer: {why}; its log ends:\n"
                                   + self._log_tail(node))
            time.sleep(0.25)

    def _check_agents_run(self) -> None:
        """Fail naming the first agent container that is no longer running (a process that
        could not start behind an init ends after `start` returned)."""
        states = {s.node: s for s in self.status()}
        for agent in self.plan.agents():
            if states[agent.node].state != "running":
                self._ended(agent)

    # -- down ----------------------------------------------------------------------------------

    def down(self) -> Removed:
        """Remove exactly what the cluster made: the links' relays, then what `_remove`
        finds by the cluster's label, and its scratch folder."""
        with interrupts_deferred():
            self._cancel.set()
            try:
                if self.links is not None:
                    self.links.close()
                self._before_removal()
            finally:
                removed = self._remove()
                self._made = None
        return removed

    def _before_removal(self) -> None:
        """Anything kept of the cluster before it goes (best effort: `down` goes on)."""

    def _remove(self) -> Removed:
        """Remove what the cluster made (by its label) and its scratch folder."""
        raise NotImplementedError

    def _abort(self) -> None:
        with contextlib.suppress(Exception):
            self.down()

    def __enter__(self) -> Self:
        return self.up()

    def __exit__(self, *exc_info: object) -> None:
        if self._made is not None:
            self.down()
