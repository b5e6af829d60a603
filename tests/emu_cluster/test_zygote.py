"""Gateways' agents forked from the cluster's zygote: registered, inside their own containers
(cgroup, PID namespace, hostname, log), small, stopped by SIGTERM with their exit code, gone
from ZooKeeper when killed, and nothing left after down."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from emu.agent.zygote import AGENT_PID_FILE
from emu.control.commands import wait_registered
from emu.engines.docker.engine import Cluster
from emu.engines.docker.zygote import WAITER_BUSYBOX, static_busybox
from emu.host.metrics import ContainerCgroup
from tests.emu_cluster.test_cluster import leftovers, new_plan

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.emu,
              pytest.mark.skipif(static_busybox() is not None,
                                 reason=f"no zygote here: {static_busybox()}")]

MiB = 1024 ** 2
IDLE_GATEWAY_MB = 25  # the emulation issue's target for an idle gateway


def test_forked_agents_live_in_their_containers_and_leave_with_them(
        client: docker.DockerClient) -> None:
    cluster = Cluster(new_plan(), client)
    cluster.up()
    try:
        assert cluster.facts["agent_start"] == "zygote"
        status = {s.node: s for s in cluster.status()}
        assert sorted(status) == sorted(cluster.plan.containers)  # the zygote is no node
        zookeeper = ",".join(f"{status[z].ip}:2181" for z in cluster.plan.zookeeper)
        registered = wait_registered(zookeeper, ["gw-1", "gw-2"], timeout=120)
        assert {registered[g]["arch"] for g in ("gw-1", "gw-2")} == {"aarch64"}

        for gateway in ("gw-1", "gw-2"):
            container = status[gateway].container
            pid = int(cluster.exec(gateway, [WAITER_BUSYBOX, "cat", AGENT_PID_FILE]).output)
            assert pid > 1  # in the container's PID namespace, beside the waiter (PID 1)
            # The engine lists a container's processes from its cgroup: the agent is there,
            # with the zygote's command line, which it was forked from.
            commands = [p[-1] for p in client.api.top(container)["Processes"]]
            assert any("emu.agent.zygote" in c for c in commands), commands
            log = b"".join(cluster.logs(gateway)).decode()
            assert f"foglab agent {gateway}: running as pid {pid}" in log
            hostname = cluster.exec(gateway, ["python3", "-c",
                                              "import os; print(os.uname().nodename)"])
            assert hostname.output.decode().strip() == gateway

        time.sleep(3)  # the agents' start-up done
        memory = ContainerCgroup(status["gw-1"].container).usage().memory
        print(f"\nforked idle gateway: {memory / MiB:.1f} MiB in its container's cgroup")
        assert memory < IDLE_GATEWAY_MB * MiB

        assert cluster.zygote is not None
        # A request for a pid that is gone: answered, and the zygote serves on.
        gone = {"container": status["gw-1"].container, "pid": 999999999, "environment": {}}
        assert cluster.zygote.ask(gone) == {"error": "refused: no process 999999999"}
        assert client.api.inspect_container(cluster.zygote.container)["State"]["Running"]

        # SIGTERM to the container: the waiter passes it on, the agent stops cleanly.
        client.api.kill(status["gw-2"].container, signal="SIGTERM")
        assert client.api.wait(status["gw-2"].container, timeout=30)["StatusCode"] == 0
        assert "stopped by SIGTERM" in b"".join(cluster.logs("gw-2")).decode()

        # SIGKILL: the agent dies with its container, and its ephemeral znode goes.
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=zookeeper)
        zk.start(timeout=30)
        try:
            assert zk.exists("/iot/gateways/gw-1")
            client.api.kill(status["gw-1"].container, signal="SIGKILL")
            deadline = time.monotonic() + 60
            while zk.exists("/iot/gateways/gw-1") and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not zk.exists("/iot/gateways/gw-1")
        finally:
            zk.stop()
            zk.close()
    finally:
        cluster.down()
    assert leftovers(client, cluster.name) == ([], [])
