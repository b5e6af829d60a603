"""Links at a time dilation K: the shape installed on the host (K x delay and jitter, B/K, the
same loss), and the relay on loopback: round trips, goodput and loss stalls K times the
undilated ones on the host's clock, the same in emulated time."""

import asyncio
import statistics
import time

import pytest

from emu.links.netem import netem_parameters
from emu.links.relay import LinkRelay
from emu.links.shaping import RETRANSMISSION_STALL_S, hop_bucket
from emu.links.spec import LinkShape, check_dilation, host_rate

from .loopback import HOST, echo_server, round_trips, run, send_all, sink_server

LATENCY_S = 0.02


def test_a_dilated_shape_scales_delay_jitter_and_bandwidth_and_keeps_the_loss() -> None:
    shape = LinkShape(0.05, 0.01, 1e6, 0.02)
    installed = shape.dilated(3)
    assert installed.latency_s == pytest.approx(0.15)
    assert installed.jitter_s == pytest.approx(0.03)
    assert installed.bandwidth_bps == pytest.approx(1e6 / 3)
    assert installed.loss == 0.02
    assert LinkShape(0.01).dilated(2.5) == LinkShape(0.025)  # unlimited stays unlimited


def test_at_dilation_one_the_shape_itself_is_installed() -> None:
    shape = LinkShape(0.05, 0.01, 1e6, 0.02)
    assert shape.dilated(1) is shape
    assert host_rate(1e6, 1.0) == 1e6 and host_rate(None, 4) is None


@pytest.mark.parametrize("k", [0.5, 0, -2, float("nan"), float("inf"), "2", True, None])
def test_a_dilation_below_one_or_not_a_number_is_refused_by_name(k: object) -> None:
    with pytest.raises(ValueError, match=r"dilation must be a finite number >= 1, got"):
        LinkShape(0.01).dilated(k)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^run\.dilation must"):
        check_dilation(k, "run.dilation")


def test_netem_is_given_the_dilated_shape_in_its_units() -> None:
    parameters = netem_parameters(LinkShape(0.01, 0.002, 8e6, 0.01).dilated(4))
    assert parameters == {"delay": 40_000, "jitter": 8_000, "loss": 1.0, "rate": 250_000}


def test_a_shared_hop_carries_its_bandwidth_over_k_host_seconds() -> None:
    bucket = hop_bucket(8000.0, dilation=2)  # 1000 B/s emulated: 500 B per host second
    assert bucket.reserve(1460, now=0.0) == 0.0  # the depth is one MSS
    assert bucket.reserve(500, now=0.0) == pytest.approx(1.0)


def test_the_relay_keeps_the_emulated_shape_and_installs_the_dilated_one() -> None:
    relay = LinkRelay(HOST, 9, LinkShape(0.01, bandwidth_bps=1e6), dilation=3)
    assert relay.shape == LinkShape(0.01, bandwidth_bps=1e6)
    assert relay.installed == LinkShape(0.01, bandwidth_bps=1e6).dilated(3)
    relay.reshape(LinkShape(0.002))
    assert (relay.shape, relay.installed) == (LinkShape(0.002), LinkShape(0.002).dilated(3))
    with pytest.raises(ValueError, match="dilation"):
        LinkRelay(HOST, 9, LinkShape(0.0), dilation=0.5)


async def _fastest_rtt(k: float, shape: LinkShape, count: int = 10) -> float:
    # The fastest of several: the relay holds at least the shaped time; a loaded host only adds.
    async with echo_server() as port, LinkRelay(HOST, port, shape, dilation=k) as relay:
        return min(await round_trips(relay.port, count))


def test_a_round_trip_at_k_three_lasts_three_times_one_at_k_one_on_the_host() -> None:
    async def scenario() -> tuple[float, float]:
        shape = LinkShape(LATENCY_S)
        return await _fastest_rtt(1, shape), await _fastest_rtt(3, shape)

    at_1, at_3 = run(scenario())
    print(f"\nrelay RTT of a {LATENCY_S * 1000:g} ms link: K=1 {at_1 * 1000:.1f} ms, "
          f"K=3 {at_3 * 1000:.1f} ms on the host ({at_3 / 3 * 1000:.1f} ms emulated)")
    # Never less than the shaped round trip at either K; the fastest of 10 not a crossing more
    # (a loaded host only adds: at CI's worst, load 6 on two cores, 20 ms to a round trip).
    # How closely the two agree in emulated time is benchmarks/dilation.py's figure.
    assert 2 * LATENCY_S - 0.001 <= at_1 < 3 * LATENCY_S + 0.02
    assert 3 * 2 * LATENCY_S - 0.001 <= at_3 < 3 * 3 * LATENCY_S


def test_goodput_at_k_two_is_half_on_the_host_and_the_link_rate_in_emulated_time() -> None:
    async def scenario() -> float:
        shape = LinkShape(0.0, bandwidth_bps=2e6)
        async with sink_server() as port, LinkRelay(HOST, port, shape, dilation=2) as relay:
            start = time.perf_counter()
            await send_all(relay.port, 125_000)  # 0.5 s at 2 Mbit/s: 1 s at K = 2
            return time.perf_counter() - start

    host_s = run(scenario())
    # Half the link's rate on the host (1 Mbit/s), never more (a loaded host only slows the
    # sender); not under half of that, which holds at CI's worst (load 6 on two cores: this is
    # 1 s of the link, not of CPU).
    assert 0.5e6 <= 125_000 * 8 / host_s <= 1.15e6


def test_a_loss_stalls_k_times_the_retransmission_timeout_on_the_host() -> None:
    async def scenario() -> tuple[list[float], int]:
        shape = LinkShape(0.005, loss=1.0)  # every chunk lost once: every one stalls
        async with echo_server() as port, LinkRelay(HOST, port, shape, dilation=2) as relay:
            rtts = await round_trips(relay.port, 3)
            counters = relay.counters()
            return rtts, counters.stalls_up + counters.stalls_down

    rtts, stalls = run(scenario())
    assert stalls == 6
    # Each way: K x (latency + RTO), so in emulated time a loss costs the RTO, as TCP's would.
    expected = 2 * 2 * (0.005 + RETRANSMISSION_STALL_S)
    # Never less; the fastest of 3 not another stall more (a loaded host only adds: at CI's
    # worst, load 6 on two cores, 20 ms to a round trip).
    assert expected - 0.001 <= min(rtts) < expected + 2 * RETRANSMISSION_STALL_S


def test_reshaping_a_dilated_relay_dilates_the_new_shape() -> None:
    async def scenario() -> tuple[float, float]:
        async with echo_server() as port, LinkRelay(HOST, port, LinkShape(0.0),
                                                    dilation=4) as relay:
            before = statistics.median(await round_trips(relay.port, 5))
            relay.reshape(LinkShape(0.01))
            await asyncio.sleep(0)
            return before, min(await round_trips(relay.port, 5))

    before, fastest_after = run(scenario())
    assert before < 4 * 2 * 0.01  # unshaped: under the new shape's floor, however loaded
    # The fastest round trip: the relay holds each way for at least K x latency, and a loaded
    # host only adds (CI's parallel phase put one median at 95 ms for these 80).
    assert fastest_after >= 4 * 2 * 0.01 - 0.001
    assert fastest_after < 5 * 2 * 0.01 + 0.02  # not K + 1 times, at CI's worst (+20 ms)
