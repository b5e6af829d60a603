"""The hybrid model's real-time clock: on time when the model keeps up, measured when it does
not, stopped with a clear error far behind; and the actions queue."""

from __future__ import annotations

import time

import pytest

from experiments.hybrid.actions import Actions
from experiments.hybrid.realtime import LagError, RealTime, lag_of


def test_the_model_keeps_to_the_wall_clock_from_the_epoch():
    seen = []

    def build(env):
        def ticks():
            while True:
                seen.append((env.now, time.time()))
                yield env.timeout(0.1)
        env.process(ticks())

    epoch = time.time() + 0.3
    model = RealTime(build, duration=1.0)
    model.start(epoch)
    lag = model.join(5.0)
    assert len(seen) >= 10
    for t_model, wall in seen:
        assert wall - (epoch + t_model) == pytest.approx(0.0, abs=0.05)
    assert lag.events >= 10 and lag.p99 < 0.05


def test_an_overloaded_model_stops_with_the_lag_error():
    def build(env):
        def heavy():
            while True:
                time.sleep(0.4)  # a step that takes 0.4 s of CPU every 0.1 s of model time
                yield env.timeout(0.1)
        env.process(heavy())

    model = RealTime(build, duration=30.0, stop_s=1.0)
    began = time.monotonic()
    model.start(time.time())
    with pytest.raises(LagError, match=r"behind the wall clock \(limit 1 s\).*fewer simulated"):
        model.join(10.0)
    assert time.monotonic() - began < 5.0


def test_stop_ends_the_model_early():
    model = RealTime(lambda env: None, duration=60.0)
    model.start(time.time())
    time.sleep(0.2)
    model.stop()
    began = time.monotonic()
    model.join(5.0)
    assert time.monotonic() - began < 0.5


def test_lag_percentiles():
    lag = lag_of([0.0] * 98 + [0.5, 1.0])
    assert lag.events == 100 and lag.p50 == 0.0 and lag.max == 1.0
    assert 0.49 < lag.p99 < 1.0
    assert lag_of([]).events == 0


def test_actions_run_in_order_and_record_failures():
    actions = Actions()
    order = []
    actions.put("link", "a", 1.0, lambda action: order.append("a"))

    def fails(action):
        raise RuntimeError("gw-2: no device 'u-9'")

    actions.put("handover", "u-9", 2.0, fails)
    actions.put("link", "b", 3.0, lambda action: order.append("b") or {"n": 1})
    done = actions.close()
    assert order == ["a", "b"]
    assert [a.ok for a in done] == [True, False, True]
    assert done[1].error == "gw-2: no device 'u-9'" and done[2].result == {"n": 1}
    assert all(a.decision_to_action >= 0 for a in done)
