"""The host's controller over several brokers: each agent hears only its own broker (the
emulation bridges none), so a request must go through the broker the agent talks to."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from emu.agent.config import AgentConfig
from emu.control import Controller
from workloads.spark.local_broker import LocalMosquitto, find_mosquitto

from .conftest import address


@pytest.fixture(scope="module")
def brokers() -> Iterator[list[LocalMosquitto]]:
    if find_mosquitto() is None:
        pytest.skip("mosquitto is not installed")
    with LocalMosquitto() as first, LocalMosquitto() as second, LocalMosquitto() as third:
        yield [first, second, third]


def _start(agents, brokers: list[LocalMosquitto], tmp_path: Path) -> dict[str, str]:
    """Two agents on each broker; node -> its broker's address."""
    routes = {}
    for number in range(len(brokers) * 2):
        node, broker = f"gw-{number + 1}", address(brokers[number % len(brokers)])
        agents(AgentConfig(node=node, mqtt=broker, records=str(tmp_path / node)))
        routes[node] = broker
    return routes


def test_every_agent_answers_through_its_own_broker(brokers, agents, tmp_path) -> None:
    routes = _start(agents, brokers, tmp_path)
    with Controller(routes, client_id="foglab-controller-multi") as control:
        assert len(control.brokers) == 3
        pinged = control.ping(routes, timeout=5)
        assert pinged.ok, pinged.summary()
        everyone = control.send(routes, "ping", timeout=5, broadcast=True)
        assert everyone.ok, everyone.summary()
        assert sorted(everyone.replies) == sorted(routes)
        assert control.reconnects == 0


def test_one_broker_alone_reaches_only_its_own_agents(brokers, agents, tmp_path) -> None:
    """What a run's single-broker controller did: the other brokers' agents never answer."""
    routes = _start(agents, brokers, tmp_path)
    with Controller(address(brokers[0])) as control:
        pinged = control.send(routes, "ping", timeout=1.5, broadcast=True)
    assert sorted(pinged.missing) == sorted(n for n, b in routes.items()
                                            if b != address(brokers[0]))


def test_of_plan_takes_each_agent_s_broker_from_the_plan() -> None:
    plan = SimpleNamespace(cluster="c", brokers={"gw-1": "broker-1", "gw-2": "broker-2"})
    status = {"broker-1": SimpleNamespace(ip="10.0.0.2"),
              "broker-2": SimpleNamespace(ip="10.0.1.2")}
    control = Controller.of_plan(plan, status)
    assert control.broker_of("gw-2") == "10.0.1.2:1883"
    assert control.brokers == ["10.0.0.2:1883", "10.0.1.2:1883"]
    with pytest.raises(ValueError, match="broker-2"):
        Controller.of_plan(plan, {"broker-1": status["broker-1"]})
