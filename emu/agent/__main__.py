"""`python3 -m emu.agent`: run the node described by $FOGLAB_AGENT (its secrets from
emu.agent.config.SECRETS_FILE) until SIGTERM or SIGINT."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import time
import types

from emu.agent.config import CONFIG_VARIABLE, load_config, localized, revived

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
M_ARENA_MAX = -8  # glibc's mallopt parameter
# Exit codes: 0 after a stop by signal, 2 for a config the agent cannot run.
BAD_CONFIG = 2


def one_malloc_arena() -> None:
    """glibc gives each thread a malloc arena of its own; one does for an agent, and saves
    about 5 MB of an idle gateway's memory (under QEMU, with ZooKeeper's threads).

    The gateway image sets MALLOC_ARENA_MAX=1, which glibc reads at start: then ctypes (and
    libffi) need not be loaded under QEMU for it."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1)
    except (OSError, AttributeError):  # not glibc
        pass


class _NoTLS(Exception):
    """Never raised: what the stand-in ssl module's exception names are."""


def _no_tls(name: str) -> None:
    raise AttributeError(f"ssl.{name}: the foglab agent runs without TLS (see "
                         "emu.agent.__main__.without_openssl)")


def without_openssl() -> None:
    """Keep OpenSSL out of the agent's process: it speaks plain MQTT and ZooKeeper and hashes
    nothing, yet paho imports ssl and hashlib, which load and initialise libssl and libcrypto:
    about 0.35 s of CPU per gateway under QEMU, a third of its start.

    hashlib falls back on its built-in algorithms when `_hashlib` cannot be imported. For ssl,
    a stand-in module: the exception names paho catches (never raised, so they match nothing)
    and an AttributeError naming this function for anything else, such as a TLS context.
    """
    if "ssl" in sys.modules or "_hashlib" in sys.modules:
        return  # loaded already: nothing to save
    sys.modules["_hashlib"] = None  # documented: makes `import _hashlib` raise ImportError
    stand_in = types.ModuleType("ssl", "Stand-in for ssl in the foglab agent: no TLS.")
    for name in ("SSLError", "SSLWantReadError", "SSLWantWriteError", "SSLZeroReturnError",
                 "SSLEOFError", "SSLSyscallError", "CertificateError"):
        setattr(stand_in, name, _NoTLS)
    stand_in.__getattr__ = _no_tls  # PEP 562
    sys.modules["ssl"] = stand_in


def main() -> int:
    if not os.environ.get(CONFIG_VARIABLE):
        print(f"foglab agent: set {CONFIG_VARIABLE} to the node's AgentConfig JSON",
              file=sys.stderr)
        return BAD_CONFIG
    try:
        config = localized(revived(load_config(os.environ)))
    except OSError as error:
        print(f"foglab agent: {error}", file=sys.stderr)
        return BAD_CONFIG
    except (ValueError, TypeError) as error:
        print(f"foglab agent: {CONFIG_VARIABLE} (with its secrets file) is not an AgentConfig: "
              f"{error}", file=sys.stderr)
        return BAD_CONFIG
    # Blocked before any thread starts, so every thread inherits the mask and the signals
    # wait for sigwait below; this works as a container's PID 1 too, which ignores signals
    # it has no handler for.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    # `kill -USR1` prints every thread's stack to the agent's log: a stuck agent under QEMU
    # cannot be attached to by a debugger.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    one_malloc_arena()
    if config.tls_ca:  # a cluster with TLS: the real ssl, which emu.agent.tls imports
        from emu.agent.tls import use_tls

        use_tls(config.tls_ca)
    else:
        without_openssl()
    from emu.agent.agent import Agent
    from emu.agent.mqtt import use_credentials, use_mqtt5
    from emu.agent.zookeeper import use_auth

    use_credentials(config.mqtt_user, config.mqtt_password)
    use_mqtt5(config.mqtt5)
    use_auth(config.zookeeper_auth)

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
