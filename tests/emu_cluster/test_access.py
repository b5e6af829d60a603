"""A closed cluster (emu.cluster.access): the plan's broker files and agents' logins, and a real
Mosquitto on loopback given them: outsiders refused, a gateway kept to its own topics."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emu.cluster.access import ACL_FILE, HOST_USER, PASSWORD_FILE, Access, closed_conf
from emu.cluster.broker_kinds import CLOSED_CONFIG, MOSQUITTO_DEFAULTS
from emu.cluster.plan import plan_cluster
from emu.cluster.zookeeper_servers import ZOOKEEPER_CONFIG
from topologies.catalog import load
from workloads.spark.local_broker import _free_port, find_mosquitto


def test_the_password_file_holds_mosquittos_pbkdf2_hash_of_each_password() -> None:
    access = Access.make(["gw-1", "gw-2"])
    lines = dict(line.split(":", 1) for line in access.password_file().splitlines())
    assert sorted(lines) == [HOST_USER, "gw-1", "gw-2"]
    _, scheme, rounds, salt, digest = lines["gw-1"].split("$")
    assert (scheme, rounds) == ("7", "101")
    expected = hashlib.pbkdf2_hmac("sha512", access.passwords["gw-1"].encode(),
                                   base64.b64decode(salt), 101)
    assert base64.b64decode(digest) == expected
    assert access.passwords["gw-1"] != access.passwords["gw-2"] != access.host_password


def test_the_acl_gives_each_node_its_own_topics_and_its_operators_reads() -> None:
    access = Access.make(["gw-1", "cloud-1"], ["$share/g/alerts/#"],
                         {"cloud-1": ["clean/#", "$share/s/clean/#"]})
    acl = access.acl_file().splitlines()
    assert access.common_reads == ("alerts/#",) and access.reads == {"cloud-1": ("clean/#",)}
    assert acl[1:4] == [f"user {HOST_USER}", "topic readwrite #", "topic read $SYS/#"]
    assert "pattern readwrite +/%u" in acl and "pattern readwrite +/%u/#" in acl
    # clean/# is cloud-1's alone: under its user, not a pattern every node gets.
    assert acl[acl.index("user cloud-1") + 1] == "topic read clean/#"
    assert "pattern read clean/#" not in acl and "pattern read alerts/#" in acl
    assert not any(line.startswith("pattern write clean") for line in acl)
    # The run's control: each node writes under its own name only.
    assert "pattern write foglab/mgmt/controller/%u/#" in acl
    assert not any(line.endswith("foglab/mgmt/controller/#") for line in acl)


def test_a_closed_plan_closes_every_broker_and_logs_every_agent_in() -> None:
    open_plan = plan_cluster(load("smart-city"), "acc", dilation=2)
    plan = plan_cluster(load("smart-city"), "acc", dilation=2, closed=True)
    assert open_plan.access is None and plan.access is not None
    broker = plan.containers["broker-1"]
    assert broker.command == ("mosquitto", "-c", CLOSED_CONFIG)
    files = dict(broker.files)
    assert sorted(files) == sorted([CLOSED_CONFIG, PASSWORD_FILE, ACL_FILE])
    conf = files[CLOSED_CONFIG].splitlines()
    assert "allow_anonymous false" in conf and "allow_anonymous true" not in conf
    assert "sys_interval 20" in conf  # the dilated timers stay
    for agent in plan.agents():
        config = agent.agent
        assert (config.mqtt_user, config.mqtt_password) == plan.access.credentials(agent.node)
        own, run = config.zookeeper_auth.split(",")
        assert own == f"{agent.node}:{config.mqtt_password}"
        assert run == plan.access.zookeeper_auth
    zoo = dict(plan.containers["zookeeper"].files)[ZOOKEEPER_CONFIG].splitlines()
    assert zoo[-1] == plan.access.zookeeper_super()
    assert zoo[-1].startswith(f"DigestAuthenticationProvider.superDigest={HOST_USER}:")
    assert all(c.agent.mqtt_user == "" for c in open_plan.agents())


@contextlib.contextmanager
def closed_mosquitto(access: Access) -> Iterator[int]:
    """A Mosquitto on loopback closed with `access`'s password file and ACL; its port."""
    binary = find_mosquitto()
    if binary is None:
        pytest.skip("mosquitto is not installed (make host installs it)")
    # Not under pytest's folder (0700): run as root, Mosquitto reads the files as its own user.
    folder = Path(tempfile.mkdtemp(prefix="foglab-closed-"))
    folder.chmod(0o755)
    port = _free_port("127.0.0.1")
    conf = (MOSQUITTO_DEFAULTS.read_text().replace("listener 1883 0.0.0.0",
                                                   f"listener {port} 127.0.0.1")
            .replace("persistence true", "persistence false"))
    (folder / "passwd").write_text(access.password_file())
    (folder / "acl").write_text(access.acl_file())
    (folder / "m.conf").write_text(closed_conf(conf, str(folder / "passwd"),
                                               str(folder / "acl")))
    process = subprocess.Popen([binary, "-c", str(folder / "m.conf")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            client, code = _connect(port, *access.host)
            if code == 0:
                client.loop_stop()
                client.disconnect()
                break
            assert time.monotonic() < deadline, "the closed broker did not answer"
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(folder)


@pytest.fixture(scope="module")
def closed_broker() -> Iterator[tuple[int, Access]]:
    access = Access.make(["gw-1", "gw-2", "cloud-1"], reads={"cloud-1": ["clean/#"]})
    with closed_mosquitto(access) as port:
        yield port, access


def _connect(port: int, user: str | None = None, password: str | None = None):
    """A connected client (its loop running) and its CONNACK's code (-1: none)."""
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    if user is not None:
        client.username_pw_set(user, password)
    answered, code = threading.Event(), [-1]

    def on_connect(c, userdata, flags, reason, properties) -> None:
        code[0] = reason.value
        answered.set()

    client.on_connect = on_connect
    try:
        client.connect("127.0.0.1", port)
    except OSError:
        return client, -1
    client.loop_start()
    answered.wait(5)
    if code[0] != 0:
        client.loop_stop()
    return client, code[0]


def _heard(client, filters: list[str]) -> list[str]:
    got: list[str] = []
    subscribed = threading.Event()
    client.on_message = lambda c, u, message: got.append(message.topic)
    client.on_subscribe = lambda *args: subscribed.set()
    client.subscribe([(f, 1) for f in filters])
    assert subscribed.wait(5)
    return got


def test_a_client_without_the_clusters_login_is_refused(closed_broker) -> None:
    port, access = closed_broker
    assert _connect(port)[1] == 135  # not authorised
    assert _connect(port, "gw-1", "wrong")[1] == 135
    assert _connect(port, "gw-1", access.passwords["gw-2"])[1] == 135
    assert _connect(port, *access.credentials("gw-1"))[1] == 0


def test_a_gateway_publishes_and_reads_only_its_own_topics(closed_broker) -> None:
    port, access = closed_broker
    host, _ = _connect(port, *access.host)
    gw1, _ = _connect(port, *access.credentials("gw-1"))
    cloud, _ = _connect(port, *access.credentials("cloud-1"))
    at_host = _heard(host, ["#"])
    at_gw1 = _heard(gw1, ["city/gw-2", "clean/#", "city/gw-1", "#"])
    at_cloud = _heard(cloud, ["clean/#"])
    for topic in ("city/gw-1", "clean/gw-1", "city/gw-2", "clean/gw-2", "foglab/mgmt/gw-2/req"):
        gw1.publish(topic, b"x", qos=1).wait_for_publish(5)
    host.publish("city/gw-2", b"y", qos=1).wait_for_publish(5)
    host.publish("clean/cloud-1", b"z", qos=1).wait_for_publish(5)
    time.sleep(0.5)
    # Its own topics reach the host; another gateway's and another's requests do not.
    assert sorted(set(at_host) - {"city/gw-2", "clean/cloud-1"}) == ["city/gw-1", "clean/gw-1"]
    assert at_host.count("city/gw-2") == 1  # the host's own publish only
    # It reads its own, not another gateway's readings nor the cloud's input (once per
    # matching subscription: Mosquitto sends a copy for each).
    assert sorted(set(at_gw1)) == ["city/gw-1", "clean/gw-1"]
    # The cloud reads what its operator reads, clean/#, from every gateway.
    assert sorted(set(at_cloud)) == ["clean/cloud-1", "clean/gw-1"]
    for client in (host, gw1, cloud):
        client.loop_stop()
        client.disconnect()


def test_closed_conf_keeps_the_rest_of_the_conf(tmp_path: Path) -> None:
    conf = closed_conf("listener 1883\nallow_anonymous true\nlog_type error\n", "/p", "/a")
    assert conf.splitlines() == ["listener 1883", "log_type error",
                                 "# closed (emu.cluster.access)", "allow_anonymous false",
                                 "password_file /p", "acl_file /a"]


def test_a_spark_job_inherits_its_nodes_login(monkeypatch: pytest.MonkeyPatch) -> None:
    import paho.mqtt.client as mqtt

    from emu.agent import mqtt as agent_mqtt
    from emu.agent.spark import job_environment
    from workloads.spark.login import LOGIN_VARIABLE, login

    monkeypatch.delenv(LOGIN_VARIABLE, raising=False)
    assert LOGIN_VARIABLE not in job_environment()  # open: nothing handed down
    monkeypatch.setattr(agent_mqtt, "_credentials", None)
    agent_mqtt.use_credentials("cloud-1", "s3cret")
    environment = job_environment()
    assert environment[LOGIN_VARIABLE] == "cloud-1:s3cret"
    monkeypatch.setenv(LOGIN_VARIABLE, environment[LOGIN_VARIABLE])
    client = login(mqtt.Client(mqtt.CallbackAPIVersion.VERSION2))
    assert (client.username, client.password) == ("cloud-1", "s3cret")
    assert agent_mqtt.new_client("x")._username == b"cloud-1"


def test_an_operator_on_every_gateway_reading_what_a_cloud_vm_writes_is_granted_it() -> None:
    """A display on each phone reads the level cloud-1 computes: through the broker, so each
    gateway is granted `level/#`; a filter of the devices' readings on each gateway, and an
    operator reading a stream written on every one of its own gateways, read in process."""
    from types import SimpleNamespace

    from emu.cluster.access import read_grants

    def op(name, reads, writes=None):
        return SimpleNamespace(name=name, reads=[reads], writes=writes, session=False,
                               slo=None)

    gateway = [op("filter", "city/#", "clean"), op("local", "$share/local/clean/#"),
               op("display", "$share/display/level/#")]
    configs = {"gw-1": SimpleNamespace(kind="gateway", operators=gateway),
               "gw-2": SimpleNamespace(kind="gateway", operators=gateway),
               "cloud-1": SimpleNamespace(kind="cloud_vm",
                                          operators=[op("concentration", "clean/#", "level")])}
    per_node, common = read_grants(configs)
    assert per_node == {"gw-1": {"level/#"}, "gw-2": {"level/#"}, "cloud-1": {"clean/#"}}
    assert common == set()
