"""Spark's own standalone cluster: a Master and N Workers as processes, from pyspark's install.

    with StandaloneCluster(root, master_port=7077, ui_port=8080,
                           workers=[WorkerPorts(7078, 8081), WorkerPorts(7079, 8082)]) as c:
        run the job with --master c.master_url

Why processes of our own and not `start-master.sh`/`start-worker.sh`: those daemonise (nohup,
pid files under /tmp keyed by user and instance number), so two clusters on one host, or a
test's cluster beside a developer's, share pid files and cannot be stopped apart. Here each
daemon is `pyspark/bin/spark-class org.apache.spark.deploy.{master.Master,worker.Worker}` in a
process group of its own (spark-class execs java, and a Worker's executors and their Python
workers are its children): `stop` and `kill_worker` signal exactly the groups this object
started, nothing found by name.

Every port is the caller's (no 8080/8081 defaults that collide on a shared host), and is
kept: a daemon whose port is taken fails (spark.port.maxRetries=0) instead of moving. Every
daemon has its own directory under `root`: `<name>/work` (a worker's executors' work dirs,
`--work-dir`), `<name>/local` (SPARK_LOCAL_DIRS: shuffle and RocksDB state files) and
`<name>.log` (its stdout and stderr). SPARK_CONF_DIR points at an empty directory so that a
spark-defaults.conf on the host does not leak in.

Start-up waits until the master's JSON status (`http://host:ui_port/json/`) lists every worker
ALIVE with the cores it was given; a daemon that exits or does not come up in time fails with
the tail of its log. The same works inside a container: it needs only a python with pyspark
and java on PATH (or JAVA_HOME).

`python -m workloads.spark.standalone --root DIR --master-port P --ui-port U --workers N`
runs one until SIGTERM/SIGINT (for a cloud VM's container).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from workloads.spark.jvm import jvm_options

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_WAIT_S = 90.0
STOP_WAIT_S = 10.0
POLL_S = 0.3
LOG_TAIL = 2000  # characters of a daemon's log quoted in an error
PORT_RANGE = (20_000, 32_000)  # free_ports draws from here


class ClusterError(RuntimeError):
    """A master or worker did not come up (the message quotes its log's tail)."""


@dataclass(frozen=True)
class WorkerPorts:
    """A worker's RPC port and web UI port (both the caller's choice)."""

    port: int
    ui_port: int


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different ports free on `host` now, drawn from below the kernel's ephemeral
    range (net.ipv4.ip_local_port_range, 32768 up by default): a port the kernel handed out
    for a socket's bind(0) may be given next to an outgoing connection, and a daemon that
    keeps its port (spark.port.maxRetries=0) would then fail."""
    chosen: list[int] = []
    while len(chosen) < count:
        port = random.randrange(PORT_RANGE[0], PORT_RANGE[1])
        if port in chosen:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        chosen.append(port)
    return chosen


def spark_class() -> Path:
    """pyspark's `bin/spark-class` (pyspark ships Spark's jars and launch scripts)."""
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        raise ClusterError(f"{path} is missing: this pyspark has no launch scripts")
    return path


def _check_java() -> None:
    home = os.environ.get("JAVA_HOME")
    if not (shutil.which("java") or (home and (Path(home) / "bin" / "java").exists())):
        raise ClusterError("java is not on PATH and JAVA_HOME is not set (Debian package "
                           "'openjdk-17-jre-headless'): Spark's master and workers are JVMs")


def tail(path: Path, chars: int = LOG_TAIL) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        return f"(no log: {error})"
    return text[-chars:] if text else "(empty log)"


class Daemon:
    """One master or worker process in its own process group, logging to `<root>/<name>.log`."""

    def __init__(self, name: str, root: Path, command: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.dir = root / name
        self.log = root / f"{name}.log"
        for sub in ("work", "local", "conf"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        # A port taken fails the daemon at once: Spark would otherwise try the next 16 ports
        # and come up where nobody looks for it.
        options = (f"{os.environ.get('SPARK_DAEMON_JAVA_OPTS', '')} {jvm_options()} "
                   "-Dspark.port.maxRetries=0")
        env = os.environ | env | {"SPARK_DAEMON_JAVA_OPTS": options.strip(),
                                  "SPARK_CONF_DIR": str(self.dir / "conf"),
                                  "SPARK_LOCAL_DIRS": str(self.dir / "local"),
                                  "SPARK_NO_DAEMONIZE": "1"}
        with self.log.open("ab") as out:
            # A new session: its own process group, out of the caller's terminal signals.
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env,
                                            start_new_session=True)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, sig: int) -> None:
        # The group id is the pid (start_new_session); a group already gone is fine.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole group: the JVM, and for a worker its executors and Python workers
        (what a crashed host loses)."""
        self.signal(signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout: float = STOP_WAIT_S) -> None:
        if self.alive():
            self.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        # Children (executors) may outlive a JVM that exited: the group goes in any case.
        self.signal(signal.SIGKILL)
        self.process.wait()

    def failure(self, what: str) -> ClusterError:
        code = self.process.poll()
        state = "is running" if code is None else f"exited with {code}"
        return ClusterError(f"Spark {self.name} {what} ({state}); the tail of {self.log}:\n"
                            f"{tail(self.log)}")


def master_status(host: str, ui_port: int) -> dict | None:
    """A master's JSON status (`http://host:ui_port/json/`), None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{ui_port}/json/", timeout=2) as answer:
            return json.load(answer)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def start_master(root: Path, host: str, port: int, ui_port: int) -> Daemon:
    """A master on `host:port`, web UI and JSON status on `ui_port` (not yet up: see
    `await_up`)."""
    _check_java()
    return Daemon("master", Path(root), [
        str(spark_class()), MASTER_CLASS, "--host", host, "--port", str(port),
        "--webui-port", str(ui_port)], {"SPARK_MASTER_HOST": host})


def start_worker(root: Path, name: str, host: str, ports: WorkerPorts, master_url: str,
                 cores: int = 1, memory: str = "512m") -> Daemon:
    """A worker of `cores` and `memory` on `host`, registering with `master_url` (a cloud VM
    of its own runs one alone: the master is another VM's)."""
    _check_java()
    directory = Path(root) / name
    return Daemon(name, Path(root), [
        str(spark_class()), WORKER_CLASS, "--host", host, "--port", str(ports.port),
        "--webui-port", str(ports.ui_port), "--cores", str(cores), "--memory", memory,
        "--work-dir", str(directory / "work"), master_url],
        {"SPARK_WORKER_CORES": str(cores), "SPARK_WORKER_MEMORY": memory})


def await_up(ready, daemon: Daemon, timeout: float, what: str) -> None:
    """Poll `ready()` until it holds; fail with the daemon's log if it exits or times out."""
    deadline = time.monotonic() + max(timeout, 0.0)
    while not ready():
        if not daemon.alive():
            raise daemon.failure("exited before it was up")
        if time.monotonic() > deadline:
            raise daemon.failure(f"{what} within {timeout:.0f} s")
        time.sleep(POLL_S)


class StandaloneCluster:
    """A master on `host:master_port` (web UI on `ui_port`) and one worker per `workers` entry,
    each with `cores` cores and `memory` (Spark's size, e.g. "512m") to give executors.

    `root` holds every daemon's directories and logs. Use as a context manager, or call
    `start` and `stop`. `kill_worker(i)` SIGKILLs worker i's process group (a host lost).
    """

    def __init__(self, root: str | Path, master_port: int, ui_port: int,
                 workers: Sequence[WorkerPorts], host: str = "127.0.0.1", cores: int = 1,
                 memory: str = "512m") -> None:
        if not workers:
            raise ValueError("a standalone cluster needs at least one worker")
        ports = [master_port, ui_port] + [p for w in workers for p in (w.port, w.ui_port)]
        if len(set(ports)) != len(ports):
            raise ValueError(f"the cluster's ports must differ, got {ports}")
        if cores < 1:
            raise ValueError(f"a worker needs at least 1 core, not {cores}")
        self.root = Path(root).resolve()
        self.host = host
        self.master_port = master_port
        self.ui_port = ui_port
        self.worker_ports = list(workers)
        self.cores = cores
        self.memory = memory
        self.master: Daemon | None = None
        self.workers: list[Daemon] = []

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master_port}"

    @property
    def status_url(self) -> str:
        return f"http://{self.host}:{self.ui_port}/json/"

    def status(self) -> dict | None:
        """The master's JSON status, None while it does not answer."""
        return master_status(self.host, self.ui_port)

    def alive_workers(self) -> list[dict]:
        """The workers the master lists ALIVE (its JSON entries)."""
        status = self.status() or {}
        return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]

    def start(self, timeout: float = START_WAIT_S) -> StandaloneCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.master = start_master(self.root, self.host, self.master_port, self.ui_port)
            await_up(lambda: self.status() is not None, self.master, timeout,
                     f"answered no status at {self.status_url}")
            for number, ports in enumerate(self.worker_ports, 1):
                self.workers.append(start_worker(self.root, f"worker-{number}", self.host,
                                                 ports, self.master_url, self.cores,
                                                 self.memory))
            deadline = time.monotonic() + timeout
            for worker, ports in zip(self.workers, self.worker_ports, strict=True):
                await_up(lambda p=ports: self._registered(p), worker,
                         deadline - time.monotonic(),
                         f"was not listed ALIVE by the master at {self.status_url}")
        except BaseException:
            self.stop()
            raise
        return self

    def _registered(self, ports: WorkerPorts) -> bool:
        return any(w.get("port") == ports.port and w.get("cores") == self.cores
                   for w in self.alive_workers())

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker `index` (0-based) and its executors: the master and the driver see
        it lost, and Spark reschedules its tasks on the others."""
        self.workers[index].kill()

    def stop(self) -> None:
        """Stop the workers, then the master: only the process groups this object started."""
        for daemon in [*reversed(self.workers), self.master]:
            if daemon is not None:
                daemon.stop()

    def __enter__(self) -> StandaloneCluster:
        return self.start() if self.master is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.spark.standalone",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="the address daemons bind to")
    parser.add_argument("--master-port", type=int, default=7077)
    parser.add_argument("--ui-port", type=int, default=8080)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--first-worker-port", type=int, default=7078,
                        help="worker i gets this + i, and its UI --first-worker-ui-port + i")
    parser.add_argument("--first-worker-ui-port", type=int, default=8081)
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--memory", default="512m")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, not {args.workers}")
    ports = [WorkerPorts(args.first_worker_port + i, args.first_worker_ui_port + i)
             for i in range(args.workers)]
    cluster = StandaloneCluster(args.root, args.master_port, args.ui_port, ports, args.host,
                                args.cores, args.memory)
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    with cluster:
        print(f"master {cluster.master_url}, {len(ports)} workers ALIVE", flush=True)
        while not stopped.wait(1.0):
            dead = [d.name for d in cluster.workers + [cluster.master] if not d.alive()]
            if dead:
                print(f"Spark {', '.join(dead)} exited; stopping the cluster", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
