"""A stop signal interrupts once: a second one must not cut the clean-up short (containers
would be left behind)."""

from __future__ import annotations

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
