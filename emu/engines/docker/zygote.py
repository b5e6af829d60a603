"""A cluster's zygote: one warm arm64 interpreter from which its gateways' agents are forked.

The mechanism is in emu.agent.zygote. Here, the host's side: whether this host can use it
(a static busybox for the containers' waiter), the waiter itself, the zygote's container, and
the request that starts an agent in a node's container.

The zygote's container runs the gateway image with the host's PID namespace and cgroup tree
(what it needs to enter the other containers) and no network (it listens on a file, and each
agent joins its node's network). Of the capabilities it keeps only
SYS_ADMIN (setns), SYS_CHROOT (chroot into the node's root) and SYS_PTRACE (the kernel opens
another process's /proc/<pid>/ns, fd and root only to a process whose capabilities include
that process's, or that holds SYS_PTRACE: a node's process has Docker's default set, which the
three do not cover); its memory, CPU and pids are limited (zygote_limits). It carries the
cluster's label, so `down` removes it with the rest; an agent it started lives in its node's
container and dies with it.

Only the host's root talks to it. Its socket and the files the host gives it (the secret of
the handshake, the containers allowed) are in a directory (0700) of the zygote's own
container, written before it starts: the host reaches it through `/proc/<zygote pid>/root`,
which the kernel lets only root through, and it goes with the container at `down` (from this
process or any other) or on a failed `up`, with nothing left on the host's disk. A host
directory bind-mounted in would need its own removal, and the cluster's scratch folder, where
it could live, exists only when no records folder is given.

The containers allowed are files the host adds to that directory, each once the engine has
said the container carries this cluster's label (Zygote.start_agent), rather than a list sent
with each request: a request could name whatever it lists, and so check nothing; the
directory is a statement of the cluster's owner that outlives any one connection, which a
request can read but not widen.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import secrets
import socket
import struct
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from emu.agent.zygote import (
    AGENT_EXIT_FILE,
    AGENT_FIFO,
    AGENT_PID_FILE,
    ALLOWED_DIR,
    CHALLENGE_BYTES,
    CONTAINER_ID,
    HOST_CGROUP,
    SECRET_FILE,
    SOCKET_FILE,
    read_line,
)
from emu.engines.docker.inventory import CLUSTER, ZYGOTE_ROLE

if TYPE_CHECKING:
    import docker

BUSYBOX = Path("/bin/busybox")
# Where a node's container sees the host's busybox (read-only), its waiter's shell.
WAITER_BUSYBOX = "/usr/local/lib/foglab/busybox"
ZYGOTE_COMMAND = ("python3", "-m", "emu.agent.zygote")
LISTEN_TIMEOUT_S = 120.0  # the zygote's imports under QEMU on a loaded host
REQUEST_TIMEOUT_S = 60.0
PT_INTERP = 3  # an ELF program header naming a dynamic loader
# In the zygote's container: its directory, holding the socket, the secret and the allow-list.
ZYGOTE_DIR = "/run/foglab-zygote"
SECRET_BYTES = 32
ZYGOTE_CAPABILITIES = ("SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE")  # why: the module docstring
# The zygote's own limits. Memory: its warm interpreter, 41.7 MiB in its cgroup under QEMU
# (cgroup v1) with 2 gateways, and what each agent forked keeps of the pages the zygote
# writes after the fork (each a copy for the zygote, the old page the agent's): 53 MiB with
# 20 gateways, about 0.6 MiB a gateway. A base of 128 MiB and 1 MiB a gateway leaves twice
# that (ZYGOTE_MEMORY_*). CPU: it serves one request at a time on one thread, so one core is
# all it can use. Pids: itself and QEMU's thread (2), and the children still answering (one
# a request, each with QEMU's thread, gone within a second; they leave its cgroups for their
# node's before forking the agent).
ZYGOTE_MEMORY_BASE_MIB = 128
ZYGOTE_MEMORY_PER_GATEWAY_MIB = 1
ZYGOTE_CPUS = 1_000_000_000  # nano CPUs
ZYGOTE_PIDS = 128


class ZygoteError(RuntimeError):
    """The zygote could not start, or could not start an agent."""


def static_busybox(path: Path = BUSYBOX) -> str | None:
    """Why `path` cannot be the containers' waiter (missing, not a 64-bit ELF, linked
    dynamically), or None when it can: a static binary runs in a container of any image."""
    try:
        with path.open("rb") as binary:
            header = binary.read(64)
            if header[:5] != b"\x7fELF\x02":
                return f"{path} is not a 64-bit ELF file"
            (phoff,) = struct.unpack_from("<Q", header, 32)
            phentsize, phnum = struct.unpack_from("<HH", header, 54)
            binary.seek(phoff)
            table = binary.read(phentsize * phnum)
    except OSError as error:
        return f"no {path} ({error.strerror}): install busybox-static"
    types = {struct.unpack_from("<I", table, i * phentsize)[0] for i in range(phnum)}
    if PT_INTERP in types:
        return f"{path} is linked dynamically: install busybox-static"
    return None


def socket_name(cluster: str) -> str:
    """The abstract socket name the zygote bound before it listened on a file in its
    directory: nothing binds it now (tests check that none is left)."""
    return f"foglab-zygote-{cluster}"


def waiter_script(busybox: str = WAITER_BUSYBOX, pid_file: str = AGENT_PID_FILE,
                  exit_file: str = AGENT_EXIT_FILE, fifo: str = AGENT_FIFO) -> str:
    """The container's process, for busybox's shell.

    It makes a FIFO and reads it in the background; the agent holds the FIFO's writing end
    open, so the reader ends when the agent does, and the shell sleeps until then (a waiter
    polling every 0.2 s cost 0.75 % of a core per idle gateway). SIGTERM and SIGINT go on to
    the agent named in the pid file. It exits with the agent's code, 137 when the agent died
    without writing one, 143 when stopped before the agent came (ending its FIFO reader first:
    no agent will, and outside a container it would outlive the shell). Every command is
    busybox's own: the image's are arm64, and would start QEMU.
    """
    return f"""
bb={busybox}
stopping=0
stop() {{
  stopping=1
  [ -s {pid_file} ] && kill -TERM "$($bb cat {pid_file})" 2>/dev/null
}}
trap stop TERM INT
$bb mkfifo {fifo}
$bb cat {fifo} &
watcher=$!
while kill -0 "$watcher" 2>/dev/null; do
  [ "$stopping" = 1 ] && [ ! -s {pid_file} ] && {{ kill "$watcher" 2>/dev/null; exit 143; }}
  wait "$watcher"
done
[ -s {exit_file} ] && exit "$($bb cat {exit_file})"
exit 137
"""


def waiter_command() -> list[str]:
    return [WAITER_BUSYBOX, "sh", "-c", waiter_script()]


def waiter_binds() -> dict[str, dict[str, str]]:
    return {str(BUSYBOX): {"bind": WAITER_BUSYBOX, "mode": "ro"}}


@dataclass
class Zygote:
    """A running zygote container of one cluster: `pid`, its process on the host; `secret`,
    what it proves it knows before the host sends it anything."""

    cluster: str
    container: str
    pid: int
    secret: bytes = field(repr=False)
    client: docker.DockerClient = field(repr=False)
    # container -> its address on each network, as the check of its membership found it
    addresses: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)

    @property
    def directory(self) -> str:
        """The zygote's directory as the host's root reaches it."""
        return f"/proc/{self.pid}/root{ZYGOTE_DIR}"

    @property
    def socket_path(self) -> str:
        return f"{self.directory}/{SOCKET_FILE}"

    def start_agent(self, container: str, environment: dict[str, str], node: str = "") -> int:
        """Start `node`'s agent in `container` (an id), one of this cluster's; the agent's
        host pid."""
        pid = self._member(container, node)
        self.allow(container)
        request = {"container": container, "pid": pid, "environment": environment}
        reply = self.ask(request)
        if "agent" not in reply:
            raise ZygoteError(f"the zygote of cluster {self.cluster} could not start the agent "
                              f"of {node or '?'} in its container {container[:12]} (pid {pid}): "
                              f"{reply.get('error')}")
        return int(reply["agent"])

    def _member(self, container: str, node: str) -> int:
        """The host pid of `container`'s process, once the engine says it carries this
        cluster's label and runs."""
        info = self.client.api.inspect_container(container)
        labels = info["Config"].get("Labels") or {}
        if labels.get(CLUSTER) != self.cluster or labels.get("foglab.role") == ZYGOTE_ROLE:
            raise ZygoteError(f"container {container[:12]} (for {node or '?'}) is not a node of "
                              f"cluster {self.cluster}: its label {CLUSTER} is "
                              f"{labels.get(CLUSTER)!r}")
        if not info["State"]["Running"]:
            raise ZygoteError(f"container {container[:12]} (for {node or '?'}) of cluster "
                              f"{self.cluster} is {info['State']['Status']}, not running")
        networks = (info.get("NetworkSettings") or {}).get("Networks") or {}
        self.addresses[container] = {name: network.get("IPAddress") or ""
                                     for name, network in networks.items()}
        return int(info["State"]["Pid"])

    def allow(self, container: str) -> None:
        """Add a container to the zygote's allow-list: an empty file named by its id."""
        if not CONTAINER_ID.fullmatch(container):
            raise ZygoteError(f"{container!r} is not a container id (64 hex digits)")
        os.close(os.open(f"{self.directory}/{ALLOWED_DIR}/{container}",
                         os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))

    def ask(self, request: dict[str, object]) -> dict:
        """Send one request (after the handshake) and return the zygote's answer; an answer
        `{"error": ...}` when there is none."""
        try:
            with self._connect() as connection:
                connection.sendall(json.dumps(request).encode() + b"\n")
                return json.loads(read_line(connection))
        except OSError as error:
            return {"error": f"no answer ({error})"}
        except ValueError:
            return {"error": "the zygote closed the request without an answer"}

    def _connect(self, timeout_s: float = REQUEST_TIMEOUT_S) -> socket.socket:
        """A connection to the zygote, which has proved it knows the secret."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.settimeout(timeout_s)
            connection.connect(self.socket_path)
            prove(connection, self.secret, f"the zygote of cluster {self.cluster} "
                                           f"({self.socket_path})")
        except BaseException:
            connection.close()
            raise
        return connection

    def answers(self) -> bool:
        """Whether the zygote listens and proves it knows the secret (its readiness); False
        while its socket is not there yet."""
        try:
            self._connect().close()
        except (FileNotFoundError, ConnectionRefusedError):
            return False
        return True


def prove(connection: socket.socket, secret: bytes, who: str) -> None:
    """The host's side of the handshake: a fresh challenge, whose HMAC the peer must answer;
    a ZygoteError, with nothing sent but the challenge, when it does not."""
    challenge = secrets.token_bytes(CHALLENGE_BYTES)
    connection.sendall(json.dumps({"challenge": challenge.hex()}).encode() + b"\n")
    try:
        answer = json.loads(read_line(connection))
    except ValueError:
        answer = {}
    expected = hmac.new(secret, challenge, hashlib.sha256).hexdigest()
    proof = answer.get("proof") if isinstance(answer, dict) else None
    if not isinstance(proof, str) or not hmac.compare_digest(proof, expected):
        why = answer.get("error") if isinstance(answer, dict) else None
        raise ZygoteError(f"{who} did not prove it knows the zygote's secret"
                          + (f" ({why})" if why else "")
                          + ": not this cluster's zygote; nothing was sent to it")


def _directory_archive(secret: bytes) -> bytes:
    """The zygote's directory as a tar for put_archive: root's, 0700; the secret 0400; the
    allow-list's folder, empty, 0700."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        folder = tarfile.TarInfo(ZYGOTE_DIR.lstrip("/"))
        folder.type, folder.mode = tarfile.DIRTYPE, 0o700
        tar.addfile(folder)
        allowed = tarfile.TarInfo(f"{folder.name}/{ALLOWED_DIR}")
        allowed.type, allowed.mode = tarfile.DIRTYPE, 0o700
        tar.addfile(allowed)
        secret_file = tarfile.TarInfo(f"{folder.name}/{SECRET_FILE}")
        secret_file.size, secret_file.mode = len(secret), 0o400
        tar.addfile(secret_file, io.BytesIO(secret))
    return data.getvalue()


def zygote_limits(gateways: int) -> dict[str, int]:
    """The zygote's container's memory, CPU and pids limits for a cluster of `gateways`."""
    memory = ZYGOTE_MEMORY_BASE_MIB + ZYGOTE_MEMORY_PER_GATEWAY_MIB * gateways
    return {"mem_limit": memory * 1024 ** 2, "nano_cpus": ZYGOTE_CPUS,
            "pids_limit": ZYGOTE_PIDS}


def start_zygote(client: docker.DockerClient, cluster: str, image: str, labels: dict[str, str],
                 log_config: dict, gateways: int) -> Zygote:
    """Create the zygote's container from the gateway image for `gateways` agents, give it
    its directory and secret, start it; `wait_listening` before the first request."""
    api = client.api
    host_config = api.create_host_config(
        pid_mode="host", network_mode="none", cgroupns="host", cap_drop=["ALL"],
        cap_add=list(ZYGOTE_CAPABILITIES),
        binds={"/sys/fs/cgroup": {"bind": HOST_CGROUP, "mode": "rw"}}, log_config=log_config,
        **zygote_limits(gateways))
    created = api.create_container(
        image, [*ZYGOTE_COMMAND, ZYGOTE_DIR], name=f"foglab-{cluster}.zygote",
        labels={**labels, "foglab.role": ZYGOTE_ROLE, "foglab.kind": ZYGOTE_ROLE},
        environment={"PYTHONUNBUFFERED": "1"}, host_config=host_config, detach=True)
    secret = secrets.token_bytes(SECRET_BYTES)
    api.put_archive(created["Id"], "/", _directory_archive(secret))
    api.start(created["Id"])
    pid = int(api.inspect_container(created["Id"])["State"]["Pid"])
    return Zygote(cluster, created["Id"], pid, secret, client)


def wait_listening(client: docker.DockerClient, zygote: Zygote,
                   timeout_s: float = LISTEN_TIMEOUT_S) -> None:
    """Wait until the zygote answers the handshake (it listens once it has imported the
    agent); fail with its log if its container ends or the time runs out, and at once if
    what listens does not know the secret."""
    deadline = time.monotonic() + timeout_s
    while not zygote.answers():
        state = client.api.inspect_container(zygote.container)["State"]
        if not state["Running"] or time.monotonic() > deadline:
            why = (f"its container is {state['Status']}" if not state["Running"] else
                   f"not listening after {timeout_s:.0f} s")
            log = client.api.logs(zygote.container, tail=20).decode(errors="replace")
            raise ZygoteError(f"the zygote of cluster {zygote.cluster} did not start: {why}; "
                              f"its log ends:\n{log}")
        time.sleep(0.2)
