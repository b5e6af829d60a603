"""The images: built from Debian, cached by their inputs, and their servers and Python run."""

from __future__ import annotations

import dataclasses
import os
import queue
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from emu.engines.docker.image_store import DOCKER_TIMEOUT_S, BuiltImage, ensure_image
from emu.images import (
    CLOUD,
    GATEWAY,
    PROJECT_ROOT,
    SERVICES,
    ZOOKEEPER_COMMAND,
    base_key,
    image_files,
    image_tag,
)
from emu.rootfs.build import BuildError

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

pytestmark = pytest.mark.emu

LABELS = {"foglab": "1", "foglab.test": "emu_host"}
# What the agent needs (its own ZooKeeper client replaced kazoo, whose Debian package pulled
# gevent, eventlet and dnspython into every gateway's start; the drivers of a shaped stream
# import workloads.shapes).
GATEWAY_CHECK = ("import importlib.util, paho.mqtt, numpy, platform, emu.agent.zookeeper, "
                 "workloads.shapes; "
                 "assert importlib.util.find_spec('kazoo') is None; print(platform.machine())")
# A cloud VM runs the same agent.
CLOUD_CHECK = "import importlib.util, emu.agent.zookeeper; print(importlib.util.find_spec('kazoo'))"


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    if os.geteuid() != 0:
        pytest.skip("building images needs root")
    docker = pytest.importorskip("docker", reason="the docker SDK is not installed")
    return docker.from_env(timeout=DOCKER_TIMEOUT_S)


@pytest.fixture(scope="module")
def services_image(client: docker.DockerClient) -> BuiltImage:
    return ensure_image(SERVICES, client=client)


@pytest.fixture(scope="module")
def gateway_image(client: docker.DockerClient) -> BuiltImage:
    return ensure_image(GATEWAY, client=client)


@pytest.fixture(scope="module")
def network(client: docker.DockerClient) -> Iterator[str]:
    created = client.networks.create(f"foglab-test-{secrets.token_hex(4)}", driver="bridge",
                                     labels=LABELS)
    try:
        yield created.name
    finally:
        created.remove()


@pytest.fixture
def start(client: docker.DockerClient, network: str) -> Iterator[Callable[..., Container]]:
    """Starts labelled containers on the test network; removes them all afterwards."""
    started: list[Container] = []

    def run(image: str, command: Any = None) -> Container:
        container = client.containers.run(image, command, detach=True, network=network,
                                          labels=LABELS)
        started.append(container)
        return container

    try:
        yield run
    finally:
        for container in started:
            container.remove(force=True)


@pytest.fixture
def output(start) -> Callable[[str, list[str]], str]:
    """Runs a command in a container of an image to its end; gives what it printed."""

    def run(image: str, command: list[str]) -> str:
        container = start(image, command)
        status = container.wait(timeout=600)["StatusCode"]
        printed = container.logs().decode().strip()
        assert status == 0, printed
        return printed

    return run


def address(container: Container, network: str) -> str:
    container.reload()
    return container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]


def eventually(attempt: Callable[[], Any], timeout_s: float) -> Any:
    """attempt's result once it stops raising OSError, within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_mosquitto_answers_on_the_bridge(services_image: BuiltImage, start, network) -> None:
    mqtt = pytest.importorskip("paho.mqtt.client")
    broker = start(services_image.tag)
    mqtt_client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    eventually(lambda: mqtt_client.connect(address(broker, network), 1883), timeout_s=20)
    subscribed, received = threading.Event(), queue.Queue()
    mqtt_client.on_subscribe = lambda *_: subscribed.set()
    mqtt_client.on_message = lambda _client, _data, message: received.put(message.payload)
    mqtt_client.loop_start()
    try:
        mqtt_client.subscribe("foglab/test", qos=1)
        assert subscribed.wait(5)
        mqtt_client.publish("foglab/test", b"hello", qos=1).wait_for_publish(5)
        assert received.get(timeout=5) == b"hello"
    finally:
        mqtt_client.loop_stop()
        mqtt_client.disconnect()


def test_zookeeper_answers_on_the_bridge(services_image: BuiltImage, start, network) -> None:
    kazoo_client = pytest.importorskip("kazoo.client")
    server = start(services_image.tag, list(ZOOKEEPER_COMMAND))
    zookeeper = kazoo_client.KazooClient(hosts=f"{address(server, network)}:2181")
    zookeeper.start(timeout=60)
    try:
        zookeeper.create("/foglab-test", b"state")
        assert zookeeper.get("/foglab-test")[0] == b"state"
    finally:
        zookeeper.stop()
        zookeeper.close()


def test_the_gateway_runs_arm64_python(output, gateway_image: BuiltImage) -> None:
    assert output(gateway_image.tag, ["python3", "-c", GATEWAY_CHECK]) == "aarch64"


def test_the_gateway_carries_the_pure_python_workloads(output, gateway_image) -> None:
    imports = ("import workloads.riot.tasks, workloads.windows, workloads.migration; "
               "import emu.agent.protocol, workloads.topics; "
               "print(emu.agent.protocol.matches is workloads.topics.matches)")
    # The agent's topic rules are workloads.topics', carried by the image, not a copy.
    assert output(gateway_image.tag, ["python3", "-c", imports]) == "True"


def test_images_are_labelled_and_configured(client, gateway_image, services_image) -> None:
    for built, spec in ((gateway_image, GATEWAY), (services_image, SERVICES)):
        image = client.images.get(built.tag)
        assert image.labels["foglab"] == "1"
        assert image.labels["foglab.image"] == spec.name
        assert image.labels["foglab.arch"] == spec.arch
        assert image.labels["foglab.inputs"].startswith(built.tag.partition(":")[2])
        assert image.attrs["Config"]["Cmd"] == list(spec.cmd)
    assert "PYTHONPATH=/opt/foglab" in client.images.get(gateway_image.tag).attrs["Config"]["Env"]


def test_an_unchanged_build_is_a_cache_hit(client, gateway_image: BuiltImage) -> None:
    started = time.monotonic()
    again = ensure_image(GATEWAY, client=client)
    assert again.cached
    assert again.id == gateway_image.id
    assert time.monotonic() - started < 5


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """The gateway's project files, copied where a test may change them."""
    for _, source in image_files(GATEWAY):
        target = tmp_path / source.relative_to(PROJECT_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return tmp_path


@pytest.fixture
def scratch_images(client: docker.DockerClient) -> Iterator[list[str]]:
    """Tags a test builds for itself: removed after the containers that use them."""
    tags: list[str] = []
    try:
        yield tags
    finally:
        for tag in tags:
            client.images.remove(tag)


def test_changing_an_input_file_changes_the_tag(client, scratch_images, output, gateway_image,
                                                project_copy) -> None:
    assert image_tag(GATEWAY, project_copy) == gateway_image.tag
    windows = project_copy / "workloads/windows.py"
    windows.write_text(windows.read_text() + "\nFOGLAB_TEST_MARK = 1\n")
    changed = image_tag(GATEWAY, project_copy)
    assert changed != gateway_image.tag
    started = time.monotonic()
    built = ensure_image(GATEWAY, root=project_copy, client=client)
    scratch_images.append(built.tag)
    # The base image is there: a change of sources costs one small commit.
    assert (built.tag, built.cached) == (changed, False)
    assert time.monotonic() - started < 30
    mark = "import workloads.windows as w; print(w.FOGLAB_TEST_MARK)"
    assert output(built.tag, ["python3", "-c", mark]) == "1"


def test_a_failed_build_leaves_nothing_behind(client, tmp_path: Path) -> None:
    broken = dataclasses.replace(SERVICES, name="broken-test", arch="no-such-arch")
    with pytest.raises(BuildError):
        ensure_image(broken, client=client, cache_dir=tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"base-{base_key(broken)}.lock"]
    assert client.images.list(name=broken.repository) == []


@pytest.mark.slow
def test_an_interrupted_build_leaves_nothing_behind(client, tmp_path: Path) -> None:
    def interrupt(stage: str, fraction: float | None) -> None:
        # Late in debootstrap's second stage, when it has mounted /proc and /sys in the rootfs.
        if stage == "debootstrap" and fraction and fraction > 0.85:
            raise KeyboardInterrupt

    # A package set of its own, so that no base image is there to skip debootstrap.
    spec = dataclasses.replace(SERVICES, name="interrupted-test", packages=("mosquitto",))
    with pytest.raises(KeyboardInterrupt):
        ensure_image(spec, client=client, cache_dir=tmp_path, progress=interrupt)
    assert [path.suffix for path in tmp_path.iterdir()] == [".lock"]
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()


@pytest.mark.slow
def test_the_cloud_image_runs_java_and_pyspark(client, output) -> None:
    cloud = ensure_image(CLOUD, client=client).tag
    assert 'version "17' in output(cloud, ["java", "-version"])
    count = ("from pyspark.sql import SparkSession; "
             "s = SparkSession.builder.master('local[1]').getOrCreate(); "
             "print(s.range(1000).count())")
    assert "1000" in output(cloud, ["python3", "-c", count]).splitlines()
    assert output(cloud, ["python3", "-c", CLOUD_CHECK]).strip() == "None"
