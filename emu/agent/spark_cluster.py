"""A cloud VM's part in a Spark standalone cluster: its master or one of its workers, a process
group (workloads.spark.standalone) the agent starts before its operators and stops after them.

A topology names the cluster among its cloud VMs (proposed `spark:` section: `master`,
`workers`, `cores`, `memory`); the plan gives each of those VMs a role (AgentConfig.spark, a
mapping read by `spark_role`):

    {"role": "master", "host": "10.0.3.2", "port": 7077, "ui_port": 8080}
    {"role": "worker", "host": "10.0.3.3", "master": "spark://10.0.3.2:7077",
     "cores": 1, "memory": "512m", "port": 7078, "ui_port": 8081}

`host` is the VM's address on the network the others reach it by: Spark advertises the
address it binds, so 0.0.0.0 would be no address at all. The `engine: spark` jobs of every
cloud VM then run their driver with `--master` the cluster's URL (emu.agent.spark.SparkJob).

The daemons' directories and logs go under `<records>/spark/` (the records are mounted on the
host, so a failed daemon's log is there to read). Nothing here is scaled by a dilation K: the
master's and workers' own timers (heartbeats, the 60 s worker timeout) are Spark's defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROLES = ("master", "worker")
MASTER_PORT, MASTER_UI_PORT = 7077, 8080
WORKER_PORT, WORKER_UI_PORT = 7078, 8081
START_WAIT_S = 120.0
REGISTERED = "Successfully registered with master"  # a worker's log line
_MEMORY = re.compile(r"^\d+[mg]$")


@dataclass(frozen=True)
class SparkRole:
    """What one VM runs of the cluster (see the module docstring)."""

    role: str
    host: str
    port: int
    ui_port: int
    master: str = ""  # a worker's master URL
    cores: int = 1
    memory: str = "512m"

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}" if self.role == "master" else self.master


def spark_role(raw: Mapping[str, Any], node: str = "") -> SparkRole:
    """A role from its mapping, refused with the node, field and value when it is wrong."""
    where = f"node {node!r}: spark" if node else "spark"
    role = raw.get("role")
    if role not in ROLES:
        raise ValueError(f"{where}.role must be one of {', '.join(ROLES)}, not {role!r}")
    host = raw.get("host")
    if not isinstance(host, str) or not host or host == "0.0.0.0":
        raise ValueError(f"{where}.host must be the VM's address others reach, not {host!r}")
    unknown = set(raw) - {"role", "host", "port", "ui_port", "master", "cores", "memory"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    default = (MASTER_PORT, MASTER_UI_PORT) if role == "master" else (WORKER_PORT,
                                                                       WORKER_UI_PORT)
    ports = [raw.get("port", default[0]), raw.get("ui_port", default[1])]
    for name, port in zip(("port", "ui_port"), ports, strict=True):
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"{where}.{name} must be a port number, not {port!r}")
    if role == "master":
        return SparkRole("master", host, ports[0], ports[1])
    from workloads.spark.session import master_hosts

    master = raw.get("master")
    try:
        if not isinstance(master, str) or not master_hosts(master):
            raise ValueError(f"not {master!r}")
    except ValueError as error:
        raise ValueError(f"{where}.master must be the master's spark://host:port: "
                         f"{error}") from None
    cores, memory = raw.get("cores", 1), raw.get("memory", "512m")
    if not isinstance(cores, int) or cores < 1:
        raise ValueError(f"{where}.cores must be a whole number >= 1, not {cores!r}")
    if not isinstance(memory, str) or not _MEMORY.match(memory):
        raise ValueError(f"{where}.memory must be a size like '512m' or '2g', not {memory!r}")
    return SparkRole("worker", host, ports[0], ports[1], master, cores, memory)


class SparkDaemon:
    """This VM's master or worker under `<records>/spark`; `start` returns once it is up."""

    def __init__(self, role: SparkRole, records: str | Path) -> None:
        self.role = role
        self.root = Path(records) / "spark"
        self.daemon = None

    def start(self, timeout: float = START_WAIT_S) -> None:
        from workloads.spark import standalone

        role = self.role
        if role.role == "master":
            self.daemon = standalone.start_master(self.root, role.host, role.port, role.ui_port)
            what = f"answered no status on port {role.ui_port}"
        else:
            self.daemon = standalone.start_worker(
                self.root, "worker", role.host,
                standalone.WorkerPorts(role.port, role.ui_port), role.master, role.cores,
                role.memory)
            what = f"did not register with {role.master}"
        try:
            standalone.await_up(self.up, self.daemon, timeout, what)
        except BaseException:
            self.daemon.stop()
            raise

    def up(self) -> bool:
        """A master answers its status; a worker has logged its registration (its own word:
        the master is another VM's, whose UI this one may not reach)."""
        from workloads.spark import standalone

        if self.daemon is None:
            return False
        if self.role.role == "master":
            return standalone.master_status(self.role.host, self.role.ui_port) is not None
        return REGISTERED in standalone.tail(self.daemon.log, 50_000)

    def alive(self) -> bool:
        return self.daemon is not None and self.daemon.alive()

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()


def wait_master(url: str, timeout: float = START_WAIT_S, step: float = 0.5) -> None:
    """Until the master at `url` (spark://host:port) takes a TCP connection: a driver started
    before it is refused at once (workloads.spark.session.check_master). TimeoutError after
    `timeout` host seconds (a master of another VM still starting its JVM takes seconds)."""
    import socket
    import time

    from workloads.spark.session import master_hosts

    deadline = time.monotonic() + timeout
    hosts = master_hosts(url)
    while True:
        for host, port in hosts:
            try:
                with socket.create_connection((host, port), timeout=2):
                    return
            except OSError:
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Spark master {url} did not answer within {timeout:.0f} s")
        time.sleep(step)
