"""Time dilation on the agent's side: one mapping between the host's clock and emulated time,
a scheduler that waits K host seconds for each emulated one, drivers that keep their emulated
rate, and the timeouts an agent gives real services scaled by K."""

from __future__ import annotations

import threading
import time

import pytest

from emu.agent.agent import Agent
from emu.agent.config import AgentConfig, DriverConfig
from emu.agent.drivers import Drivers
from emu.agent.mqtt import KEEPALIVE
from emu.agent.scheduler import Scheduler
from emu.agent.timebase import UNDILATED, TimeBase


def test_the_mapping_is_one_both_ways_and_anchored() -> None:
    base = TimeBase(4.0, anchor=1000.0)
    assert base.emulated(1000.0) == 1000.0
    assert base.emulated(1008.0) == 1002.0
    assert base.host(base.emulated(1234.5)) == pytest.approx(1234.5)
    assert base.host_seconds(2.5) == 10.0 and base.emulated_seconds(10.0) == 2.5


def test_undilated_is_the_hosts_clock_itself() -> None:
    # nothing converted on the hot path at K = 1
    assert UNDILATED.now is time.time
    assert TimeBase.starting_now(1.0).now is time.time
    assert not UNDILATED.dilated and TimeBase(2.0, 5.0).dilated


@pytest.mark.parametrize("bad", [0.5, 0.0, -2.0, float("nan")])
def test_a_dilation_below_one_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        TimeBase(bad)


def test_the_dilated_clock_runs_k_times_slower() -> None:
    base = TimeBase.starting_now(5.0)
    host0, emulated0 = time.time(), base.now()
    time.sleep(0.5)
    host, emulated = time.time() - host0, base.now() - emulated0
    assert emulated == pytest.approx(host / 5.0, abs=0.01)


def test_a_wait_on_an_emulated_span_lasts_k_times_longer() -> None:
    base = TimeBase.starting_now(3.0)
    event = threading.Event()
    start = time.monotonic()
    assert base.wait(event, 0.1) is False
    # K times the span, never less; above, under K x K times it (a span dilated twice), a
    # bound a loaded host's late wake-up stays under at CI's worst (load 6 on two cores: tens
    # of ms, where the margin is 0.6 s).
    assert 0.29 <= time.monotonic() - start < 0.9
    start = time.monotonic()
    base.sleep(0.05)
    assert 0.14 <= time.monotonic() - start < 0.45


def test_the_scheduler_runs_an_action_k_times_later_on_the_host() -> None:
    base = TimeBase.starting_now(4.0)
    scheduler = Scheduler(base.now, base.dilation)
    scheduler.start()
    rang = threading.Event()
    times: list[float] = []
    start = time.monotonic()

    def ring() -> None:
        times.append(time.monotonic() - start)
        rang.set()

    scheduler.call(lambda: scheduler.at(base.now() + 0.1, ring))
    assert rang.wait(2.0)
    scheduler.stop()
    # 0.1 emulated seconds: 0.4 host seconds, not 0.1
    assert 0.38 <= times[0] < 0.6


def test_drivers_keep_their_emulated_rate_at_a_dilation() -> None:
    """20 readings per emulated second from 2 devices at 10/s, over 3 host seconds at K=3."""
    base = TimeBase.starting_now(3.0)
    scheduler = Scheduler(base.now, base.dilation)
    sent: list[tuple] = []
    epoch = base.now() + 0.05
    config = DriverConfig("city", ["d-1", "d-2"], rate=10.0, arrivals="periodic")
    drivers = Drivers([config], "gw-1", 1, 7, epoch, scheduler.at, base.now,
                      lambda topic, envelope, driver: None, lambda *row: sent.append(row))
    scheduler.start()
    scheduler.call(drivers.start)
    time.sleep(3.0 + 0.15)
    scheduler.stop()
    # one emulated second from the epoch: 2 devices x 10/s, give or take a device's tick
    assert 18 <= len(sent) <= 22, len(sent)


def test_an_agent_scales_the_timeouts_it_gives_real_services() -> None:
    config = AgentConfig(node="gw-1", mqtt="127.0.0.1:1", dilation=4.0, time_anchor=100.0,
                         session_timeout=10.0)
    agent = Agent(config)
    assert agent.timebase == TimeBase(4.0, 100.0)
    assert agent.keepalive == 4 * KEEPALIVE  # the broker hears a ping every 4 x 30 host s
    assert agent.host_seconds(10.0) == 40.0
    assert agent.scheduler.dilation == 4.0
    assert abs(agent.clock() - TimeBase(4.0, 100.0).now()) < 0.01
    # a config travels with its time base
    assert AgentConfig.from_json(config.to_json()).timebase() == TimeBase(4.0, 100.0)
    undilated = Agent(AgentConfig(node="gw-2", mqtt="127.0.0.1:1"))
    assert undilated.clock is time.time and undilated.keepalive == KEEPALIVE
