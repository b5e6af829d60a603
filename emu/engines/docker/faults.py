"""Inject a fault into a running emulated run's node: kill its container, or restart it.

The engine calls each fault makes (kill, start, stop, restart, set_cpus) are a node's
(emu.engines.docker.nodes.DockerNode): this module's `Fault` thread and the scenario's fault
schedule (emu.features.faults, through the engine's `node`) both use them.

For tests and benchmarks of how a run goes through a dead gateway or a broker restart. The
fault runs on a thread of its own, beside a run that `experiments.runner` drives on the main
thread of the same process: it finds the run's containers by the cluster's labels (the owner,
which names this process, and the node; the topology's name too if given), waits for the run's
devices to start (the first `sent.csv` in the records folder the containers'
`foglab.records` label names), waits `at` seconds more, and acts through the engine's API.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from emu.engines.docker.inventory import CLUSTER, OWNER, owner_token
from emu.engines.docker.nodes import DockerNode

if TYPE_CHECKING:
    import docker

ACTIONS = ("kill", "restart")
POLL_S = 0.2


class Fault(threading.Thread):
    """`kill` (SIGKILL, as `docker kill`) or `restart` (SIGTERM, then start, as
    `docker restart`) the container of `node` in the run this process brings up (of
    `topology`, if given), `at` seconds after its devices started. Afterwards: `cluster`,
    `started` and `done` (time.time() of the devices' start and of the fault's end), or
    `error`."""

    def __init__(self, client: docker.DockerClient, node: str, action: str, at: float,
                 topology: str | None = None, timeout: float = 900.0) -> None:
        if action not in ACTIONS:
            raise ValueError(f"a fault is one of {', '.join(ACTIONS)}, not {action!r}")
        super().__init__(name=f"fault-{action}-{node}", daemon=True)
        self.client = client
        self.topology = topology
        self.node = node
        self.action = action
        self.at = at
        self.timeout = timeout
        self.cluster: str | None = None
        self.started: float | None = None
        self.done: float | None = None
        self.error: str | None = None
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    def run(self) -> None:
        try:
            self._inject()
        except Exception as error:  # noqa: BLE001 - reported to the caller, not lost on a thread
            self.error = f"{self.action} of {self.node}: {error!r}"

    def _inject(self) -> None:
        deadline = time.monotonic() + self.timeout
        container, records = self._wait_container(deadline)
        while not any(records.glob("*/sent.csv")):
            self._tick(deadline, f"no device of the run started (no sent.csv under {records})")
        self.started = time.time()
        if self._cancel.wait(self.at):
            return
        node = DockerNode(self.client.api, container)
        if self.action == "kill":
            node.kill()
        else:
            node.restart()  # docker restart's grace (nodes.GRACE_S)
        self.done = time.time()

    def _wait_container(self, deadline: float) -> tuple[str, Path]:
        labels = [f"{OWNER}={owner_token()}", f"foglab.node={self.node}"]
        if self.topology is not None:
            labels.append(f"foglab.topology={self.topology}")
        filters = {"label": labels}
        while True:
            found = self.client.api.containers(all=True, filters=filters)
            if found:
                labels = found[0]["Labels"]
                self.cluster = labels.get(CLUSTER)
                return found[0]["Id"], Path(labels["foglab.records"])
            self._tick(deadline, f"no container of node {self.node} appeared")

    def _tick(self, deadline: float, why: str) -> None:
        if self._cancel.wait(POLL_S):
            raise RuntimeError("cancelled")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{why} within {self.timeout:.0f} s")
