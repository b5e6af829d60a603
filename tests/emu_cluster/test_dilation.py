"""A cluster's plan and links at a time dilation K, without Docker: the services' timers scaled
in their configs, the links' shapes kept emulated in the plan and installed dilated by the
shapers (relay on loopback, netem by what it is asked to apply)."""

from __future__ import annotations

import socket
import socketserver
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from emu.cluster import links as cluster_links
from emu.cluster.broker_kinds import (
    DILATED_COMMAND,
    DILATED_CONFIG,
    MOSQUITTO_DEFAULTS,
    SPARE_CONFIG,
)
from emu.cluster.links import NetemLinks, RelayLinks, make_links
from emu.cluster.plan import plan_cluster
from emu.cluster.relays import RelaySet
from emu.images import MOSQUITTO_COMMAND
from emu.links.spec import LinkShape
from topologies.model import Topology, expand
from topologies.spec import TopologySpec
from workloads.recovery import ZK_MAX_SESSION_TICKS, ZK_MIN_SESSION_TICKS, ZK_TICK_S

HOST = "127.0.0.1"


def topology() -> Topology:
    return expand(TopologySpec.model_validate({
        "name": "t", "sites": [{"name": "edge"}, {"name": "cloud"}],
        "nodes": [{"name": "gw", "kind": "gateway", "replicas": 2, "site": "edge"},
                  {"name": "sw", "kind": "switch", "site": "edge"},
                  {"name": "broker", "kind": "broker", "replicas": 2, "site": "cloud"},
                  {"name": "coord", "kind": "coordinator", "site": "cloud"}],
        "links": [{"from": "gw-*", "to": "sw", "latency": "5ms", "jitter": "1ms",
                   "loss": 0.01},
                  {"from": "sw", "to": ["broker-1", "broker-2", "coord"], "latency": "10ms",
                   "bandwidth": "8Mbit"}]}))


def settings(text: str, separator: str) -> dict[str, str]:
    return dict(line.split(separator, 1) for line in text.splitlines()
                if line and not line.startswith("#"))


def zoo_cfg(plan, server: str = "coord") -> dict[str, str]:
    return settings(dict(plan.containers[server].files)["/etc/foglab/zoo.cfg"], "=")


def test_a_plan_at_k_three_has_zookeepers_tick_three_times_and_bounds_in_ticks() -> None:
    plain, dilated = (plan_cluster(topology(), "c", host_cpus=2, dilation=k) for k in (1, 3))
    assert (plain.dilation, dilated.dilation) == (1.0, 3.0)
    tick_ms = round(ZK_TICK_S * 1000)
    one, three = zoo_cfg(plain), zoo_cfg(dilated)
    assert int(one["tickTime"]) == tick_ms and int(three["tickTime"]) == 3 * tick_ms
    assert int(three["minSessionTimeout"]) == ZK_MIN_SESSION_TICKS * 3 * tick_ms
    assert int(three["maxSessionTimeout"]) == ZK_MAX_SESSION_TICKS * 3 * tick_ms
    # Counted in ticks: the same numbers, three times as long on the host.
    assert (three["initLimit"], three["syncLimit"]) == (one["initLimit"], one["syncLimit"])
    assert "cnxTimeout" not in three  # a single server has no quorum to time


def test_an_ensemble_at_k_two_scales_its_quorum_timers() -> None:
    plan = plan_cluster(topology(), "c", host_cpus=2, zookeeper=3, dilation=2)
    for server in plan.zookeeper:
        cfg = zoo_cfg(plan, server)
        assert int(cfg["tickTime"]) == 2 * round(ZK_TICK_S * 1000)
        assert int(cfg["cnxTimeout"]) == 10_000
        assert int(cfg["fastleader.minNotificationInterval"]) == 400
        assert int(cfg["fastleader.maxNotificationInterval"]) == 120_000
    undilated = plan_cluster(topology(), "c", host_cpus=2, zookeeper=3)
    assert "cnxTimeout" not in zoo_cfg(undilated, undilated.zookeeper[0])


def test_brokers_at_k_three_run_a_conf_with_mosquittos_timers_scaled() -> None:
    plan = plan_cluster(topology(), "c", host_cpus=2, dilation=3)
    for broker in ("broker-1", "broker-2"):
        container = plan.containers[broker]
        assert container.command == DILATED_COMMAND
        ((path, conf),) = container.files
        assert path == DILATED_CONFIG
        assert conf.startswith(MOSQUITTO_DEFAULTS.read_text())  # the image's settings kept
        added = settings(conf[len(MOSQUITTO_DEFAULTS.read_text()):], " ")
        assert added == {"autosave_interval": "5400", "sys_interval": "30"}


def test_a_spare_at_k_three_publishes_its_counters_every_three_host_seconds() -> None:
    plan = plan_cluster(topology(), "c", host_cpus=2, dilation=3,
                        spares={"broker-2": "broker-1"})
    ((path, conf),) = plan.containers["broker-2"].files
    assert path == SPARE_CONFIG
    added = settings(conf[len(MOSQUITTO_DEFAULTS.read_text()):], " ")
    assert added == {"autosave_interval": "5400", "sys_interval": "3"}


def test_at_k_one_the_plan_is_the_undilated_one() -> None:
    default = plan_cluster(topology(), "c", host_cpus=2, zookeeper=3)
    explicit = plan_cluster(topology(), "c", host_cpus=2, zookeeper=3, dilation=1)
    assert default == explicit
    assert default.containers["broker-1"].command == MOSQUITTO_COMMAND
    assert default.containers["broker-1"].files == ()


def test_a_fractional_k_rounds_mosquittos_whole_seconds() -> None:
    plan = plan_cluster(topology(), "c", host_cpus=2, dilation=1.5,
                        spares={"broker-2": "broker-1"})
    ((_, conf),) = plan.containers["broker-2"].files
    assert "sys_interval 2" in conf.splitlines()  # 1.5 s: Mosquitto counts whole seconds
    assert int(zoo_cfg(plan)["tickTime"]) == round(ZK_TICK_S * 1000 * 1.5)


@pytest.mark.parametrize("k", [0.5, 0, float("nan"), "2"])
def test_a_bad_dilation_is_refused_by_name(k: object) -> None:
    with pytest.raises(ValueError, match=r"plan_cluster's dilation must be a finite number"):
        plan_cluster(topology(), "c", host_cpus=2, dilation=k)  # type: ignore[arg-type]


def test_the_plans_links_keep_their_emulated_shapes_at_any_k() -> None:
    plain, dilated = (plan_cluster(topology(), "c", host_cpus=2, dilation=k) for k in (1, 4))
    assert [link.shape for link in dilated.links] == [link.shape for link in plain.links]
    assert dilated.link("gw-1", "broker-1").shape.latency_s == pytest.approx(0.015)


# -- the shapers -----------------------------------------------------------------------------
class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer((HOST, 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def round_trip(port: int, count: int = 7) -> float:
    with socket.create_connection((HOST, port), timeout=5) as sock:
        times = []
        for _ in range(count):
            start = time.perf_counter()
            sock.sendall(b"x" * 16)
            received = b""
            while len(received) < 16:
                received += sock.recv(16)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def test_relay_links_at_k_three_install_every_shape_dilated_and_keep_the_emulated(
        echo: int) -> None:
    plan = plan_cluster(topology(), "c", host_cpus=2, dilation=3)
    plan.links = [replace(link, port=echo) for link in plan.links]
    links = make_links("relay", plan, seed=1)
    assert isinstance(links, RelayLinks)
    try:
        addresses = links.addresses({"broker-1": HOST, "broker-2": HOST, "coord": HOST},
                                    {"edge": HOST, "cloud": HOST})
        for link in plan.links:
            relay = links.relays.relay(link.key)
            assert relay.shape == link.shape == links.shapes[link.key]
            assert relay.installed == link.shape.dilated(3)
            assert relay.dilation == 3
        # The gateways' paths to ZooKeeper share the 8 Mbit/s hop sw-coord: its buckets carry
        # 1/3 of it per host second.
        hop = links.relays.relay(("gw-1", "coord")).connections.shaping.up.hops[0]
        assert hop._rate == pytest.approx(8e6 / 8 / 3)
        port = int(addresses[("gw-1", "broker-1")].split(":")[1])
        links.reshape("gw-1", "broker-1", LinkShape(0.01))
        assert links.shapes[("gw-1", "broker-1")] == LinkShape(0.01)
        assert links.relays.relay(("gw-1", "broker-1")).installed == LinkShape(0.03)
        assert round_trip(port) == pytest.approx(3 * 2 * 0.01, abs=0.012)
    finally:
        links.close()


def test_netem_links_at_k_two_apply_the_dilated_shape(monkeypatch) -> None:
    applied: list[tuple[str, LinkShape]] = []

    class Recorder:
        def __init__(self, ifname: str, netns: str | None = None) -> None:
            self.ifname = ifname

        def __enter__(self):
            return self

        def __exit__(self, *exc_info) -> None:
            pass

        def apply(self, shape: LinkShape) -> None:
            applied.append((self.ifname, shape))

    monkeypatch.setattr(cluster_links, "NetemShaper", Recorder)
    plan = plan_cluster(topology(), "c", host_cpus=2, dilation=2)
    links = make_links("netem", plan)
    assert isinstance(links, NetemLinks)
    links.interfaces["gw-1"] = [("eth0", "/proc/1/ns/net"), ("veth1", None)]
    links.reshape("gw-1", "broker-1", LinkShape(0.02, bandwidth_bps=1e6, loss=0.1))
    assert applied == [(ifname, LinkShape(0.04, bandwidth_bps=5e5, loss=0.1))
                       for ifname in ("eth0", "veth1")]
    assert links.shapes[("gw-1", "broker-1")] == LinkShape(0.02, bandwidth_bps=1e6, loss=0.1)
    assert links.installed(links.client_shape("gw-2")) == links.client_shape("gw-2").dilated(2)


def test_the_relays_timer_lag_is_reported_in_emulated_seconds() -> None:
    with RelaySet("lag-test", dilation=4) as relays:
        deadline = time.monotonic() + 5
        while (lag := relays.lag()) is None and time.monotonic() < deadline:
            time.sleep(0.06)
        assert lag is not None
        relays._probe._count, relays._probe._max = 1, 0.2  # a 200 ms late timer on the host
        assert relays.lag() == pytest.approx(0.05)
