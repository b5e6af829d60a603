"""A cluster's zygote: one warm arm64 interpreter from which its gateways' agents are forked.

The mechanism is in emu.agent.zygote. Here, the host's side: whether this host can use it
(a static busybox for the containers' waiter), the waiter itself, the zygote's container, and
the request that starts an agent in a node's container.

The zygote's container runs the gateway image with the host's PID and network namespaces and
cgroup tree and CAP_SYS_ADMIN (for setns): what it needs to enter the other containers. It
carries the cluster's label, so `down` removes it with the rest; an agent it started lives in
its node's container and dies with it.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from emu.agent.zygote import AGENT_EXIT_FILE, AGENT_FIFO, AGENT_PID_FILE, HOST_CGROUP, read_line
from emu.cluster.inventory import ZYGOTE_ROLE

if TYPE_CHECKING:
    import docker

BUSYBOX = Path("/bin/busybox")
# Where a node's container sees the host's busybox (read-only), its waiter's shell.
WAITER_BUSYBOX = "/usr/local/lib/foglab/busybox"
ZYGOTE_COMMAND = ("python3", "-m", "emu.agent.zygote")
LISTEN_TIMEOUT_S = 120.0  # the zygote's imports under QEMU on a loaded host
REQUEST_TIMEOUT_S = 60.0
PT_INTERP = 3  # an ELF program header naming a dynamic loader


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
    """A running zygote container of one cluster."""

    cluster: str
    container: str

    def start_agent(self, pid: int, environment: dict[str, str], node: str = "") -> int:
        """Start `node`'s agent in the container whose process has host pid `pid`; the
        agent's host pid."""
        request = json.dumps({"pid": pid, "environment": environment}).encode() + b"\n"
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(REQUEST_TIMEOUT_S)
                connection.connect("\0" + socket_name(self.cluster))
                connection.sendall(request)
                reply = json.loads(read_line(connection))
        except OSError as error:
            reply = {"error": f"no answer ({error})"}
        except ValueError:
            reply = {"error": "the zygote closed the request without an answer"}
        if "agent" not in reply:
            raise ZygoteError(f"the zygote of cluster {self.cluster} could not start the agent "
                              f"of {node or '?'} in its container (pid {pid}): "
                              f"{reply.get('error')}")
        return int(reply["agent"])


def start_zygote(client: docker.DockerClient, cluster: str, image: str, labels: dict[str, str],
                 log_config: dict) -> Zygote:
    """Create and start the zygote's container from the gateway image; `wait_listening`
    before the first request."""
    api = client.api
    host_config = api.create_host_config(
        pid_mode="host", network_mode="host", cgroupns="host", cap_add=["SYS_ADMIN"],
        binds={"/sys/fs/cgroup": {"bind": HOST_CGROUP, "mode": "rw"}}, log_config=log_config)
    created = api.create_container(
        image, [*ZYGOTE_COMMAND, socket_name(cluster)], name=f"foglab-{cluster}.zygote",
        labels={**labels, "foglab.role": ZYGOTE_ROLE, "foglab.kind": ZYGOTE_ROLE},
        environment={"PYTHONUNBUFFERED": "1"}, host_config=host_config, detach=True)
    api.start(created["Id"])
    return Zygote(cluster, created["Id"])


def wait_listening(client: docker.DockerClient, zygote: Zygote,
                   timeout_s: float = LISTEN_TIMEOUT_S) -> None:
    """Wait until the zygote listens (its socket shows in the host's /proc/net/unix once it
    has imported the agent); fail with its log if its container ends or the time runs out."""
    name = "@" + socket_name(zygote.cluster)
    deadline = time.monotonic() + timeout_s
    while not _listening(name):
        state = client.api.inspect_container(zygote.container)["State"]
        if not state["Running"] or time.monotonic() > deadline:
            why = (f"its container is {state['Status']}" if not state["Running"] else
                   f"not listening after {timeout_s:.0f} s")
            log = client.api.logs(zygote.container, tail=20).decode(errors="replace")
            raise ZygoteError(f"the zygote of cluster {zygote.cluster} did not start: {why}; "
                              f"its log ends:\n{log}")
        time.sleep(0.2)


def _listening(name: str) -> bool:
    """Whether /proc/net/unix lists a socket bound to `name` (its last field, the path)."""
    with open("/proc/net/unix") as table:
        return any(line.rstrip("\n").endswith(" " + name) for line in table)
