"""A closed cluster's ZooKeeper (emu.cluster.access), the exploits on a real server given the
zoo.cfg a closed plan writes: a client without the run's identities refused; a node (kazoo
logged in as gw-1) deleting or changing another's registration refused; a node putting a
chunk of its own into a migration's state transfer refused; a recovery's target handed the
checkpoint it takes over, and only it."""

from __future__ import annotations

import contextlib
import io
import secrets
import socket
import tarfile
import time
from collections.abc import Iterator

import pytest

from emu.agent.checkpoint import checkpoint_path, mark_closed, write
from emu.agent.migration import state_path
from emu.agent.registry import gateway_path
from emu.agent.zookeeper import HANDED, ZooKeeper
from emu.cluster.access import Access, kazoo_options
from emu.cluster.zookeeper_servers import ZOOKEEPER_CONFIG, zookeeper_files
from emu.engines.docker.image_store import ensure_image
from emu.images import SERVICES, ZOOKEEPER_COMMAND
from tests.emu_agent.conftest import wait_for
from tests.engine import docker_engine

pytestmark = pytest.mark.emu

LABELS = {"foglab": "1", "foglab.test": "emu_access_zookeeper"}
NODES = ("gw-1", "gw-2", "gw-3")


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Access]]:
    """A ZooKeeper server in a container with a closed plan's zoo.cfg; host:port, access."""
    from docker.errors import NotFound

    client = docker_engine("containers need root")
    access = Access.make(NODES)
    ((_, conf),) = zookeeper_files("zk", ["zookeeper"], "zookeeper")
    conf += access.zookeeper_super() + "\n"
    image = ensure_image(SERVICES, client=client).tag
    container = client.containers.create(image, list(ZOOKEEPER_COMMAND), labels=LABELS)
    try:
        container.put_archive("/", _archive(ZOOKEEPER_CONFIG, conf))
        container.start()
        container.reload()
        host = container.attrs["NetworkSettings"]["IPAddress"]
        wait_for(lambda: _ruok(host) == b"imok", timeout=180, step=0.5)
        yield f"{host}:2181", access
    finally:
        with contextlib.suppress(NotFound):
            container.remove(force=True)


def _archive(path: str, text: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        data = text.encode()
        info = tarfile.TarInfo(path.lstrip("/"))
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _ruok(host: str) -> bytes:
    try:
        with socket.create_connection((host, 2181), timeout=2) as sock:
            sock.sendall(b"ruok")
            return sock.recv(16)
    except OSError:
        return b""


@pytest.fixture
def agent(server) -> Iterator:
    """A node's session as its agent opens it (emu.agent.zookeeper, its identities)."""
    hosts, access = server
    made: list[ZooKeeper] = []

    def start(node: str) -> ZooKeeper:
        session = ZooKeeper(hosts, 10.0, auth=access.zookeeper_identities(node))
        made.append(session)
        session.start()
        assert session.connected.wait(30)
        return session

    yield start
    for session in made:
        session.close()


@contextlib.contextmanager
def kazoo(hosts: str, auth: list[str] | None = None, **options):
    from kazoo.client import KazooClient

    options.setdefault("auth_data", [("digest", a) for a in auth or []])
    client = KazooClient(hosts=hosts, timeout=10, **options)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def test_a_node_cannot_delete_or_change_anothers_registration(server, agent) -> None:
    from kazoo.exceptions import NoAuthError

    hosts, access = server
    for node in ("gw-1", "gw-2"):
        agent(node).create(gateway_path(node), node.encode(), ephemeral=True, makepath=True)
    identities = access.zookeeper_identities("gw-1").split(",")
    with kazoo(hosts, identities) as gw1:  # the attacker: gw-1's own identities
        assert gw1.get(gateway_path("gw-2"))[0] == b"gw-2"  # the run reads every node's
        with pytest.raises(NoAuthError):
            gw1.delete(gateway_path("gw-2"))
        with pytest.raises(NoAuthError):
            gw1.set(gateway_path("gw-2"), b"forged")
        with pytest.raises(NoAuthError):
            gw1.set_acls(gateway_path("gw-2"), gw1.get_acls(gateway_path("gw-1"))[0])
        gw1.set(gateway_path("gw-1"), b"mine")  # its own, it may
        # Each znode's ACL: two entries, whatever the run's size.
        assert len(gw1.get_acls(gateway_path("gw-2"))[0]) == 2
    with kazoo(hosts) as outsider:  # no identity: refused on the run's paths
        with pytest.raises(NoAuthError):
            outsider.get(gateway_path("gw-2"))
        with pytest.raises(NoAuthError):
            outsider.create(f"{gateway_path('gw-9')}")
    with kazoo(hosts, [access.host_zookeeper_auth]) as host:  # the host may do anything
        host.set(gateway_path("gw-2"), b"host")
        assert host.get(gateway_path("gw-2"))[0] == b"host"


def test_only_a_migrations_source_puts_state_chunks_its_target_takes(server, agent) -> None:
    from emu.agent.zookeeper import NoAuthError

    path = f"/foglab/migration/counter-{secrets.token_hex(3)}"
    source, target, forger = agent("gw-1"), agent("gw-2"), agent("gw-3")
    source.create(path, b"", makepath=True, acl=HANDED)
    with pytest.raises(NoAuthError):  # a chunk of the forger's where the target reads
        forger.create(state_path(path), b"Dforged")
    source.create(state_path(path), b"Dreal")
    assert target.get(state_path(path)) == b"Dreal"
    target.delete(state_path(path))  # taken: the source may write the next
    assert source.exists(state_path(path)) is None


def test_a_recoverys_target_is_handed_the_checkpoint_and_no_other_node(server, agent) -> None:
    from emu.agent.zookeeper import NoAuthError

    hosts, access = server
    key = f"counter-{secrets.token_hex(3)}"
    crashed, target, other = agent("gw-1"), agent("gw-2"), agent("gw-3")
    commit = write(crashed, key, b"state", 1.0)
    mark_closed(crashed, key, 3)
    for node in (target, other):
        with pytest.raises(NoAuthError):
            write(node, key, b"forged", 2.0, previous=commit)
    with kazoo(hosts, **kazoo_options(access)) as host:  # what emu.features.recovery does
        for znode in (checkpoint_path(key), f"{checkpoint_path(key)}/closed"):
            host.set_acls(znode, access.zookeeper_acl("gw-2"))
    write(target, key, b"taken over", 2.0, previous=commit)
    mark_closed(target, key, 4)
    with pytest.raises(NoAuthError):
        mark_closed(other, key, 9)
    with pytest.raises(NoAuthError):
        mark_closed(crashed, key, 9)  # fenced: the old node writes it no more
