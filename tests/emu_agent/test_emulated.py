"""The agent against real servers in containers: ZooKeeper registration and its session, and
the agent itself inside the arm64 gateway image."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from emu.agent.config import AgentConfig, DriverConfig, OperatorConfig
from emu.agent.protocol import SEQUENCE_BITS
from emu.agent.registry import Registration, gateway_path, sensor_path
from emu.agent.zookeeper import (
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    ZooKeeper,
    parse_hosts,
)
from emu.control.commands import Controller, wait_registered
from emu.engines.docker.image_store import ensure_image
from emu.images import GATEWAY, SERVICES, ZOOKEEPER_COMMAND
from tests.engine import docker_engine

from .conftest import Listener, wait_for

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container
    from kazoo.client import KazooClient

pytestmark = pytest.mark.emu

LABELS = {"foglab": "1", "foglab.test": "emu_agent"}
# ZooKeeper grants at least 2 ticks (tickTime 2 s): the shortest session there is.
SESSION_TIMEOUT = 4.0
# MQTT 3.1.1 CONNECT, clean session, empty client id: a broker answers with a CONNACK (0x20).
MQTT_CONNECT = bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([4, 0x02, 0, 10, 0, 0])


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    return docker_engine("containers need root")


@pytest.fixture(scope="module")
def network(client: docker.DockerClient) -> Iterator[str]:
    created = client.networks.create(f"foglab-agent-test-{secrets.token_hex(4)}",
                                     driver="bridge", labels=LABELS)
    try:
        yield created.name
    finally:
        created.remove()


@pytest.fixture(scope="module")
def run(client: docker.DockerClient, network: str) -> Iterator[Callable[..., Container]]:
    """Starts labelled containers on the test network; removes them by id afterwards."""
    from docker.errors import NotFound

    started: list[str] = []

    def start(image: str, command: Any = None, **options: Any) -> Container:
        container = client.containers.run(image, command, detach=True, network=network,
                                          labels=LABELS, **options)
        started.append(container.id)
        return container

    try:
        yield start
    finally:
        for container_id in started:
            with contextlib.suppress(NotFound):  # gone already
                client.containers.get(container_id).remove(force=True)


def ip_of(container: Container, network: str) -> str:
    container.reload()
    return container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]


@pytest.fixture(scope="module")
def services(client: docker.DockerClient) -> str:
    return ensure_image(SERVICES, client=client).tag


@pytest.fixture(scope="module")
def zookeeper(services: str, run, network: str) -> str:
    """host:port of a ZooKeeper server in a container, once it answers."""
    server = run(services, list(ZOOKEEPER_COMMAND))
    host = ip_of(server, network)
    wait_for(lambda: answers(host, 2181, b"ruok") == b"imok", timeout=180, step=0.5)
    return f"{host}:2181"


def answers(host: str, port: int, request: bytes) -> bytes:
    """What a server says to request, b"" if it cannot be reached yet."""
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.sendall(request)
            return sock.recv(16)
    except OSError:
        return b""


@pytest.fixture
def zk(zookeeper: str) -> Iterator[KazooClient]:
    from kazoo.client import KazooClient

    observer = KazooClient(hosts=zookeeper, timeout=10)
    observer.start(timeout=60)
    yield observer
    observer.stop()
    observer.close()


def gone(zk: KazooClient, path: str) -> threading.Event:
    """An event set when path is deleted (watched, not polled)."""
    deleted = threading.Event()

    def watch(data: Any, stat: Any, event: Any = None) -> bool:
        if stat is None and event is not None:
            deleted.set()
            return False
        return True

    zk.DataWatch(path, watch)
    return deleted


def gateway_config(config, zookeeper: str, node: str, **fields: Any) -> AgentConfig:
    return config(node, zookeeper=zookeeper, session_timeout=SESSION_TIMEOUT, **fields)


def test_an_agent_registers_itself_and_its_sensors(config, processes, zookeeper, zk) -> None:
    agent_config = gateway_config(config, zookeeper, "gw-z1", drivers=[
        DriverConfig("city", ["d-0", "d-1"], 1.0),
        DriverConfig("taxi", ["t-0"], 1.0, channel="exclusive")],
        operators=[OperatorConfig("filter", reads=["city/#"], writes="clean")])
    process = processes(agent_config)
    registered = wait_registered(zookeeper, ["gw-z1"], timeout=60)
    data = registered["gw-z1"]
    assert data["kind"] == "gateway" and data["pid"] == process.pid
    assert data["arch"] == os.uname().machine
    assert data["operators"] == {"filter": {"task": "passthrough", "running": True}}
    assert abs(data["started"] - time.time()) < 30
    assert sorted(zk.get_children("/iot/sensors")) >= ["city", "taxi"]
    assert zk.get_children("/iot/sensors/city/d-0") == ["city%2Fgw-z1"]
    assert zk.get_children("/iot/sensors/taxi/t-0") == ["taxi%2Fgw-z1%2Ft-0"]
    channel = json.loads(zk.get(sensor_path("taxi", "t-0", "taxi/gw-z1/t-0"))[0])
    assert channel == {"node": "gw-z1", "topic": "taxi/gw-z1/t-0", "qos": 0}
    owner = zk.exists(gateway_path("gw-z1")).ephemeralOwner
    assert owner and zk.exists(sensor_path("city", "d-1", "city/gw-z1")).ephemeralOwner == owner


def test_a_registration_takes_two_round_trips_whatever_its_sensors(zookeeper, zk) -> None:
    """A gateway of 40 sensors behind a slow link registers in a few round trips: the sensors'
    parents are asked for together (one at a time they took six round trips per sensor, and
    a dilated run's gateways behind 350 ms links never registered)."""
    from emu.cluster.relays import RelaySet
    from emu.links.relay import LinkRelay
    from emu.links.spec import LinkShape

    host, port = zookeeper.rsplit(":", 1)
    relays = RelaySet("registration-test").start()
    try:
        (listening,) = relays.add({"zk": LinkRelay(host, int(port), LinkShape(0.1))}).values()
        stream = f"reg-{secrets.token_hex(3)}"
        sensors = [(sensor_path(stream, f"d-{i}", f"{stream}/gw"), b"{}") for i in range(40)]
        registration = Registration(f"127.0.0.1:{listening}", f"gw-{stream}", SESSION_TIMEOUT,
                                    lambda: b"{}", sensors)
        started = time.monotonic()
        registration.start()
        assert registration.registered.wait(30)
        took = time.monotonic() - started
        # Connect (one round trip of 0.2 s), parents and sensors (one), the gateway (one or
        # two: its create, and only if an old znode was there, more): 0.8 s; one at a time:
        # 48 s. A tenth of that tells the two apart and holds at CI's worst (load 6 on two
        # cores), where the round trips are the relay's, not CPU.
        assert took < 4.8, f"registration took {took:.2f} s"
        assert len(zk.get_children(f"/iot/sensors/{stream}")) == 40
        assert zk.exists(gateway_path(f"gw-{stream}")).ephemeralOwner == (
            registration.client.session_id)
        registration.close()
    finally:
        relays.stop()


def test_the_gateway_znode_follows_its_operators(config, agents, zookeeper, zk,
                                                 controller) -> None:
    agents(gateway_config(config, zookeeper, "gw-z2"))
    wait_registered(zookeeper, ["gw-z2"], timeout=60)
    assert controller.install(["gw-z2"], OperatorConfig("sink", reads=["clean/#"])).ok
    assert controller.stop(["gw-z2"], "sink").ok
    wait_for(lambda: json.loads(zk.get(gateway_path("gw-z2"))[0])["operators"] ==
             {"sink": {"task": "passthrough", "running": False}})


def test_a_killed_agent_disappears_when_its_session_times_out(config, processes, zookeeper,
                                                              zk) -> None:
    process = processes(gateway_config(config, zookeeper, "gw-z3"))
    wait_registered(zookeeper, ["gw-z3"], timeout=60)
    deleted = gone(zk, gateway_path("gw-z3"))
    killed = time.monotonic()
    process.send_signal(signal.SIGKILL)
    assert deleted.wait(SESSION_TIMEOUT + 6), "the ephemeral znode outlived the session"
    took = time.monotonic() - killed
    # Not closed: it went when ZooKeeper gave up on the session, not before.
    assert SESSION_TIMEOUT * 0.5 < took < SESSION_TIMEOUT + 6


def test_a_stopped_agent_leaves_at_once(config, processes, zookeeper, zk) -> None:
    process = processes(gateway_config(config, zookeeper, "gw-z4"))
    wait_registered(zookeeper, ["gw-z4"], timeout=60)
    deleted = gone(zk, gateway_path("gw-z4"))
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=2) == 0
    assert deleted.wait(1.0)


def test_a_lost_session_registers_again(config, agents, zookeeper, zk) -> None:
    from kazoo.client import KazooClient

    agent = agents(gateway_config(config, zookeeper, "gw-z5"))
    wait_registered(zookeeper, ["gw-z5"], timeout=60)
    registration = agent.registration
    assert registration is not None
    first = zk.exists(gateway_path("gw-z5")).ephemeralOwner
    # Take over the agent's session and close it: ZooKeeper expires it for the agent.
    session_id, password = registration.client.client_id
    thief = KazooClient(hosts=zookeeper, client_id=(session_id, password), timeout=10)
    thief.start(timeout=60)
    thief.stop()
    thief.close()
    wait_for(lambda: registration.registrations == 2, timeout=30, step=0.2)
    again = zk.exists(gateway_path("gw-z5"))
    assert again is not None and again.ephemeralOwner not in (0, first)


# The agent's own ZooKeeper client against the real server ---------------------------------------


@pytest.fixture
def session(zookeeper: str) -> Iterator[Callable[..., ZooKeeper]]:
    """Started emu.agent.zookeeper clients, connected; closed afterwards."""
    made: list[ZooKeeper] = []

    def start(hosts: str = zookeeper, **options: Any) -> ZooKeeper:
        client = ZooKeeper(hosts, SESSION_TIMEOUT, **options)
        made.append(client)
        client.start()
        assert client.connected.wait(30), "no ZooKeeper session"
        return client

    yield start
    for client in made:
        client.close()


def test_the_zookeeper_client_makes_ephemeral_znodes(session, zk) -> None:
    client = session()
    path = f"/foglab-test/{secrets.token_hex(4)}/node"
    client.create(path, b"one", ephemeral=True, makepath=True)
    assert zk.exists(path).ephemeralOwner == client.session_id == client.client_id[0]
    assert zk.exists(path.rsplit("/", 1)[0]).ephemeralOwner == 0  # parents are persistent
    with pytest.raises(NodeExistsError):
        client.create(path, b"again", ephemeral=True)
    assert client.set(path, b"two").version == 1
    client.set_async(path, b"three").get()
    assert zk.get(path)[0] == b"three"
    assert client.exists(path).ephemeral_owner == client.session_id
    client.delete(path)
    assert client.exists(path) is None and zk.exists(path) is None
    with pytest.raises(NoNodeError):
        client.delete(path)
    with pytest.raises(NoNodeError):
        client.create(f"/foglab-test/{secrets.token_hex(4)}/orphan", b"")


def test_a_closed_clusters_znodes_refuse_a_client_without_its_identity(session, zk,
                                                                     zookeeper) -> None:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    auth = f"foglab:{secrets.token_hex(8)}"
    client = session(auth=auth)
    path = f"/foglab-closed-{secrets.token_hex(4)}/gw-1"
    client.create(path, b"mine", ephemeral=True, makepath=True)
    assert client.get(path) == b"mine"
    for znode in (path, path.rsplit("/", 1)[0]):  # its parents made closed too
        with pytest.raises(NoAuthError):
            zk.get(znode)
    with pytest.raises(NoAuthError):
        zk.get_children(path.rsplit("/", 1)[0])
    insider = KazooClient(hosts=zookeeper, timeout=10, auth_data=[("digest", auth)])
    insider.start(timeout=30)
    try:
        assert insider.get(path)[0] == b"mine"
        assert insider.get_acls(path)[0][0].id.scheme == "digest"
    finally:
        insider.stop()
        insider.close()


def test_the_zookeeper_client_keeps_an_idle_session_and_closes_it(session, zk) -> None:
    client = session()
    path = f"/foglab-test/idle-{secrets.token_hex(4)}"
    client.create(path, b"", ephemeral=True, makepath=True)
    time.sleep(SESSION_TIMEOUT * 2)  # idle: only its pings keep the session
    assert zk.exists(path) is not None and client.connected.is_set()
    deleted = gone(zk, path)
    client.close()
    assert deleted.wait(2.0), "closing the session left its ephemeral znode"
    with pytest.raises(ConnectionLoss):
        client.exists(path)


def test_the_zookeeper_client_starts_a_new_session_when_its_own_expired(session, zk,
                                                                        zookeeper) -> None:
    from kazoo.client import KazooClient

    sessions: list[bool] = []
    # A dead server listed first: the client tries the hosts until one answers.
    client = session(f"127.0.0.1:1,{zookeeper}", on_connected=sessions.append)
    first = client.session_id
    path = f"/foglab-test/expiring-{secrets.token_hex(4)}"
    client.create(path, b"", ephemeral=True, makepath=True)
    thief = KazooClient(hosts=zookeeper, client_id=client.client_id, timeout=10)
    thief.start(timeout=60)
    thief.stop()
    thief.close()
    wait_for(lambda: sessions.count(True) == 2, timeout=30, step=0.1)
    assert client.session_id not in (0, first) and zk.exists(path) is None
    client.create(path, b"", ephemeral=True)
    assert zk.exists(path).ephemeralOwner == client.session_id


def test_the_zookeeper_client_fails_calls_while_it_has_no_connection() -> None:
    assert parse_hosts("a:1,[::1]:2,b") == [("a", 1), ("::1", 2), ("b", 2181)]
    client = ZooKeeper("127.0.0.1:1", 1.0)
    client.start()
    with pytest.raises(ConnectionLoss):
        client.create("/x", b"")
    started = time.monotonic()
    client.close(timeout=1.0)
    # Its timeout at most (1 s), with a margin for a loaded host's late wake-up (CI's worst,
    # load 6 on two cores: tens of ms).
    assert time.monotonic() - started < 3.0


# The agent in the arm64 gateway image ------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(client: docker.DockerClient) -> str:
    """The gateway image with the current agent (a new commit layer when the agent changed)."""
    return ensure_image(GATEWAY, client=client).tag


@pytest.fixture(scope="module")
def bridge_broker(services: str, run, network: str) -> str:
    broker = run(services)
    host = ip_of(broker, network)
    wait_for(lambda: answers(host, 1883, MQTT_CONNECT)[:1] == b"\x20", timeout=30, step=0.2)
    return host


def memory(container: Container) -> tuple[float, float]:
    """The agent's RSS (MiB, as /proc tells it inside: QEMU's own memory included) and its
    container's memory use (MiB, cgroup, less page cache)."""
    status = container.exec_run(["cat", "/proc/1/status"]).output.decode()
    rss = next(int(line.split()[1]) for line in status.splitlines()
               if line.startswith("VmRSS")) / 1024
    stats = container.stats(stream=False)["memory_stats"]
    cache = stats.get("stats", {}).get("inactive_file", 0)
    return rss, (stats["usage"] - cache) / 2**20


def cpu_seconds(container: Container) -> float:
    fields = container.exec_run(["cat", "/proc/1/stat"]).output.decode().rsplit(")", 1)[1]
    utime, stime = fields.split()[11:13]
    return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")


def test_the_agent_runs_in_the_arm64_gateway_image(gateway: str, bridge_broker: str,
                                                   zookeeper: str, run, tmp_path: Path) -> None:
    node = "gw-arm"
    records = tmp_path / node
    records.mkdir()
    agent_config = AgentConfig(
        node=node, mqtt=f"{bridge_broker}:1883", zookeeper=zookeeper,
        session_timeout=SESSION_TIMEOUT, index=7, records="/records",
        drivers=[DriverConfig("city", ["d-0", "d-1"], 5.0, arrivals="periodic", qos=1)])
    idle_config = AgentConfig(node="gw-idle", mqtt=f"{bridge_broker}:1883",
                              zookeeper=zookeeper, session_timeout=SESSION_TIMEOUT,
                              records="/records")
    listener = Listener(bridge_broker, 1883, ["city/#", "clean/#"])
    try:
        started = time.monotonic()
        container = run(gateway, ["python3", "-m", "emu.agent"],
                        environment={"FOGLAB_AGENT": agent_config.to_json()},
                        volumes={str(records): {"bind": "/records", "mode": "rw"}})
        idle = run(gateway, ["python3", "-m", "emu.agent"],
                   environment={"FOGLAB_AGENT": idle_config.to_json()},
                   volumes={str(tmp_path / "idle"): {"bind": "/records", "mode": "rw"}})
        registered = wait_registered(zookeeper, [node, "gw-idle"], timeout=120)
        up = time.monotonic() - started
        assert registered[node]["arch"] == "aarch64"
        wait_for(lambda: len(listener.snapshot("city/")) >= 10, timeout=60)
        heard = listener.snapshot("city/")
        assert {h.topic for h in heard} == {f"city/{node}"}
        assert {h.envelope.id >> SEQUENCE_BITS for h in heard} == {7}
        assert {h.envelope.src for h in heard} == {"d-0", "d-1"}

        with Controller(f"{bridge_broker}:1883") as control:
            pong = control.ping([node, "gw-idle"], timeout=10)
            assert pong.ok, pong.summary()
            assert pong.replies[node].result["arch"] == "aarch64"
            installed = control.install([node], OperatorConfig(
                "valid", task="range_filter", reads=["city/#"], writes="clean"), timeout=60)
            assert installed.ok, installed.summary()
            wait_for(lambda: len(listener.snapshot("clean/")) >= 5, timeout=10)
            time.sleep(0.5)
            # Read locally since the install: no raw message sent after it reached the broker.
            done = installed.replies[node].t_done
            assert [h for h in listener.snapshot("city/") if h.envelope.t > done] == []
            latencies = sorted(h.t - h.envelope.t for h in listener.snapshot("clean/"))
        idle_cpu = cpu_seconds(idle)
        time.sleep(3)
        idle_cpu = (cpu_seconds(idle) - idle_cpu) / 3
        rss, used = memory(idle)
        stopping = time.monotonic()
        container.stop(timeout=10)
        assert container.wait(timeout=10)["StatusCode"] == 0
        stopped = time.monotonic() - stopping
        print("\n" + container.logs().decode().strip())
        print(f"\narm64 agent: registered {up:.1f} s after start, install took "
              f"{installed.duration * 1000:.0f} ms, median latency device to broker "
              f"{latencies[len(latencies) // 2] * 1000:.0f} ms, stopped in {stopped:.2f} s; "
              f"idle agent: RSS {rss:.1f} MiB (QEMU included), container memory "
              f"{used:.1f} MiB, CPU {idle_cpu * 100:.1f} %")
        # Exit code 0 within docker's 10 s: the agent stopped on SIGTERM, not by SIGKILL. (The
        # 2 s bound is tested natively; under QEMU on a loaded host it can take longer.)
        assert stopped < 10.0
        rows = (records / "sent.csv").read_text().splitlines()
        assert rows[0] == "id,stream,source,t_sent,dropped" and len(rows) > 10
    finally:
        listener.close()


# The host's failure detector and re-placer (emu.features.recovery) against the real server:
# where an instance runs when its node crashes and comes back is decided once. The agents'
# control plane is a stand-in here (it answers `migrate.recover` when the test lets it):
# what is under test is the order of the detection, the revival and the re-placement.

RECOVERY = """
name: races
topology:
  name: races
  nodes:
    - {name: sensor, kind: device, replicas: 2}
    - {name: gw-r, kind: gateway, replicas: 2}
    - {name: broker, kind: broker}
  links:
    - {from: sensor-*, to: gw-r-2, latency: 2ms}
    - {from: gw-r-1, to: broker, latency: 5ms}
    - {from: gw-r-2, to: broker, latency: 2ms}
workload:
  name: w
  streams: [{name: s, sources: sensor-*, rate: 10/s, size: 100B, qos: 1}]
pipeline:
  - {name: count, on: gw-r-1, reads: s, window: {size: 2s}, checkpoint: 2s}
scenario:
  recovery: {session_timeout: 2s}
run: {backend: emu, duration: 10s}
"""


class HeldControl:
    """Answers `migrate.recover` once `go` is set (a target slow to restore); keeps what it
    was sent."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.sent: list[tuple[str, str]] = []

    def send(self, nodes, command: str, args=None, timeout: float = 0.0):
        from emu.control.commands import CommandResult, Reply

        (node,) = nodes
        self.sent.append((node, args["operator"]))
        assert self.go.wait(30), "the test never let the re-placement answer"
        return CommandResult(command, {node: Reply(node, True, None, 0.0, 0.0, 0.0,
                                                   {"t_first": 1.0, "held": 3})})


@pytest.fixture
def recovery(zookeeper: str, zk) -> Iterator[tuple[Any, HeldControl, Callable[..., None]]]:
    """A Recovery on RECOVERY's run, its control held, and `register(node, incarnation)`,
    which makes the node's gateway znode as that start of its agent would (the test's own
    session stands in for the agent's; deleting the znode is its session's end)."""
    from kazoo.exceptions import NoNodeError as KazooNoNode

    from emu.features.recovery import Recovery
    from experiments.loader import parse_text

    point = parse_text(RECOVERY).points[0]
    for node in ("gw-r-1", "gw-r-2"):
        with contextlib.suppress(KazooNoNode):
            zk.delete(gateway_path(node))

    def register(node: str, incarnation: int, expired: int = 0) -> None:
        zk.create(gateway_path(node), json.dumps({"incarnation": incarnation,
                                                  "expired": expired}).encode(),
                  makepath=True)

    for node in ("gw-r-1", "gw-r-2"):
        register(node, 0)
    configs = {node: AgentConfig(node=node, mqtt="", operators=[
        OperatorConfig(name="count", reads=["s/#"], window=2.0,
                       session="foglab-op-count-0")] if node == "gw-r-1" else [])
        for node in ("gw-r-1", "gw-r-2")}
    control = HeldControl()
    recovery = Recovery(control, zookeeper, point.spec.scenario.recovery, point.topology,
                        point.spec.workload, configs, clock=time.monotonic)
    recovery.start()
    try:
        yield recovery, control, register
    finally:
        control.go.set()
        recovery.finish(timeout=5)
        for node in ("gw-r-1", "gw-r-2"):
            with contextlib.suppress(KazooNoNode):
                zk.delete(gateway_path(node))


def test_a_node_back_while_its_instance_is_being_re_placed_does_not_start_it(recovery,
                                                                          zk) -> None:
    """The failure CI's loaded host showed (tests/emu_run/test_recovery.py): gw-1 came back
    after its loss was detected but before the re-placement's target answered, and started
    the window operator again beside its new instance."""
    recovery, control, register = recovery
    zk.delete(gateway_path("gw-r-1"))  # its session expired
    wait_for(lambda: control.sent == [("gw-r-2", "count")], timeout=10)
    assert recovery.revive("gw-r-1", 1) == {"count"}  # the target has not answered yet
    control.go.set()
    wait_for(lambda: recovery.rows, timeout=10)
    assert [(r["node"], r["target"], r["error"]) for r in recovery.rows] == [
        ("gw-r-1", "gw-r-2", None)]
    register("gw-r-1", 1)
    wait_for(lambda: recovery.seen.get("gw-r-1") == (1, 0), timeout=10)
    assert recovery.placed == {"gw-r-1": [], "gw-r-2": [recovery.placed["gw-r-2"][0]]}
    assert recovery.placed["gw-r-2"][0].name == "count"


def test_a_node_back_before_its_loss_was_seen_keeps_its_instance(recovery, zk) -> None:
    """Back before ZooKeeper ended its old session: the revived agent runs the instance, and
    the old session's end, seen after, re-places nothing; the new start's own loss does."""
    recovery, control, register = recovery
    assert recovery.revive("gw-r-1", 1) == set()
    zk.delete(gateway_path("gw-r-1"))  # the old session's end, after the revival
    register("gw-r-1", 1)
    wait_for(lambda: recovery.seen.get("gw-r-1") == (1, 0), timeout=10)
    # The watch saw the deletion before the new znode (one path's events come in order),
    # and the detection takes a node's instances off it there and then: they stayed.
    assert [op.name for op in recovery.placed["gw-r-1"]] == ["count"]
    assert recovery._work.empty() and control.sent == [] and recovery.rows == []
    control.go.set()
    zk.delete(gateway_path("gw-r-1"))  # the revived agent crashed in turn
    wait_for(lambda: recovery.rows, timeout=10)
    assert control.sent == [("gw-r-2", "count")]
    assert recovery.revive("gw-r-1", 2) == {"count"}


def test_an_instance_re_placed_onto_a_node_that_crashes_too_is_re_placed_at_its_revival(
        recovery, zk) -> None:
    recovery, control, register = recovery
    control.go.set()
    zk.delete(gateway_path("gw-r-1"))
    wait_for(lambda: recovery.rows, timeout=10)
    register("gw-r-1", 1)
    assert recovery.revive("gw-r-1", 1) == {"count"}
    wait_for(lambda: recovery.seen.get("gw-r-1") == (1, 0) and "gw-r-1" in recovery.live,
             timeout=10)
    # gw-r-2, which took the instance, comes back before its loss is seen: its revived agent
    # does not know the instance (its plan had none), so it goes to the live gw-r-1.
    assert recovery.revive("gw-r-2", 1) == set()
    wait_for(lambda: len(recovery.rows) == 2, timeout=10)
    assert [(r["node"], r["target"]) for r in recovery.rows] == [
        ("gw-r-1", "gw-r-2"), ("gw-r-2", "gw-r-1")]
    assert [op.name for op in recovery.placed["gw-r-1"]] == ["count"]


def test_a_session_lost_and_made_again_unseen_is_a_loss(recovery, zk) -> None:
    """The agent's session expired and it registered again before the watch read the znode
    (a loaded host): the znode says one more session lost, and the instances, which the
    agent fenced, are re-placed."""
    recovery, control, register = recovery
    control.go.set()
    zk.set(gateway_path("gw-r-1"), json.dumps({"incarnation": 0, "expired": 0,
                                               "operators": {}}).encode())
    assert recovery._work.empty() and control.sent == []  # a description changed: nothing
    zk.set(gateway_path("gw-r-1"), json.dumps({"incarnation": 0, "expired": 1}).encode())
    wait_for(lambda: recovery.rows, timeout=10)
    assert control.sent == [("gw-r-2", "count")] and "gw-r-1" in recovery.live


def test_an_agent_whose_session_expired_fences_its_instances(config, agents, zookeeper, zk,
                                                             listen) -> None:
    """Alive after all (a stalled host let its session expire), the agent stops each instance
    that reads through a session of its own, leaving the session to the broker, which holds
    what comes meanwhile for the instance the host re-placed; its znode says the loss."""
    from kazoo.client import KazooClient

    from emu.agent.mqtt import end_session, new_client, session_args

    operator = OperatorConfig("count", reads=["fence/#"], window=1.0,
                              session=f"foglab-op-fence-{secrets.token_hex(3)}")
    agent = agents(gateway_config(config, zookeeper, "gw-z6", operators=[operator],
                                  fence=True))
    wait_registered(zookeeper, ["gw-z6"], timeout=60)
    wait_for(lambda: agent.sessions["count"].subscribed.is_set(), timeout=10)
    registration = agent.registration
    session_id, password = registration.client.client_id
    thief = KazooClient(hosts=zookeeper, client_id=(session_id, password), timeout=10)
    thief.start(timeout=60)
    thief.stop()
    thief.close()
    wait_for(lambda: "count" in agent.fenced and "count" not in agent.operators, timeout=30)
    wait_for(lambda: registration.registrations == 2, timeout=30, step=0.2)
    assert json.loads(zk.get(gateway_path("gw-z6"))[0])["expired"] == 1
    # The broker kept the instance's session: what is published now waits there for it.
    host, port = config("x").mqtt.rsplit(":", 1)
    publisher = new_client(f"fence-pub-{secrets.token_hex(3)}")
    publisher.connect(host, int(port))
    publisher.loop_start()
    try:
        publisher.publish("fence/a", b"x", qos=1).wait_for_publish(5)
    finally:
        publisher.disconnect()
        publisher.loop_stop()
    present = threading.Event()
    taker = new_client(operator.session, persistent=True)
    got: list[bytes] = []
    taker.on_connect = lambda c, u, flags, *rest: (
        flags.session_present and present.set())
    taker.on_message = lambda c, u, message: got.append(message.payload)
    taker.connect(host, int(port), **session_args())
    taker.loop_start()
    try:
        assert present.wait(10), "the fenced instance ended its session"
        wait_for(lambda: got == [b"x"], timeout=10)
    finally:
        taker.disconnect(properties=end_session())
        taker.loop_stop()
