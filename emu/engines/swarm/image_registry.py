"""Images for a swarm's nodes, through a registry: Debian's docker-registry on this host, or the
user's own.

A swarm's nodes cannot use the images of this host's engine: each node pulls a service's image
by reference. foglab tags the host's image for the registry, pushes it from the host's engine,
and hands the swarm the reference the nodes pull.

The local registry serves plain HTTP, which Docker allows by default only on 127.0.0.0/8; the
nodes reach the host on their bridge, whose subnet they treat as insecure (emu.engines.swarm.nodes).
The registry binds one address: so two docker-registry processes share one storage folder, one
on 127.0.0.1 (the host's engine pushes there) and one on the bridge's gateway (the nodes pull
there; read-only: nothing is pushed there); pulls start after pushes end, and the filesystem
store is the only state. Neither listens on the host's other interfaces.

Both take only a login (htpasswd, bcrypt): a user `foglab` with a password from `secrets`, made
for the registry's life and held in this process alone. Any local user reaches 127.0.0.1, and
a task container in a node reaches the bridge's gateway (its node routes it there): without the
login neither can read, push or overwrite a tag. Deletes are off. The nodes pull by digest
(`image@sha256:...`), never by tag, so what they run is what the host pushed: a tag moved by
anyone later changes nothing. The password reaches a node's engine only in the header of the
pull the host asks of it (`pull_on`), never in a file, an environment or a command line.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import ctypes.util
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from emu.engines.docker.image_store import DOCKER_TIMEOUT_S

if TYPE_CHECKING:
    import docker

REGISTRY_BINARY = "docker-registry"
READY_S = 15
STOP_S = 10
LOG_TAIL = 15
USER = "foglab"
BCRYPT_COST = 10  # the registry checks a login once per connection: 10 costs about 70 ms
# `readonly` on the nodes' side: they pull only. No `delete`: a manifest or blob stays.
CONFIG = """version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: false
  maintenance:
    readonly:
      enabled: {readonly}
auth:
  htpasswd:
    realm: foglab
    path: {htpasswd}
http:
  addr: {address}
"""


class RegistryError(RuntimeError):
    """A registry that cannot start, or a push it refused."""


def _split(tag: str) -> tuple[str, str]:
    """An image name's repository and tag: foglab/gateway:abc -> (foglab/gateway, abc)."""
    repository, colon, version = tag.rpartition(":")
    if not colon or "/" in version:
        return tag, "latest"
    return repository, version


def push_image(host: docker.DockerClient, local_tag: str, push_ref: str,
               auth: dict[str, str] | None = None) -> str:
    """Tag the host's image local_tag as push_ref, push it (with `auth`, a login), drop the
    extra tag; the manifest's digest the registry stored (sha256:...)."""
    from docker.errors import ImageNotFound

    try:
        image = host.images.get(local_tag)
    except ImageNotFound:
        raise RegistryError(f"push {local_tag!r}: no such image in this host's engine "
                            "(`foglab emu build` makes foglab's)") from None
    repository, version = _split(push_ref)
    image.tag(repository, version)
    digest = None
    try:
        for line in host.api.push(repository, version, stream=True, decode=True,
                                  auth_config=auth):
            if "error" in line:
                detail = line.get("error")
                hint = (" (an insecure registry must be in the engine's insecure-registries)"
                        if "HTTPS" in str(detail) else "")
                raise RegistryError(f"push {local_tag!r} to {push_ref!r}: {detail}{hint}")
            digest = (line.get("aux") or {}).get("Digest") or digest
    finally:
        if push_ref != local_tag:
            host.images.remove(push_ref, noprune=True)
    if not digest:
        raise RegistryError(f"push {local_tag!r} to {push_ref!r}: the registry named no digest")
    return digest


def by_digest(ref: str, digest: str) -> str:
    """HOST:PORT/REPO:TAG and its digest -> HOST:PORT/REPO@sha256:...: what a node pulls."""
    return f"{_split(ref)[0]}@{digest}"


@dataclass
class ExternalRegistry:
    """The user's own registry at HOST:PORT: foglab only pushes; the nodes pull the same name.

    The host's engine and every node must already trust it (TLS, or insecure-registries).
    """

    address: str
    host: docker.DockerClient | None = None

    def __post_init__(self) -> None:
        name, colon, port = self.address.rpartition(":")
        if not (colon and name and port.isdigit()) or "/" in self.address:
            raise ValueError(f"registry {self.address!r}: HOST:PORT, e.g. registry.lab:5000")

    def push(self, local_tag: str) -> str:
        """Push the host's image local_tag; return the reference the nodes pull, by digest.
        A login is the host engine's own (its config file)."""
        ref = f"{self.address}/{local_tag}"
        return by_digest(ref, push_image(self.host or _host(), local_tag, ref))

    def stop(self) -> None:
        """Nothing to stop: the registry is the user's."""


@dataclass
class LocalRegistry:
    """docker-registry on this host, for nodes that reach it at bridge_ip (SwarmNodes.gateway).

    storage: the registry's folder, kept (a cache: a second push of the same layers sends
    nothing); without it a temporary folder, removed by stop(). port: free on both addresses
    when not given. Use as a context manager, or start() then stop().
    The processes end with the thread that started them (a killed test leaves no registry),
    unless `outlive`: then only stop() (or their pids, `pids`) ends them.
    """

    bridge_ip: str
    port: int | None = None
    storage: Path | None = None
    ready_s: float = READY_S
    host: docker.DockerClient | None = None
    outlive: bool = False
    _processes: list[tuple[subprocess.Popen, Path]] = field(default_factory=list, init=False)
    _scratch: Path | None = field(default=None, init=False)
    _password: str = field(default_factory=lambda: secrets.token_urlsafe(24), init=False,
                           repr=False)

    def __enter__(self) -> LocalRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pull_address(self) -> str:
        """Where the nodes pull from."""
        return f"{self.bridge_ip}:{self.port}"

    @property
    def pids(self) -> list[int]:
        return [process.pid for process, _ in self._processes]

    @property
    def push_address(self) -> str:
        """Where the host's engine pushes to (loopback: insecure-allowed by default)."""
        return f"127.0.0.1:{self.port}"

    @property
    def auth(self) -> dict[str, str]:
        """The login, as the Docker SDK's auth_config: sent in a request's header only."""
        return {"username": USER, "password": self._password}

    def start(self) -> LocalRegistry:
        binary = shutil.which(REGISTRY_BINARY)
        if binary is None:
            raise RegistryError(f"no {REGISTRY_BINARY} on this host: `foglab emu doctor --fix` "
                                "installs Debian's docker-registry, or name your own registry")
        try:
            self._start(binary)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, binary: str) -> None:
        self._scratch = Path(tempfile.mkdtemp(prefix="foglab-registry-"))  # 0700
        root = self.storage or self._scratch / "storage"
        root.mkdir(parents=True, exist_ok=True)
        htpasswd = self._scratch / "htpasswd"
        fd = os.open(htpasswd, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f"{USER}:{bcrypt(self._password)}\n")
        self.port = self.port or _free_port(self.bridge_ip)
        for address, readonly in (("127.0.0.1", "false"), (self.bridge_ip, "true")):
            name = address.replace(".", "-")
            config = self._scratch / f"{name}.yml"
            config.write_text(CONFIG.format(root=root, address=f"{address}:{self.port}",
                                            readonly=readonly, htpasswd=htpasswd))
            log = self._scratch / f"{name}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [binary, "serve", str(config)], stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    preexec_fn=None if self.outlive else _end_with_parent)
            self._processes.append((process, log))
        for (process, log), address in zip(self._processes,
                                           (self.push_address, self.pull_address), strict=True):
            self._wait(process, log, address)

    def _wait(self, process: subprocess.Popen, log: Path, address: str) -> None:
        """Until the registry answers the login (200): it is up, and the login works."""
        login = base64.b64encode(f"{USER}:{self._password}".encode()).decode()
        request = urllib.request.Request(f"http://{address}/v2/",
                                         headers={"Authorization": f"Basic {login}"})
        deadline = time.monotonic() + self.ready_s
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(request, timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.2)
        state = (f"exited with status {process.returncode}" if process.poll() is not None
                 else f"does not answer within {self.ready_s:g} s")
        with log.open(errors="replace") as lines:
            tail = "".join(deque(lines, maxlen=LOG_TAIL)).rstrip()
        raise RegistryError(f"{REGISTRY_BINARY} on {address} {state}; its log's last lines:\n"
                            f"{tail}")

    def push(self, local_tag: str, pull_on: Sequence[docker.DockerClient] = ()) -> str:
        """Push the host's image local_tag; return the reference the nodes pull, by digest.
        `pull_on`: node engines that pull it now, with the login (in parallel); a swarm task
        naming an image by digest that its node has is not pulled again, so Swarm itself
        never needs the login."""
        if not self._processes:
            raise RegistryError("the registry is not started")
        pushed = f"{self.push_address}/{local_tag}"
        ref = by_digest(f"{self.pull_address}/{local_tag}",
                        push_image(self.host or _host(), local_tag, pushed, self.auth))
        if pull_on:
            with ThreadPoolExecutor(len(pull_on)) as pool:
                list(pool.map(lambda client: self._pull(client, ref), pull_on))
        return ref

    def _pull(self, client: docker.DockerClient, ref: str) -> None:
        for line in client.api.pull(ref, stream=True, decode=True, auth_config=self.auth):
            if "error" in line:
                raise RegistryError(f"pull {ref!r} on {client.api.base_url}: {line['error']}")

    def image_ref(self, pull_on: Sequence[docker.DockerClient]) -> Callable[[str], str]:
        """A swarm target's image_ref: push a tag, have every node in `pull_on` pull it."""
        return lambda local_tag: self.push(local_tag, pull_on)

    def stop(self) -> None:
        """End the registry's processes and remove its temporary folder (not `storage`)."""
        for process, _ in self._processes:
            process.terminate()
        for process, _ in self._processes:
            try:
                process.wait(STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes.clear()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def bcrypt(password: str, cost: int = BCRYPT_COST) -> str:
    """The bcrypt hash ($2b$) the registry's htpasswd takes, from the C library's libcrypt
    (libxcrypt: Debian's, with bcrypt), not a Python package."""
    name = ctypes.util.find_library("crypt")
    if name is None:
        raise RegistryError("no libcrypt on this host: the registry's login needs its bcrypt")
    lib = ctypes.CDLL(name, use_errno=True)
    lib.crypt_gensalt.restype = lib.crypt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p,
                                  ctypes.c_int]
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = lib.crypt_gensalt(b"$2b$", cost, None, 0)
    hashed = lib.crypt(password.encode(), salt) if salt else None
    if not hashed or not hashed.startswith(b"$2b$"):
        raise RegistryError("this host's libcrypt makes no bcrypt hash (the registry's login)")
    return hashed.decode()


def _end_with_parent() -> None:
    """In the child before exec: the kernel sends it SIGTERM when its parent thread ends."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _host() -> docker.DockerClient:
    import docker

    return docker.from_env(timeout=DOCKER_TIMEOUT_S)


def _free_port(bridge_ip: str) -> int:
    """A port free on both loopback and the bridge's address (the kernel's pick on one)."""
    for _ in range(20):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind((bridge_ip, port))
                except OSError:
                    continue
            return port
    raise RegistryError(f"no port free on both 127.0.0.1 and {bridge_ip}")
