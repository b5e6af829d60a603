"""Loss on a link between TCP endpoints is a retransmission delay, not a drop (issue 27, 3a):
MQTT runs over TCP, and the emulation's link relay (emu.links.relay) holds a chunk with a lost
packet back by Linux's minimum RTO, the connection's later chunks behind it. Only a device's
radio to its gateway (emulated by the gateway's agent, which drops) loses messages."""

from __future__ import annotations

import numpy as np
import pytest

from emu.links.shaping import MSS as RELAY_MSS
from emu.links.shaping import RETRANSMISSION_STALL_S
from sim.stations import MSS, RTO_MIN, Channel
from tests.foundation.helpers import run
from tests.sim.test_faults import BROKER_S, PATH_S, messages, simulate, text

PERIOD_S = 0.1  # the chain's device sends every 100 ms


def test_the_model_retransmits_as_the_relay_does() -> None:
    assert RTO_MIN == RETRANSMISSION_STALL_S
    assert MSS == RELAY_MSS


def tcp_channel(loss: float, latency: float = 0.01) -> Channel:
    channel = Channel(0, "a", "b", latency, 0.0, None, loss, "7:a>b")
    channel.tcp = True
    return channel


def test_a_lost_packet_delays_its_message_by_one_rto_and_holds_its_connection_only() -> None:
    channel = tcp_channel(1.0)
    assert channel.transmit(0.0, 100, 0.0, "one") == pytest.approx(0.01 + RTO_MIN)
    channel.loss = 0.0  # later messages cross without loss...
    # ... but wait behind the retransmission on their connection, not on another one.
    assert channel.transmit(0.05, 100, 0.0, "one") == pytest.approx(0.01 + RTO_MIN)
    assert channel.transmit(0.05, 100, 0.0, "two") == pytest.approx(0.06)
    assert channel.transmit(0.3, 100, 0.0, "one") == pytest.approx(0.31)
    assert channel.stalls == 1


def test_a_message_of_several_segments_is_held_if_any_segment_is_lost() -> None:
    draws = 4000
    small, large = tcp_channel(0.05), tcp_channel(0.05)
    late_small = sum(small.transmit(t, MSS, 0.0, t) > t + 0.1 for t in range(draws))
    late_large = sum(large.transmit(t, 10 * MSS, 0.0, t) > t + 0.1 for t in range(draws))
    assert late_small == small.stalls and late_large == large.stalls
    assert 0.04 < late_small / draws < 0.06
    assert 0.37 < late_large / draws < 0.43  # 1 - 0.95 ** 10 = 0.40


def test_a_radio_still_drops() -> None:
    radio = Channel(0, "a", "b", 0.01, 0.0, None, 1.0, "7:a>b")
    assert radio.transmit(0.0, 100) == -1.0
    assert radio.stalls == 0


def test_a_loss_on_a_tcp_link_delays_and_does_not_drop() -> None:
    result = simulate("[{at: 1s, loss: {from: gw, to: broker}, rate: 30%, for: 3s}]")
    table = messages(result)
    assert not table["lost"].any()
    assert (table["state"] == "delivered").all()
    added = table["latency"] - PATH_S
    sent = table["t_sent"]
    assert np.allclose(added[sent < 0.9], 0.0, atol=1e-9)  # before the fault
    late = added > 1e-9
    stalled = np.isclose(added, RTO_MIN, atol=1e-9)
    # About 30 % of the 30 messages sent meanwhile retransmit, and the one after each waits
    # behind it (sent 100 ms later, it lands with it, 100 ms late) unless it is held itself;
    # the one 200 ms later lands with them and queues at the broker (300 us a message).
    assert 4 <= stalled.sum() <= 16
    held = late & ~stalled
    assert np.isclose(added[held], RTO_MIN - PERIOD_S + BROKER_S, atol=1e-9).sum() >= 1
    assert (added[held] <= RTO_MIN - PERIOD_S + 2 * BROKER_S + 1e-9).all()
    assert result.facts["retransmissions"] == {"gw>broker": int(stalled.sum())}
    # The broker's connection gets them in order: TCP never reorders.
    arrival = (sent + added)[np.argsort(sent)]
    assert (np.diff(arrival) >= -1e-12).all()


def test_qos0_over_a_lossy_tcp_link_is_delivered_and_counted_so() -> None:
    lossy = (text("[]").replace("{from: gw, to: broker, latency: 20ms, bandwidth: 10Mbit}",
                     "{from: gw, to: broker, latency: 20ms, bandwidth: 10Mbit, loss: 5%}"))
    assert "loss: 5%" in lossy
    result = run(lossy)
    table = result.tables["messages"]
    assert len(table["id"]) == result.facts["emitted"] == 60
    assert not table["lost"].any()
    assert (table["state"] == "delivered").all()
    assert result.facts["retransmissions"]["gw>broker"] >= 1
    assert table["latency"].max() >= PATH_S + RTO_MIN - 1e-9


def test_the_device_radio_still_loses_at_qos0() -> None:
    table = messages(simulate("[{at: 2s, loss: {from: dev, to: gw}, rate: 100%, for: 1s}]"))
    assert table["lost"].sum() == 10
    assert "retransmissions" not in simulate("[]").facts


def test_retransmissions_are_deterministic() -> None:
    faults = "[{at: 1s, loss: {from: gw, to: broker}, rate: 30%, for: 3s}]"
    a, b = messages(simulate(faults)), messages(simulate(faults))
    assert np.array_equal(a["latency"], b["latency"])
