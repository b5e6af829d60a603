"""Who may give the zygote orders (issue 40, finding 1), each written as the exploit would be:
a local user who is not root looking for the zygote's socket and connecting; a process that
reaches the socket's file but is not uid 0; root naming a process outside the cluster (the
host's pid 1, a host process, a container without the cluster's label) or an environment
that is not the agent's; a process squatting the socket's path that does not know the secret.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from emu.agent.zygote import AGENT_PID_FILE, read_line
from emu.engines.docker.engine import Cluster
from emu.engines.docker.zygote import (
    WAITER_BUSYBOX,
    Zygote,
    ZygoteError,
    static_busybox,
    wait_listening,
)
from emu.images import GATEWAY
from tests.emu_cluster.test_cluster import leftovers, new_plan

if TYPE_CHECKING:
    import docker

NOBODY = 65534
# An interpreter any user may run (the project's may sit in root's home): the scripts below use
# the standard library only.
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable

# What a local user runs: every socket /proc/net/unix names after the zygote, and the one the
# zygote's command line names (its argument: a directory, or an abstract socket's name), tried
# as given and through the /proc/<pid>/root of each process whose command line is the
# zygote's. Prints each attempt's outcome, a JSON object a line.
LOOK_AND_CONNECT = r"""
import json, os, socket
names = {line.split()[-1] for line in open("/proc/net/unix").read().splitlines()[1:]
         if "foglab-zygote" in line.split()[-1]}
zygotes = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        arguments = open(f"/proc/{pid}/cmdline", "rb").read().rstrip(b"\0").split(b"\0")
    except OSError:
        continue
    if b"emu.agent.zygote" in arguments:
        zygotes.append(pid)
        last = arguments[-1].decode()
        names.add(f"{last}/zygote.sock" if last.startswith("/") else "@" + last)
for name in sorted(names):
    targets = ["\0" + name[1:]] if name.startswith("@") else (
        [name] + [f"/proc/{pid}/root{name}" for pid in zygotes])
    for target in targets:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(10)
            try:
                connection.connect(target)
                outcome = "connected"
            except OSError as error:
                outcome = type(error).__name__
        print(json.dumps({"name": name, "target": target, "outcome": outcome}))
"""

# Root's file access kept (SECBIT_NO_SETUID_FIXUP) but uid 65534: the socket's file reached,
# the zygote's own check of the peer's credentials left to refuse. Prints the zygote's answer.
NOT_UID_0 = r"""
import ctypes, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(28, 1 << 2, 0, 0, 0) == 0, ctypes.get_errno()  # PR_SET_SECUREBITS
os.setresuid(65534, 65534, 0)
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
    connection.settimeout(30)
    connection.connect(sys.argv[1])
    try:  # the zygote may have refused and closed already
        connection.sendall(json.dumps({"challenge": "00" * 32}).encode() + b"\n")
    except OSError:
        pass
    print(connection.recv(4096).decode().strip())
"""


@pytest.fixture(scope="module")
def cluster(client: docker.DockerClient) -> Iterator[Cluster]:
    if static_busybox() is not None:
        pytest.skip(f"no zygote here: {static_busybox()}")
    running = Cluster(new_plan(), client)
    running.up()
    try:
        assert running.zygote is not None
        yield running
    finally:
        running.down()
        assert leftovers(client, running.name) == ([], [])


def _zygote(cluster: Cluster) -> Zygote:
    assert cluster.zygote is not None
    return cluster.zygote


def _zygote_log(client: docker.DockerClient, cluster: Cluster) -> str:
    return client.api.logs(_zygote(cluster).container).decode(errors="replace")


@pytest.mark.emu
def test_a_local_user_who_is_not_root_cannot_reach_the_zygote(cluster: Cluster) -> None:
    tried = subprocess.run([SYSTEM_PYTHON, "-c", LOOK_AND_CONNECT], user=NOBODY, group=NOBODY,
                           capture_output=True, text=True, timeout=60, check=True, cwd="/")
    # This cluster's: its name (an abstract socket's) or a path (the same in every zygote's
    # container; through another cluster's zygote's /proc/<pid>/root, refused alike).
    attempts = [a for a in map(json.loads, tried.stdout.splitlines())
                if a["name"] == f"@foglab-zygote-{cluster.name}" or a["name"].startswith("/")]
    assert attempts, "the user found no zygote socket to try: the test proves nothing"
    assert [a for a in attempts if a["outcome"] == "connected"] == [], attempts
    # Through the zygote's /proc/<pid>/root the kernel itself says no.
    assert any(a["outcome"] == "PermissionError" for a in attempts), attempts


@pytest.mark.emu
def test_a_peer_that_reaches_the_file_but_is_not_uid_0_is_refused(
        client: docker.DockerClient, cluster: Cluster) -> None:
    zygote = _zygote(cluster)
    tried = subprocess.run([sys.executable, "-c", NOT_UID_0, zygote.socket_path],
                           capture_output=True, text=True, timeout=60, check=True, cwd="/")
    answer = json.loads(tried.stdout)
    assert "proof" not in answer
    assert answer["error"].startswith(f"refused: uid {NOBODY} ")
    assert f"refused a connection: uid {NOBODY} " in _zygote_log(client, cluster)


@dataclass
class Outsider:
    """A container without the cluster's label, and a host process: no node of the cluster."""

    container: str
    container_pid: int
    host_pid: int


@pytest.fixture
def outsider(client: docker.DockerClient, cluster: Cluster) -> Iterator[Outsider]:
    created = client.api.create_container(cluster.images[GATEWAY.name], ["sleep", "300"],
                                          labels={"foglab.test": "zygote_access"})
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        client.api.start(created["Id"])
        pid = client.api.inspect_container(created["Id"])["State"]["Pid"]
        yield Outsider(created["Id"], pid, sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
        client.api.remove_container(created["Id"], force=True)


@pytest.mark.emu
def test_requests_for_processes_outside_the_cluster_are_refused(
        client: docker.DockerClient, cluster: Cluster, outsider: Outsider) -> None:
    zygote = _zygote(cluster)
    gateway = next(s for s in cluster.status() if s.node == "gw-1")
    agent = {"FOGLAB_AGENT": "{}"}

    def ask(container: str, pid: int, environment: dict[str, str] = agent) -> str:
        return zygote.ask({"container": container, "pid": pid, "environment": environment})[
            "error"]

    assert ask(gateway.container, 1).startswith(
        f"refused: pid 1 is not in container {gateway.container[:12]} (its cgroup is /")
    assert ask(gateway.container, outsider.host_pid).startswith(
        f"refused: pid {outsider.host_pid} is not in container {gateway.container[:12]}")
    assert ask(outsider.container, outsider.container_pid) == (
        f"refused: container {outsider.container[:12]} is not one of this cluster's containers")
    assert ask(gateway.container, outsider.container_pid).startswith(
        f"refused: pid {outsider.container_pid} is not in container")
    assert ask(gateway.container, 1, {"LD_PRELOAD": "/records/x.so", **agent}).startswith(
        "refused: environment ['LD_PRELOAD'] is not the agent's")
    assert ask("../../etc", 1) == "refused: container '../../etc' is not a container id (64 " \
                                  "hex digits)"
    # Through the host's own door too: the engine says the container is not the cluster's.
    with pytest.raises(ZygoteError, match=rf"container {outsider.container[:12]} .* is not a "
                                          rf"node of cluster {cluster.name}"):
        zygote.start_agent(outsider.container, agent, "intruder")

    log = _zygote_log(client, cluster)
    assert log.count("refused a request: ") == 6
    # Nothing was started: the outsider runs its sleep alone, the host's sleep has no child,
    # and the zygote serves on.
    processes = client.api.top(outsider.container)["Processes"]
    assert len(processes) == 1 and processes[0][-1].endswith("sleep 300"), processes
    assert Path(f"/proc/{outsider.host_pid}/task/{outsider.host_pid}/children").read_text() == ""
    assert client.api.inspect_container(zygote.container)["State"]["Running"]
    assert zygote.answers()


@pytest.mark.emu
def test_a_forked_agent_holds_none_of_the_zygote_s_capabilities(cluster: Cluster) -> None:
    """The zygote's SYS_CHROOT, SYS_ADMIN and SYS_PTRACE would let an agent's operator leave
    its node's root for the zygote's container (the host's /proc and cgroup tree)."""
    for gateway in ("gw-1", "gw-2"):
        pid = int(cluster.exec(gateway, [WAITER_BUSYBOX, "cat", AGENT_PID_FILE]).output)
        status = cluster.exec(gateway, [WAITER_BUSYBOX, "cat", f"/proc/{pid}/status"])
        fields = dict(line.split(":", 1) for line in status.output.decode().splitlines())
        assert "emu.agent.zygote" in cluster.exec(
            gateway, [WAITER_BUSYBOX, "cat", f"/proc/{pid}/cmdline"]).output.decode()
        assert {k: int(fields[k], 16) for k in ("CapEff", "CapPrm", "CapInh", "CapAmb")} == {
            "CapEff": 0, "CapPrm": 0, "CapInh": 0, "CapAmb": 0}
        assert fields["NoNewPrivs"].strip() == "1"


class _AtPath(Zygote):
    """The host's side of a zygote, pointed at a directory of the test's."""

    root: str = ""

    @property
    def directory(self) -> str:
        return self.root


def _squatter(path: str, heard: list[bytes]) -> socket.socket:
    """A process squatting the zygote's socket: it answers every line with a proof of its own
    making and keeps what it hears."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                try:
                    while line := read_line(connection):
                        heard.append(line)
                        connection.sendall(b'{"proof": "' + b"ab" * 32 + b'"}\n')
                except (OSError, ValueError):
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return listener


def test_a_squatter_without_the_secret_fails_the_host_s_handshake_and_hears_no_request(
        tmp_path: Path) -> None:
    heard: list[bytes] = []
    listener = _squatter(str(tmp_path / "zygote.sock"), heard)
    try:
        zygote = _AtPath("c", "0" * 64, os.getpid(), os.urandom(32), client=None)
        zygote.root = str(tmp_path)
        with pytest.raises(ZygoteError, match=r"did not prove it knows the zygote's secret: "
                                              r"not this cluster's zygote; nothing was sent"):
            zygote.ask({"container": "0" * 64, "pid": 1,
                        "environment": {"FOGLAB_AGENT": '{"password": "node-secret"}'}})
        with pytest.raises(ZygoteError, match="did not prove"):
            zygote.answers()  # readiness: the squatter is no ready zygote
        # wait_listening does not wait for it either: it fails at once.
        with pytest.raises(ZygoteError, match="did not prove"):
            wait_listening(None, zygote)  # type: ignore[arg-type]
    finally:
        listener.close()
    assert len(heard) == 3
    assert all(set(json.loads(line)) == {"challenge"} for line in heard)
    assert not any(b"node-secret" in line for line in heard)


def test_the_zygote_s_handshake_loads_no_openssl() -> None:
    """The HMAC uses hashlib's own SHA-256: OpenSSL loaded before the agent's preload would be
    in the zygote and every agent (emu.agent.__main__.without_openssl)."""
    code = ("import sys; from emu.agent import zygote; zygote.preload(); import hashlib, hmac; "
            "hmac.new(b'k' * 32, b'c', hashlib.sha256).hexdigest(); "
            "print(sorted(m for m in ('_hashlib', '_ssl') if sys.modules.get(m)))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).resolve().parents[2])
    assert loaded.stdout.strip() == "[]"
