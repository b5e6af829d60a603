"""`python3 -m emu.agent.zygote <socket>`: start gateway agents by forking one warm interpreter.

Under QEMU an arm64 Python pays about a second of CPU to start and import the agent, and each
process keeps its own copy of what it loaded and of QEMU's translated code. The zygote pays
that once: it imports the agent, then listens on an abstract Unix socket. For each request it
forks a child that joins the node's container (its cgroups, then its IPC, UTS, network and PID
namespaces, and its root directory) and forks the agent there. The agent shares the zygote's
pages copy-on-write, runs under the container's CPU and memory limits, shows in `docker top`,
writes to the container's log, and dies with the container.

The container's own process is a waiter (emu.cluster.zygote.waiter_script, run by the host's
static busybox, mounted into the container) that passes SIGTERM and SIGINT to the agent and ends
with the agent's exit code, so `docker stop` stops the agent as it would a PID 1 agent.

A request is one line of JSON, `{"pid": <host pid of the container's process>, "environment":
{...}}`; the answer is one line, `{"agent": <host pid>}` or `{"error": "..."}`. The zygote runs
in a container of the gateway image with the host's PID namespace, network namespace (for the
socket) and cgroup tree, and CAP_SYS_ADMIN for setns: see emu.cluster.zygote.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import random
import signal
import socket
import sys
import time

# setns(2) flags, in the order the child joins them: the network last but one, the PID
# namespace last (it applies to the children forked after it).
NAMESPACES = (("ipc", 0x08000000), ("uts", 0x04000000), ("net", 0x40000000),
              ("pid", 0x20000000))
HOST_CGROUP = "/host-cgroup"  # where the zygote's container mounts the host's /sys/fs/cgroup
# Inside the node's container: the agent's pid (in the container's PID namespace) for the
# waiter, and its exit code when it ends.
AGENT_PID_FILE = "/run/foglab-agent.pid"
AGENT_EXIT_FILE = "/run/foglab-agent.exit"
# The agent holds this FIFO (made by the waiter) open for writing: the waiter's reader ends
# when the agent does.
AGENT_FIFO = "/run/foglab-agent.fifo"
FIFO_WAIT_S = 10.0
REQUEST_LIMIT = 1 << 20
REQUEST_TIMEOUT_S = 10.0


class JoinError(OSError):
    """The child could not enter the node's container."""


def preload() -> None:
    """Import what every agent needs, so that no child imports it again."""
    from emu.agent import __main__ as agent_main

    agent_main.without_openssl()
    import paho.mqtt.client  # noqa: F401 - emu.agent.mqtt imports it with the first client

    import emu.agent.agent  # noqa: F401 - loaded for the children
    import emu.agent.zookeeper  # noqa: F401
    import workloads.riot.senml  # noqa: F401 - the operators' parse and encode


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _setns(libc: ctypes.CDLL, path: str, flag: int) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(descriptor, flag) != 0:
            number = ctypes.get_errno()
            raise JoinError(number, f"setns {path}: {os.strerror(number)}")
    finally:
        os.close(descriptor)


def cgroup_files(pid: int, root: str = HOST_CGROUP, proc: str = "/proc") -> dict[str, str]:
    """The cgroup.procs file of every hierarchy `pid` is in, by hierarchy ("" for cgroup v2's
    unified one, "memory", "cpu,cpuacct", "systemd", ... for v1's), under `root`."""
    found = {}
    with open(f"{proc}/{pid}/cgroup") as lines:
        for line in lines:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            hierarchy = controllers.removeprefix("name=")
            procs = os.path.join(root, hierarchy, path.lstrip("/"), "cgroup.procs")
            if os.path.exists(procs):
                found[hierarchy] = procs
    return found


def memory_cgroup(pid: int, root: str = HOST_CGROUP, proc: str = "/proc") -> str | None:
    """The cgroup.procs file that decides whom `pid`'s new pages are charged to."""
    files = cgroup_files(pid, root, proc)
    return files.get("memory", files.get(""))


def enter(procs: str | None) -> None:
    """Move this process into a cgroup."""
    if procs is not None:
        with open(procs, "w") as cgroup:
            cgroup.write(str(os.getpid()))


def join_container(libc: ctypes.CDLL, pid: int) -> tuple[int, int]:
    """Move this process into the cgroups, namespaces and root of the container whose process
    is `pid`; return that process's stdout and stderr, opened for the agent's output."""
    for procs in cgroup_files(pid).values():
        enter(procs)
    output = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY | os.O_APPEND)
    errors = os.open(f"/proc/{pid}/fd/2", os.O_WRONLY | os.O_APPEND)
    for name, flag in NAMESPACES:
        _setns(libc, f"/proc/{pid}/ns/{name}", flag)
    os.chroot(f"/proc/{pid}/root")
    os.chdir("/")
    return output, errors


def hold_fifo(path: str, timeout_s: float = FIFO_WAIT_S) -> int:
    """Open the waiter's FIFO for writing and keep it (not inherited by children); wait for
    the waiter to make it, then for its reader (opening blocks until one is there)."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise FileNotFoundError(f"the waiter made no {path} within {timeout_s:.0f} s")
        time.sleep(0.02)
    return os.open(path, os.O_WRONLY)


def run_agent(environment: dict[str, str], output: int, errors: int) -> None:
    """In the container: the agent's main, as `python3 -m emu.agent` would run it."""
    from emu.agent import __main__ as agent_main

    code = 1
    try:
        os.dup2(output, 1)
        os.dup2(errors, 2)
        os.close(output)
        os.close(errors)
        os.environ.clear()
        os.environ.update(environment)
        random.seed()  # not the zygote's sequence, shared by every child
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the zygote's own handler
        with open(AGENT_PID_FILE, "w") as pid_file:
            pid_file.write(str(os.getpid()))
        hold_fifo(AGENT_FIFO)
        code = agent_main.main()
    except BaseException as error:  # noqa: BLE001 - reported in the container's log
        print(f"foglab agent (zygote child): {error!r}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            with open(AGENT_EXIT_FILE, "w") as exit_file:
                exit_file.write(str(code))
        finally:
            os._exit(code)


def read_request(connection: socket.socket) -> tuple[int, dict[str, str]]:
    request = json.loads(read_line(connection))
    return int(request["pid"]), {str(k): str(v) for k, v in request["environment"].items()}


def serve_one(libc: ctypes.CDLL, connection: socket.socket, pid: int,
              environment: dict[str, str]) -> None:
    """In a fresh child of the zygote: start the agent in the container, answer, exit (it
    never returns: back in the zygote's loop it would be a second zygote)."""
    answer: dict[str, object]
    try:
        os.setsid()
        output, errors = join_container(libc, pid)
        agent = os.fork()
        if agent == 0:
            connection.close()
            run_agent(environment, output, errors)
        answer = {"agent": agent}
    except Exception as error:  # noqa: BLE001 - answered: this child must never return
        answer = {"error": f"{type(error).__name__}: {error}"}
    _answer(connection, answer)
    os._exit(0)


def _answer(connection: socket.socket, answer: dict[str, object]) -> None:
    with contextlib.suppress(OSError):  # the host gave up waiting
        connection.sendall(json.dumps(answer).encode() + b"\n")


def read_line(connection: socket.socket) -> bytes:
    """One line of the protocol (a request or an answer), up to its newline."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk or len(data) > REQUEST_LIMIT:
            raise ValueError("the line ended before its newline")
        data += chunk
    return data


def reap() -> None:
    """Collect the request handlers that ended. (Their agents, orphaned, go to the nearest
    subreaper: the engine's shim of the zygote's container. QEMU refuses
    PR_SET_CHILD_SUBREAPER, so the zygote cannot adopt them itself.)"""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(name: str) -> None:
    """Import the agent, then listen (so that a listening zygote is a ready one) and start
    agents until SIGTERM."""
    libc = _libc()
    preload()
    gc.collect()
    gc.freeze()  # the collector then leaves the shared objects' pages alone in the children
    own_memory = memory_cgroup(os.getpid())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(256)
    listener.settimeout(1.0)
    print(f"foglab zygote: listening on @{name} as pid {os.getpid()}", flush=True)
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            reap()
            continue
        with connection:
            fork_agent(libc, listener, connection, own_memory)
        reap()


def fork_agent(libc: ctypes.CDLL, listener: socket.socket, connection: socket.socket,
               own_memory: str | None) -> None:
    """Read a request and fork the child that serves it; answer an error here if there is
    one before the fork (a bad request, a container already gone)."""
    try:
        connection.settimeout(REQUEST_TIMEOUT_S)
        pid, environment = read_request(connection)
        memory = memory_cgroup(pid)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        _answer(connection, {"error": f"bad request: {type(error).__name__}: {error}"})
        return
    # The child's pages are charged to the cgroup it first writes them in: the node's memory
    # cgroup from its first step, not the zygote's (a child that wrote its first pages here,
    # then moved, left about 6 MB per gateway charged to the zygote).
    try:
        enter(memory)
        if os.fork() == 0:
            listener.close()
            serve_one(libc, connection, pid, environment)
    except OSError as error:
        _answer(connection, {"error": f"{type(error).__name__}: {error}"})
    finally:
        enter(own_memory)


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python3 -m emu.agent.zygote <abstract socket name>", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(0))
    serve(sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
