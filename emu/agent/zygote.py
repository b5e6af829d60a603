"""`python3 -m emu.agent.zygote <directory>`: start gateway agents by forking one warm interpreter.

Under QEMU an arm64 Python pays about a second of CPU to start and import the agent, and each
process keeps its own copy of what it loaded and of QEMU's translated code. The zygote pays
that once: it imports the agent, then listens on a Unix socket. For each request it forks a
child that joins the node's container (its cgroups, then its IPC, UTS, network and PID
namespaces, and its root directory), gives up every capability (drop_privileges) and forks
the agent there. The agent shares the zygote's pages copy-on-write, runs under the
container's CPU and memory limits, shows in `docker top`, writes to the container's log, and
dies with the container.

The container's own process is a waiter (emu.engines.docker.zygote.waiter_script, run by the host's
static busybox, mounted into the container) that passes SIGTERM and SIGINT to the agent and ends
with the agent's exit code, so `docker stop` stops the agent as it would a PID 1 agent.

Who may give orders. The zygote can enter any process's namespaces, so each order is checked
three times over:

- the socket is a file, `zygote.sock` (0600) in `<directory>` (0700, root's), inside the
  zygote's own container: the host reaches it through `/proc/<zygote pid>/root`, which the
  kernel opens only to a process allowed to ptrace the zygote (root), and a node's container
  not at all; the peer's credentials (SO_PEERCRED) must then say uid 0, or the connection is
  refused and logged;
- the zygote proves it knows the secret the host gave it: the host's first line is a
  challenge, answered with HMAC-SHA256(secret, challenge), and the host sends nothing more
  until the answer is right (so it knows it talks to its zygote, not to a process squatting
  the path, before it sends anything of a node's); the secret is a file the host wrote in
  `<directory>` (0400), read once and removed;
- a request names a container (its 64-hex id) and a host pid in it: the id must name a file
  in `<directory>/allowed`, where the host adds one for each of this cluster's containers
  (checked against its labels; a file each, so that the check reads no list), the pid's
  /proc/<pid>/cgroup must name that id (docker's cgroup path, cgroupfs's `/docker/<id>` or
  systemd's `docker-<id>.scope`), and the environment's keys must be the agent's
  (AGENT_ENVIRONMENT). The host's pid 1, a host process, another cluster's container:
  refused, with the reason in the answer and the zygote's log.

The protocol, a line of JSON each: the host's `{"challenge": <hex>}`, the zygote's `{"proof":
<hex>}`; the host's `{"container": <id>, "pid": <host pid>, "environment": {...}}`, the zygote's
`{"agent": <host pid>}` or `{"error": "..."}`. The zygote runs in a container of the gateway
image with the host's PID namespace and cgroup tree, no network, and the capabilities setns,
chroot and /proc need, limited in memory, CPU and pids: see emu.engines.docker.zygote.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import random
import re
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from emu.agent.config import CONFIG_VARIABLE

# setns(2) flags, in the order the child joins them: the network last but one, the PID
# namespace last (it applies to the children forked after it).
NAMESPACES = (("ipc", 0x08000000), ("uts", 0x04000000), ("net", 0x40000000),
              ("pid", 0x20000000))
HOST_CGROUP = "/host-cgroup"  # where the zygote's container mounts the host's /sys/fs/cgroup
PR_SET_NO_NEW_PRIVS = 38
CAPABILITY_VERSION_3 = 0x20080522  # capset(2)'s header: two 32-bit words of each set
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
# In the zygote's directory (its argument): the socket, the secret the host wrote, and the
# folder of the containers the host allowed, an empty file named by each one's id.
SOCKET_FILE = "zygote.sock"
SECRET_FILE = "secret"
ALLOWED_DIR = "allowed"
CHALLENGE_BYTES = 32
# What a request's environment may set: what emu.engines.docker.engine gives an agent, nothing else
# (no LD_PRELOAD, no PYTHONPATH into the node's files). The Spark JVM options' variable is
# workloads.spark.jvm's, named here: the gateway image has no workloads.spark.
JVM_OPTIONS_VARIABLE = "FOGLAB_SPARK_JVM_OPTIONS"
AGENT_ENVIRONMENT = frozenset({CONFIG_VARIABLE, JVM_OPTIONS_VARIABLE, "PYTHONUNBUFFERED"})
CONTAINER_ID = re.compile(r"[0-9a-f]{64}")
PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class JoinError(OSError):
    """The child could not enter the node's container."""


class Refused(ValueError):
    """A request the zygote will not serve: its answer says why."""


@dataclass(frozen=True)
class Request:
    """A checked request: the container's process, held by its /proc directory (a handle on
    that process, not on whatever later takes its pid), and its cgroups."""

    container: str
    pid: int
    proc: int  # a descriptor of /proc/<pid>
    cgroups: dict[str, str]  # hierarchy -> cgroup.procs file
    environment: dict[str, str]


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


def _setns(libc: ctypes.CDLL, proc: int, path: str, flag: int) -> None:
    descriptor = os.open(path, os.O_RDONLY, dir_fd=proc)
    try:
        if libc.setns(descriptor, flag) != 0:
            number = ctypes.get_errno()
            raise JoinError(number, f"setns {path}: {os.strerror(number)}")
    finally:
        os.close(descriptor)


def cgroup_paths(text: str) -> dict[str, str]:
    """A /proc/<pid>/cgroup's path by hierarchy ("" for cgroup v2's unified one, "memory",
    "cpu,cpuacct", "systemd", ... for v1's)."""
    paths = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        paths[controllers.removeprefix("name=")] = path
    return paths


def cgroup_files(pid: int, root: str = HOST_CGROUP, proc: str = "/proc") -> dict[str, str]:
    """The cgroup.procs file of every hierarchy `pid` is in, by hierarchy, under `root`."""
    with open(f"{proc}/{pid}/cgroup") as text:
        return procs_files(cgroup_paths(text.read()), root)


def procs_files(paths: dict[str, str], root: str = HOST_CGROUP) -> dict[str, str]:
    found = {}
    for hierarchy, path in paths.items():
        procs = os.path.join(root, hierarchy, path.lstrip("/"), "cgroup.procs")
        if os.path.exists(procs):
            found[hierarchy] = procs
    return found


def memory_file(files: dict[str, str]) -> str | None:
    """Of a process's cgroup.procs files, the one that decides whom its new pages are charged
    to."""
    return files.get("memory", files.get(""))


def memory_cgroup(pid: int, root: str = HOST_CGROUP, proc: str = "/proc") -> str | None:
    """The cgroup.procs file that decides whom `pid`'s new pages are charged to."""
    return memory_file(cgroup_files(pid, root, proc))


def in_container(paths: dict[str, str], container: str) -> bool:
    """Whether every cgroup of a process is the container's (or below it): docker names the
    container's cgroup by its id, `/docker/<id>` with the cgroupfs driver,
    `/system.slice/docker-<id>.scope` with systemd's. The host's processes, pid 1 among them,
    are in none."""
    # Plain string work, no regular expression compiled for each request: what the zygote
    # allocates between two forks is copied once per agent and charged to it.
    names = {container, f"docker-{container}.scope"}
    return bool(paths) and all(names & set(path.split("/")) for path in paths.values())


def enter(procs: str | None) -> None:
    """Move this process into a cgroup."""
    if procs is not None:
        with open(procs, "w") as cgroup:
            cgroup.write(str(os.getpid()))


def join_container(libc: ctypes.CDLL, request: Request) -> tuple[int, int]:
    """Move this process into the cgroups, namespaces and root of the request's container
    (through its process's /proc directory: a process that ended meanwhile fails here, its
    pid's next owner is never joined); return that process's stdout and stderr, opened for
    the agent's output."""
    for procs in request.cgroups.values():
        enter(procs)
    proc = request.proc
    output = os.open("fd/1", os.O_WRONLY | os.O_APPEND, dir_fd=proc)
    errors = os.open("fd/2", os.O_WRONLY | os.O_APPEND, dir_fd=proc)
    for name, flag in NAMESPACES:
        _setns(libc, proc, f"ns/{name}", flag)
    root = os.open("root", os.O_RDONLY | os.O_DIRECTORY, dir_fd=proc)
    os.fchdir(root)
    os.close(root)
    os.chroot(".")
    os.chdir("/")
    return output, errors


def drop_privileges(libc: ctypes.CDLL) -> None:
    """Give up every capability, for good, before the agent is forked: it runs the node's
    operators as root in the node's root directory, and with the zygote's SYS_CHROOT a second
    chroot would take it out into the zygote's container (the host's /proc, the host's cgroup
    tree), with SYS_ADMIN and SYS_PTRACE into any container. No new privileges: an exec (of
    a program the node's files hold, run as uid 0) gains none back. (Not the node's mount
    namespace instead of chroot: QEMU's own thread shares this process's filesystem context,
    and the kernel joins no mount namespace then.)"""
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        number = ctypes.get_errno()
        raise JoinError(number, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(number)}")
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    nothing = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; twice
    if libc.capset(header, nothing) != 0:
        number = ctypes.get_errno()
        raise JoinError(number, f"capset: {os.strerror(number)}")


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


def check(message: object, allowed: Callable[[str], bool]) -> Request:
    """A request's container, pid and environment, checked (module docstring); Refused says
    which is wrong. The caller closes the returned request's /proc descriptor."""
    if not isinstance(message, dict):
        raise Refused(f"a request is a JSON object, not {type(message).__name__}")
    container, pid, environment = (message.get(k) for k in ("container", "pid", "environment"))
    if not isinstance(container, str) or not CONTAINER_ID.fullmatch(container):
        raise Refused(f"container {container!r} is not a container id (64 hex digits)")
    if not allowed(container):
        raise Refused(f"container {container[:12]} is not one of this cluster's containers")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise Refused(f"pid {pid!r} is not a process id")
    if not isinstance(environment, dict) or not all(
            isinstance(v, str) for v in environment.values()):
        raise Refused("environment is not an object of strings")
    if extra := sorted(set(environment) - AGENT_ENVIRONMENT):
        raise Refused(f"environment {extra} is not the agent's "
                      f"(it takes {sorted(AGENT_ENVIRONMENT)})")
    try:
        proc = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        raise Refused(f"no process {pid}") from None
    try:
        with open("cgroup", opener=lambda path, flags: os.open(path, flags, dir_fd=proc)) as text:
            paths = cgroup_paths(text.read())
        if not in_container(paths, container):
            where = paths.get("memory", paths.get("", "?"))
            raise Refused(f"pid {pid} is not in container {container[:12]} "
                          f"(its cgroup is {where})")
        return Request(container, pid, proc, procs_files(paths), dict(environment))
    except BaseException:
        os.close(proc)
        raise


def serve_one(libc: ctypes.CDLL, connection: socket.socket, request: Request) -> None:
    """In a fresh child of the zygote: start the agent in the container, answer, exit (it
    never returns: back in the zygote's loop it would be a second zygote)."""
    answer: dict[str, object]
    try:
        os.setsid()
        output, errors = join_container(libc, request)
        drop_privileges(libc)
        agent = os.fork()
        if agent == 0:
            connection.close()
            os.close(request.proc)
            run_agent(request.environment, output, errors)
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


@dataclass
class Door:
    """Who gets in: root alone, to whom the zygote proves it knows the host's secret; and
    into which containers: those the host allowed, in the folder beside the socket."""

    directory: str
    secret: bytearray

    @classmethod
    def open(cls, directory: str) -> Door:
        """Read the secret the host left in `directory` and remove it: from then on only this
        process's memory holds it (and the host's)."""
        path = os.path.join(directory, SECRET_FILE)
        with open(path, "rb") as file:
            secret = bytearray(file.read())
        os.unlink(path)
        if len(secret) < 16:
            raise ValueError(f"the secret in {path} is {len(secret)} bytes, not 16 or more")
        return cls(directory, secret)

    def admit(self, connection: socket.socket) -> bool:
        """Whether the peer is root; if so, answer its challenge. A refusal is answered,
        logged, and the connection closed by the caller."""
        pid, uid, _ = PEERCRED.unpack(connection.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, PEERCRED.size))
        if uid != 0:
            why = f"uid {uid} (pid {pid}) is not root: only root may start agents"
            log(f"refused a connection: {why}")
            _answer(connection, {"error": f"refused: {why}"})
            return False
        try:
            challenge = bytes.fromhex(json.loads(read_line(connection))["challenge"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            _answer(connection, {"error": f"no challenge: {type(error).__name__}: {error}"})
            return False
        if not 16 <= len(challenge) <= 256:
            _answer(connection, {"error": f"a challenge of {len(challenge)} bytes"})
            return False
        # Imported here, after preload: hashlib imported first would load OpenSSL into the
        # zygote and every agent (emu.agent.__main__.without_openssl; 17 MiB more measured).
        import hashlib
        import hmac

        _answer(connection, {"proof": hmac.new(self.secret, challenge, hashlib.sha256)
                             .hexdigest()})
        return True

    def allows(self, container: str) -> bool:
        """Whether the host allowed `container` (an id, checked as one already)."""
        return os.path.exists(os.path.join(self.directory, ALLOWED_DIR, container))

    def forget(self) -> None:
        """In a child: the secret gone from its copy of the zygote's memory (the agent it
        forks runs the experiment's code)."""
        self.secret[:] = bytes(len(self.secret))


def log(message: str) -> None:
    print(f"foglab zygote: {message}", flush=True)


def serve(directory: str) -> None:
    """Import the agent, then listen (so that a zygote that answers is a ready one) and start
    agents until SIGTERM."""
    door = Door.open(directory)
    libc = _libc()
    preload()
    gc.collect()
    gc.freeze()  # the collector then leaves the shared objects' pages alone in the children
    own_memory = memory_cgroup(os.getpid())
    os.chmod(directory, 0o700)
    os.umask(0o077)
    path = os.path.join(directory, SOCKET_FILE)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(256)
    listener.settimeout(1.0)
    log(f"listening on {path} as pid {os.getpid()}")
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            reap()
            continue
        with connection:
            connection.settimeout(REQUEST_TIMEOUT_S)
            if door.admit(connection):
                fork_agent(libc, listener, connection, own_memory, door)
        reap()


def fork_agent(libc: ctypes.CDLL, listener: socket.socket, connection: socket.socket,
               own_memory: str | None, door: Door) -> None:
    """Read a request and fork the child that serves it; answer an error here if there is
    one before the fork (a refused or bad request, a container already gone)."""
    try:
        request = check(json.loads(read_line(connection)), door.allows)
    except Refused as error:
        log(f"refused a request: {error}")
        _answer(connection, {"error": f"refused: {error}"})
        return
    except (OSError, ValueError) as error:
        _answer(connection, {"error": f"bad request: {type(error).__name__}: {error}"})
        return
    # The child's pages are charged to the cgroup it first writes them in: the node's memory
    # cgroup from its first step, not the zygote's (a child that wrote its first pages here,
    # then moved, left about 6 MB per gateway charged to the zygote).
    try:
        enter(memory_file(request.cgroups))
        if os.fork() == 0:
            listener.close()
            door.forget()
            serve_one(libc, connection, request)
    except OSError as error:
        _answer(connection, {"error": f"{type(error).__name__}: {error}"})
    finally:
        os.close(request.proc)
        enter(own_memory)


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python3 -m emu.agent.zygote <directory>", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(0))
    serve(sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
