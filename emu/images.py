"""foglab's container images, built from Debian without a registry and tagged by their inputs."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import py_compile
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from emu.engines.docker.image_import import import_tarball
from emu.rootfs.build import SUITE, VARIANT, Progress, Recipe, build_tarball

if TYPE_CHECKING:
    import docker

# Bump when the way images are built changes: every tag and cached base changes with it.
BUILDER_VERSION = "1"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
ROOTFS_FILES = Path(__file__).resolve().parent / "rootfs"
CACHE_DIR = Path(os.environ.get("FOGLAB_CACHE", "/var/cache/foglab"))
APP_DIR = "/opt/foglab"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Importing a big rootfs keeps the engine busy before it answers.
DOCKER_TIMEOUT_S = 900
TAG_DIGITS = 16
# The images' Python (Debian bookworm's); bytecode compiled here must be for the same version.
IMAGE_PYTHON = (3, 11)


@dataclass(frozen=True)
class ImageSpec:
    """An image: a Debian rootfs (packages, pip requirements) plus files from the project.

    `sources` are glob patterns relative to the project root, copied to /opt/foglab (on the
    PYTHONPATH); `files` are (file under emu/rootfs/, absolute path in the image) pairs.
    """

    name: str
    arch: str
    packages: tuple[str, ...]
    pip: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    env: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ("python3",)

    @property
    def repository(self) -> str:
        return f"foglab/{self.name}"

    @property
    def recipe(self) -> Recipe:
        return Recipe(self.arch, self.packages, self.pip)


GATEWAY = ImageSpec(
    name="gateway",
    arch="arm64",
    # No python3-kazoo: the agent registers through emu.agent.zookeeper. Debian's kazoo
    # depends on gevent and eventlet, whose .pth files every interpreter reads at start, and on
    # dnspython, which paho imports when it finds it: CPU and memory under QEMU, per gateway.
    packages=("python3", "python3-paho-mqtt", "python3-numpy"),
    # One malloc arena for all threads, read by glibc itself (see emu.agent.__main__).
    env=("MALLOC_ARENA_MAX=1",),
    # The agent's tree and the pure-Python workloads it runs; emu/__init__.py makes emu.agent
    # importable, so it must stay free of imports the gateway lacks.
    sources=("emu/__init__.py", "emu/agent/**/*.py", "workloads/__init__.py",
             "workloads/riot/**/*.py", "workloads/riot/**/*.json", "workloads/windows.py",
             "workloads/shapes.py", "workloads/topics.py", "workloads/migration/**/*.py",
             "workloads/operator_engines.py"),
)
CLOUD = ImageSpec(
    name="cloud",
    arch="amd64",
    # procps: Spark's standalone scripts look for their daemons with ps.
    packages=("python3", "python3-pip", "openjdk-17-jre-headless", "procps"),
    # What the `spark` extra holds, and the agent's needs: a cloud VM runs the same agent as a
    # gateway (registering through emu.agent.zookeeper, no kazoo) and starts its Spark
    # operators as PySpark jobs.
    pip=("pyspark>=4.3,<4.4", "pyarrow>=15", "pandas>=2.2,<3", "numpy>=1.26", "protobuf>=5",
         "grpcio>=1.60", "grpcio-status>=1.60", "zstandard>=0.22", "paho-mqtt>=2.1,<3"),
    sources=("emu/__init__.py", "emu/agent/**/*.py", "workloads/**/*"),
    env=("JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64", "PYSPARK_PYTHON=python3"),
)
SERVICES = ImageSpec(
    name="services",
    arch="amd64",
    # ZooKeeper's jars without Debian's `zookeeper` package, which pulls in a desktop JRE.
    # python3 and emu/links: a swarm's link agents (emu.links.agent) run from this image.
    packages=("mosquitto", "libzookeeper-java", "default-jre-headless", "python3"),
    sources=("emu/__init__.py", "emu/links/*.py"),
    files=(("services/mosquitto.conf", "/etc/foglab/mosquitto.conf"),
           ("services/zoo.cfg", "/etc/foglab/zoo.cfg"),
           ("services/log4j.properties", "/etc/foglab/log4j.properties")),
    cmd=("mosquitto", "-c", "/etc/foglab/mosquitto.conf"),
)
SWARM_NODE = ImageSpec(
    name="swarm-node",
    arch="amd64",
    # A Docker Swarm node in a container (Docker-in-Docker, emu.engines.swarm.nodes): Debian's own
    # Docker Engine (dockerd, containerd, runc; iptables comes with it). Nothing of the
    # project's: emulated nodes run inside it from images pulled through a registry.
    packages=("docker.io",),
    cmd=("dockerd",),
)
RABBITMQ = ImageSpec(
    name="rabbitmq",
    arch="amd64",
    # A broker of `kind: rabbitmq` (topologies.spec.BrokerSpec): Debian's RabbitMQ 3.10 with
    # its MQTT plugin, on 1883 as Mosquitto. Debian's postinst makes the rabbitmq user, its
    # /var/lib/rabbitmq and an Erlang cookie there (0400), which every container of the image
    # shares; HOME points the server (run as root) and the CLI tools (run as rabbitmq by
    # Debian's wrapper) at that one cookie.
    packages=("rabbitmq-server",),
    files=(("rabbitmq/rabbitmq.conf", "/etc/foglab/rabbitmq/rabbitmq.conf"),
           ("rabbitmq/enabled_plugins.conf", "/etc/foglab/rabbitmq/enabled_plugins"),
           ("rabbitmq/rabbitmq-env.conf", "/etc/rabbitmq/rabbitmq-env.conf")),
    env=("HOME=/var/lib/rabbitmq",),
    # The server itself, not /usr/sbin's wrapper, which writes its output to log files: this
    # script stays in the foreground, logs on stdout and stops the node on SIGTERM.
    cmd=("/usr/lib/rabbitmq/bin/rabbitmq-server",),
)
# The swarm node is among the default images: it has no project files, so its tag changes only
# with BUILDER_VERSION, and its build (debootstrap and docker.io) takes about 40 s once.
IMAGES = {spec.name: spec for spec in (GATEWAY, CLOUD, SERVICES, SWARM_NODE, RABBITMQ)}

MOSQUITTO_COMMAND = SERVICES.cmd
# Debian's zookeeper.jar lists its dependencies in its manifest, all but a logging binding.
ZOOKEEPER_COMMAND = (
    "java", "-Xmx256m", "-cp",
    "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar",
    "-Dlog4j.configuration=file:/etc/foglab/log4j.properties",
    "org.apache.zookeeper.server.quorum.QuorumPeerMain", "/etc/foglab/zoo.cfg",
)


@dataclass(frozen=True)
class BuiltImage:
    """An image ready in the engine, and whether it was there already."""

    tag: str
    id: str
    cached: bool


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def image_files(spec: ImageSpec, root: Path = PROJECT_ROOT) -> list[tuple[str, Path]]:
    """The files copied into the image: (path in the image, path here), sorted."""
    found: dict[str, Path] = {}
    for pattern in spec.sources:
        for path in root.glob(pattern):
            relative = path.relative_to(root)
            if path.is_file() and "__pycache__" not in relative.parts:
                found[f"{APP_DIR}/{relative.as_posix()}"] = path
    for source, destination in spec.files:
        found[destination] = ROOTFS_FILES / source
    return sorted(found.items())


def precompiles() -> bool:
    """Whether this host compiles the images' Python sources: only when it runs the images'
    CPython version (bytecode is the same on every architecture, not across versions)."""
    return sys.version_info[:2] == IMAGE_PYTHON


def compiled_files(files: list[tuple[str, Path]]) -> list[tuple[str, bytes]]:
    """Bytecode for the .py files among files: (path in the image, .pyc contents).

    Unchecked-hash pycs: the interpreter loads them without a stat of the source or a hash of
    it, and they do not depend on the files' times in the image. Under QEMU, compiling the
    agent's modules at each start costs seconds of CPU per container, and the memory of the
    compiler. The sources are never changed in an image (a change makes a new one).
    """
    if not precompiles():
        return []
    tag = f"cpython-{IMAGE_PYTHON[0]}{IMAGE_PYTHON[1]}"
    compiled = []
    with tempfile.TemporaryDirectory(prefix="foglab-pyc-") as scratch:
        for index, (path, source) in enumerate(files):
            if not path.endswith(".py"):
                continue
            folder, _, name = path.rpartition("/")
            target = Path(scratch) / f"{index}.pyc"
            # dfile: tracebacks name the file where the image has it.
            py_compile.compile(str(source), cfile=str(target), dfile=path, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            compiled.append((f"{folder}/__pycache__/{name[:-3]}.{tag}.pyc", target.read_bytes()))
    return compiled


def base_key(spec: ImageSpec) -> str:
    """Names the cached base rootfs: everything that debootstrap, apt and pip put in it."""
    return _digest([BUILDER_VERSION, SUITE, VARIANT, spec.arch, sorted(spec.packages),
                    list(spec.pip)])[:TAG_DIGITS]


def input_hash(spec: ImageSpec, root: Path = PROJECT_ROOT) -> str:
    """A hash of everything the image is made of: its base, its files, its configuration."""
    files = [(path, hashlib.sha256(source.read_bytes()).hexdigest())
             for path, source in image_files(spec, root)]
    inputs: list[object] = [base_key(spec), files, _config(spec)]
    if spec.sources and precompiles():
        inputs.append(f"pyc-unchecked-{IMAGE_PYTHON[0]}.{IMAGE_PYTHON[1]}")
    return _digest(inputs)


def image_tag(spec: ImageSpec, root: Path = PROJECT_ROOT) -> str:
    """The image's name and tag for its current inputs, e.g. foglab/gateway:93c54c687429d606."""
    return f"{spec.repository}:{input_hash(spec, root)[:TAG_DIGITS]}"


def _config(spec: ImageSpec) -> list[str]:
    """The image's configuration, as the Dockerfile instructions a commit applies."""
    env = [f"PATH={PATH}", "LANG=C.UTF-8", *spec.env]
    if spec.sources:
        env.append(f"PYTHONPATH={APP_DIR}")
    return [
        *(f"ENV {variable}" for variable in env),
        f"LABEL foglab=1 foglab.image={spec.name} foglab.arch={spec.arch}",
        f"WORKDIR {APP_DIR if spec.sources else '/'}",
        f"CMD {json.dumps(list(spec.cmd))}",
    ]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on path: builds of one base, in any process, wait in turn."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _archive(files: list[tuple[str, Path]], extra: list[tuple[str, bytes]] = ()) -> bytes:
    """The files (and extra contents) as a tar archive, owned by root; the engine makes the
    folders they need."""
    buffer = io.BytesIO()
    contents = [(path, source.read_bytes()) for path, source in files] + list(extra)
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, data in contents:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class _ReadProgress(io.FileIO):
    """A file that reports how much of it has been read, in whole percents."""

    def __init__(self, path: Path, progress: Progress):
        super().__init__(path, "rb")
        self.total = max(path.stat().st_size, 1)
        self.done = 0
        self.reported = -1
        self.progress = progress

    def read(self, size: int = -1) -> bytes:
        data = super().read(size)
        self.done += len(data)
        percent = self.done * 100 // self.total
        if percent > self.reported:
            self.reported = percent
            self.progress("import", percent / 100)
        return data


def _find(client: docker.DockerClient, tag: str) -> str | None:
    from docker.errors import ImageNotFound

    try:
        return client.images.get(tag).id
    except ImageNotFound:
        return None


def _base_image(client: docker.DockerClient, spec: ImageSpec, cache_dir: Path,
                progress: Progress) -> str:
    """The base rootfs as an image, imported from its cached tarball, built first if need be.

    Every image of one base shares its layer: a change of project files adds a small layer,
    not another copy of the rootfs.
    """
    key = base_key(spec)
    repository = f"foglab/base-{spec.arch}"
    tag = f"{repository}:{key}"
    if _find(client, tag):
        return tag
    tarball = cache_dir / f"base-{spec.arch}-{key}.tar"
    if not tarball.exists():
        build_tarball(spec.recipe, tarball, progress)
    with _ReadProgress(tarball, progress) as data:
        # The engine tags the image only once the whole tarball is in: no half image.
        import_tarball(client, data, repository, key,
                       # Inherited: every image says which base it is built on.
                       changes=[f"LABEL foglab=1 foglab.base={tag}"])
    return tag


def _commit(client: docker.DockerClient, spec: ImageSpec, base: str, root: Path, inputs: str,
            progress: Progress) -> None:
    """Add the spec's files to base in a container never started, and commit it as the image."""
    import secrets

    from docker.errors import NotFound

    progress("sources", None)
    # Named before it exists: a Ctrl-C while the engine creates it, before its id comes back,
    # still finds it by name to remove it.
    name = f"foglab-build-{spec.name}-{secrets.token_hex(4)}"
    try:
        container = client.containers.create(base, ["/bin/true"], name=name,
                                             labels={"foglab": "1"})
        files = image_files(spec, root)
        container.put_archive("/", _archive(files, compiled_files(files)))
        progress("commit", None)
        container.commit(repository=spec.repository, tag=inputs[:TAG_DIGITS],
                         changes=[*_config(spec), f"LABEL foglab.inputs={inputs}"])
    finally:
        with contextlib.suppress(NotFound):  # never made
            client.containers.get(name).remove(force=True)


def ensure_image(spec: ImageSpec, *, root: Path = PROJECT_ROOT, cache_dir: Path = CACHE_DIR,
                 client: docker.DockerClient | None = None,
                 progress: Progress = lambda stage, fraction: None) -> BuiltImage:
    """The image for spec's current inputs: found by its tag, else built.

    The base rootfs (debootstrap, apt, pip) is cached per architecture and package set, as a
    tarball in cache_dir and as an image, so a change of project files costs a commit.
    `progress` hears the stages lookup, then for a build debootstrap, apt, pip wheels,
    pip install, pack (without a cached tarball), import (without a base image), sources,
    commit and done.
    A client of the caller's own needs a timeout as long as an import: DOCKER_TIMEOUT_S.
    """
    import docker

    client = client or docker.from_env(timeout=DOCKER_TIMEOUT_S)
    inputs = input_hash(spec, root)
    tag = f"{spec.repository}:{inputs[:TAG_DIGITS]}"
    progress("lookup", None)
    if found := _find(client, tag):
        return BuiltImage(tag, found, cached=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _locked(cache_dir / f"base-{base_key(spec)}.lock"):
        if found := _find(client, tag):  # built by another process while we waited
            return BuiltImage(tag, found, cached=True)
        base = _base_image(client, spec, cache_dir, progress)
        _commit(client, spec, base, root, inputs, progress)
    progress("done", 1.0)
    return BuiltImage(tag, client.images.get(tag).id, cached=False)
