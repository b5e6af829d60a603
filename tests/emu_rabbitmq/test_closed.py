"""A closed cluster's RabbitMQ broker (run.access: closed, emu.cluster.rabbitmq_access): its
users, vhost and topic permissions from the same secrets and ACL as Mosquitto's. On a real
RabbitMQ: an anonymous client, the image's guest and a wrong password are refused, and a node
cannot publish on another node's topic nor subscribe to it; the host reads everything."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from emu.cluster.access import HOST_USER
from emu.cluster.broker_kinds import RABBITMQ_CONFIG
from emu.cluster.plan import plan_cluster
from emu.cluster.rabbitmq_access import DEFINITIONS_FILE, filter_regex, rabbitmq_hash
from tests.emu_rabbitmq.test_kind import topology

if TYPE_CHECKING:
    import docker

LABELS = {"foglab.test": "emu_rabbitmq"}


def two_gateways():
    from topologies.model import expand
    from topologies.spec import TopologySpec

    return expand(TopologySpec.model_validate({"name": "t", "nodes": [
        {"name": "gw", "kind": "gateway", "profile": "vm.small", "replicas": 2},
        {"name": "b", "kind": "broker", "profile": "vm.small", "broker": {"kind": "rabbitmq"}}],
        "links": [{"from": "gw-*", "to": "b", "latency": "2ms"}]}))


def test_the_hash_is_rabbitmqs_sha256_with_four_bytes_of_salt() -> None:
    raw = base64.b64decode(rabbitmq_hash("s3cret", b"\x01\x02\x03\x04"))
    assert raw[:4] == b"\x01\x02\x03\x04"
    assert raw[4:] == hashlib.sha256(b"\x01\x02\x03\x04" + b"s3cret").digest()


@pytest.mark.parametrize(("grant", "key", "covered"), [
    ("city/+", "city.gw-1", True),
    ("city/+", "city.*", True),             # a subscription `city/+`
    ("city/+", "city.#", False),            # a subscription `city/#` is wider than the grant
    ("city/+", "city.gw-1.x", False),
    ("city/#", "city", True),
    ("city/#", "city.gw-1.x", True),
    ("city/#", "city.#", True),
    ("city/#", "cityx.a", False),
    ("+/gw-1", "city.gw-1", True),
    ("+/gw-1", "city.gw-2", False),
    ("+/gw-1", "city.gw-10", False),
    ("a.b/c", "a/b.c", True),               # the plugin swaps `.` and `/`
])
def test_an_acl_filter_covers_the_routing_keys_mosquitto_would(grant, key, covered) -> None:
    assert bool(re.search(filter_regex(grant), key)) is covered


def test_the_plan_closes_a_rabbitmq_broker_in_its_own_terms() -> None:
    plan = plan_cluster(topology({"kind": "rabbitmq"}), "c", host_cpus=2, closed=True)
    broker = plan.containers["b"]
    files = dict(broker.files)
    assert broker.command[0].endswith("rabbitmq-server")  # not Mosquitto's closed conf
    conf = files[RABBITMQ_CONFIG]
    assert "mqtt.allow_anonymous = false" in conf and "mqtt.allow_anonymous = true" not in conf
    assert "mqtt.default_user" not in conf and f"load_definitions = {DEFINITIONS_FILE}" in conf
    definitions = json.loads(files[DEFINITIONS_FILE])
    users = {user["name"] for user in definitions["users"]}
    assert users == {"gw", HOST_USER}  # every node's and the host's
    # Every user has topic permissions: one without any may use every topic.
    assert {p["user"] for p in definitions["topic_permissions"]} == users
    assert plan.agent_configs()["gw"].mqtt_user == "gw"
    # A `$share/...` filter is a literal topic on RabbitMQ 3.10, which no one may write: every
    # node may subscribe to it (an operator reading its own devices does), never publish there.
    for permission in definitions["topic_permissions"]:
        assert re.search(permission["read"], "$share.filter.city.#")
        if permission["user"] != HOST_USER:
            assert not re.search(permission["write"], "$share.filter.city.x")


# On a real RabbitMQ ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker() -> Iterator[tuple[str, dict[str, str]]]:
    """A RabbitMQ container with a closed plan's files: its address and the passwords."""
    import io
    import tarfile

    from emu.engines.docker.image_store import ensure_image
    from emu.images import RABBITMQ
    from tests.engine import docker_engine

    client: docker.DockerClient = docker_engine()
    plan = plan_cluster(two_gateways(), "c", host_cpus=2, closed=True)
    files = plan.containers["b"].files
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, text in files:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(text.encode()), 0o400
            archive.addfile(info, io.BytesIO(text.encode()))
    image = ensure_image(RABBITMQ, client=client).tag
    container = client.containers.create(image, list(RABBITMQ.cmd), labels=LABELS,
                                         name=f"foglab-test-rmq-{secrets.token_hex(3)}")
    try:
        container.put_archive("/", buffer.getvalue())
        container.start()
        container.reload()
        address = container.attrs["NetworkSettings"]["IPAddress"]
        passwords = {**plan.access.passwords, HOST_USER: plan.access.host[1]}
        deadline = time.monotonic() + 120
        while _login(address, (HOST_USER, passwords[HOST_USER]))[0] != 0:
            assert time.monotonic() < deadline, container.logs()[-2000:].decode()
            time.sleep(1)
        yield address, passwords
    finally:
        container.remove(force=True)


class _Client:
    def __init__(self, address: str, login: tuple[str, str] | None) -> None:
        import paho.mqtt.client as mqtt

        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                  client_id=f"t-{secrets.token_hex(4)}")
        if login:
            self.client.username_pw_set(*login)
        self.code, self.got, self.acks, self.dropped = None, [], {}, 0
        self.ready = threading.Event()
        self.client.on_connect = self._connected
        self.client.on_disconnect = self._disconnected
        self.client.on_message = lambda c, u, m: self.got.append((m.topic, m.payload))
        self.client.on_subscribe = lambda c, u, mid, codes, p: self.acks.update(
            {mid: [code.is_failure for code in codes]})
        self.client.connect(address, 1883)
        self.client.loop_start()
        self.ready.wait(20)

    def _connected(self, client, userdata, flags, code, properties=None) -> None:
        self.code = code.value
        self.ready.set()

    def _disconnected(self, *args) -> None:
        self.dropped += 1
        self.ready.set()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _login(address: str, login: tuple[str, str] | None) -> tuple[int | None, _Client]:
    try:
        client = _Client(address, login)
    except OSError:
        return None, None
    client.close()
    return client.code, client


@pytest.mark.emu
@pytest.mark.parametrize("login", [None, ("guest", "guest"), ("gw-1", "wrong")])
def test_a_client_without_the_runs_login_is_refused(broker, login) -> None:
    address, _ = broker
    code, _ = _login(address, login)
    assert code not in (None, 0)  # the broker answered, refusing


@pytest.mark.emu
def test_a_node_cannot_publish_on_another_nodes_topic_nor_read_it(broker) -> None:
    address, passwords = broker
    host = _Client(address, (HOST_USER, passwords[HOST_USER]))
    victim = _Client(address, ("gw-1", passwords["gw-1"]))
    try:
        host.client.subscribe("#", 1)
        victim.client.subscribe("city/gw-1", 1)
        time.sleep(1)
        assert all(not failed for codes in host.acks.values() for failed in codes)
        forger = _Client(address, ("gw-2", passwords["gw-2"]))
        forger.client.publish("city/gw-2", b"own", qos=1).wait_for_publish(10)
        forger.client.publish("city/gw-1", b"forged", qos=1)
        time.sleep(2)
        # RabbitMQ closes the forger's connection at the refused publish (paho reconnects).
        assert forger.dropped >= 1
        forger.close()
        assert host.got == [("city/gw-2", b"own")]
        assert victim.got == []
        # Nor may it read the node's topic: the subscription is refused, closing the
        # connection, and nothing published there reaches it; the node itself reads it.
        reader = _Client(address, ("gw-2", passwords["gw-2"]))
        reader.client.subscribe("city/gw-1", 1)
        time.sleep(2)
        host.client.publish("city/gw-1", b"from-host", qos=1).wait_for_publish(10)
        time.sleep(1)
        reader.close()
        assert reader.dropped >= 1 and reader.got == []
        assert victim.got == [("city/gw-1", b"from-host")]
    finally:
        host.close()
        victim.close()
