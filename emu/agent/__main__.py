"""`python3 -m emu.agent`: run the node described by $FOGLAB_AGENT until SIGTERM or SIGINT."""

from __future__ import annotations

import os
import signal
import sys
import time

from emu.agent.config import CONFIG_VARIABLE, AgentConfig

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
M_ARENA_MAX = -8  # glibc's mallopt parameter
# Exit codes: 0 after a stop by signal, 2 for a config the agent cannot run.
BAD_CONFIG = 2


def one_malloc_arena() -> None:
    """glibc gives each thread a malloc arena of its own; one does for an agent, and saves
    about 5 MB of an idle gateway's memory (under QEMU, with ZooKeeper's threads)."""
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1)
    except (OSError, AttributeError):  # not glibc
        pass


def main() -> int:
    text = os.environ.get(CONFIG_VARIABLE)
    if not text:
        print(f"foglab agent: set {CONFIG_VARIABLE} to the node's AgentConfig JSON",
              file=sys.stderr)
        return BAD_CONFIG
    try:
        config = AgentConfig.from_json(text)
    except (ValueError, TypeError) as error:
        print(f"foglab agent: {CONFIG_VARIABLE} is not an AgentConfig: {error}", file=sys.stderr)
        return BAD_CONFIG
    # Blocked before any thread starts, so every thread inherits the mask and the signals
    # wait for sigwait below; this works as a container's PID 1 too, which ignores signals
    # it has no handler for.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    one_malloc_arena()
    from emu.agent.agent import Agent

    try:
        agent = Agent(config)
        agent.start()
    except (ValueError, OSError) as error:
        print(f"foglab agent {config.node}: {error}", file=sys.stderr)
        return BAD_CONFIG
    print(f"foglab agent {config.node}: running as pid {os.getpid()}", file=sys.stderr,
          flush=True)
    received = signal.sigwait(STOP_SIGNALS)
    signalled = time.monotonic()
    agent.stop()
    print(f"foglab agent {config.node}: stopped by {signal.Signals(received).name} in "
          f"{time.monotonic() - signalled:.2f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # The records are on disk and the servers told: tearing the interpreter down would only
    # cost time, seconds of it under QEMU on a busy host.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
