"""foglab's container images: what each holds (ImageSpec: its recipe, its files), tagged by their
inputs; built from Debian without a registry (emu.rootfs), made in a Docker Engine by
emu.engines.docker.image_store."""

from __future__ import annotations

import hashlib
import json
import os
import py_compile
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from emu.rootfs.build import SUITE, VARIANT, Recipe

if TYPE_CHECKING:
    pass

# Bump when the way images are built changes: every tag and cached base changes with it.
BUILDER_VERSION = "1"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
ROOTFS_FILES = Path(__file__).resolve().parent / "rootfs"
CACHE_DIR = Path(os.environ.get("FOGLAB_CACHE", "/var/cache/foglab"))
APP_DIR = "/opt/foglab"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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
    # python3 and emu/links: a swarm's link agents (emu.links.link_agent) run from this image.
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
    inputs: list[object] = [base_key(spec), files, image_config(spec)]
    if spec.sources and precompiles():
        inputs.append(f"pyc-unchecked-{IMAGE_PYTHON[0]}.{IMAGE_PYTHON[1]}")
    return _digest(inputs)


def image_tag(spec: ImageSpec, root: Path = PROJECT_ROOT) -> str:
    """The image's name and tag for its current inputs, e.g. foglab/gateway:93c54c687429d606."""
    return f"{spec.repository}:{input_hash(spec, root)[:TAG_DIGITS]}"


def image_config(spec: ImageSpec) -> list[str]:
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
