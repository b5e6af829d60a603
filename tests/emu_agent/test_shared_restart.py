"""An instance reading through a session of its own on a shared subscription (an operator with
a latency bound, which replication shares: emu.cluster.deployment.shared_reads) goes on reading
after the broker restarts: Mosquitto 2.0 restores such a session from its database but not its
shared subscription (the nemesis's replication schedules lost every reading after a restart)."""

from __future__ import annotations

import time

import pytest

from emu.agent.config import OperatorConfig
from tests.emu_agent.conftest import wait_for
from tests.emu_agent.test_migration import TOPIC, Publisher
from tests.emu_agent.test_reconnect import broker, restart  # noqa: F401

pytestmark = pytest.mark.emu


def test_a_shared_subscription_of_a_held_session_goes_on_after_a_broker_restart(
        broker, config, agents) -> None:  # noqa: F811
    reads = [f"$share/filter/{TOPIC.split('/')[0]}/+"]
    agent = agents(config("gw-1", operators=[OperatorConfig(
        name="filter", reads=reads, session="foglab-op-filter-0")]))
    wait_for(lambda: agent.sessions["filter"].subscribed.is_set(), timeout=10)
    publisher = Publisher(broker)
    try:
        publisher.publish(10)
        wait_for(lambda: agent.operators["filter"].processed == 10, timeout=10)
        publisher.close()
        restart(broker)
        wait_for(lambda: agent.sessions["filter"].present, timeout=20)  # the held session
        time.sleep(0.5)
        sent = publisher.sent
        publisher = Publisher(broker)
        publisher.sent = sent  # its readings numbered on from the first ten's
        publisher.publish(10)
        wait_for(lambda: agent.operators["filter"].processed == 20, timeout=15)
    finally:
        publisher.close()
