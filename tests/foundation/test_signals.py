"""A stop signal interrupts once: a second one must not cut the clean-up short (containers
would be left behind)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {root!r})
    from topologies.terminal import stop_on_signals
    steps = []
    try:
        with stop_on_signals():
            try:
                os.kill(os.getpid(), signal.{first})
                time.sleep(2)
                steps.append("not interrupted")
            finally:
                os.kill(os.getpid(), signal.{second})  # during the clean-up
                time.sleep(0.1)
                steps.append("cleaned up")
    except KeyboardInterrupt as stop:
        print(type(stop).__name__, getattr(stop, "signal", None), steps)
""")


@pytest.mark.parametrize(("first", "second", "raised"), [
    ("SIGTERM", "SIGTERM", "Stop 15"), ("SIGINT", "SIGINT", "KeyboardInterrupt None"),
    ("SIGHUP", "SIGTERM", "Stop 1")])
def test_a_second_signal_during_the_clean_up_is_ignored(first, second, raised):
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(root=str(ROOT), first=first,
                                                               second=second)],
                          capture_output=True, text=True, timeout=30)
    assert done.stdout.strip().splitlines()[-1] == f"{raised} ['cleaned up']", done.stderr
    assert "again: still cleaning up" in done.stdout + done.stderr


def test_a_stop_raised_inside_a_simpy_process_keeps_its_signal() -> None:
    # SimPy hands a process's exception on as type(e)(*e.args): Stop is rebuilt from its name.
    import signal

    import simpy

    from topologies.terminal import Stop

    def stopped(env):
        yield env.timeout(1)
        raise Stop(signal.SIGTERM)

    env = simpy.Environment()
    env.process(stopped(env))
    with pytest.raises(Stop) as raised:
        env.run()
    assert raised.value.signal == signal.SIGTERM


def test_a_stop_whose_interrupt_was_lost_still_ends_the_hold() -> None:
    """The handler's exception can be swallowed (raised inside a callback the interpreter
    ignores, CI saw it in an import lock's); later signals are then ignored as the clean-up's,
    so holding a cluster up must find the first one itself."""
    import time

    from emu.cluster.hold import hold
    from topologies.terminal import Stop, stop_on_signals, stop_requested

    with stop_on_signals():
        assert stop_requested() is None
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        except Stop:
            pass  # lost, as in the callback
        started = time.monotonic()
        with pytest.raises(Stop) as raised:
            hold()
        assert raised.value.signal == signal.SIGTERM
        assert time.monotonic() - started < 2.5
    assert stop_requested() is None  # the block's request ends with it
