"""Probe whether kernel netem can shape links here, and choose the shaper that will."""

import importlib.util
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Literal

COMMAND_TIMEOUT_S = 10


@dataclass(frozen=True)
class NetemProbe:
    """Whether a netem qdisc could be created, and why (not)."""

    available: bool
    reason: str


@dataclass(frozen=True)
class ShaperChoice:
    """The link shaper a run uses, and why: recorded with the results."""

    shaper: Literal["netem", "relay"]
    reason: str


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
    )


def _failure(result: subprocess.CompletedProcess[str]) -> str:
    message = (result.stderr or result.stdout).strip() or f"exit status {result.returncode}"
    return f"`{' '.join(result.args)}` failed: {message}"


def probe_netem() -> NetemProbe:
    """Try a netem qdisc in a throw-away network namespace, and remove all it created."""
    if not sys.platform.startswith("linux"):
        return NetemProbe(False, f"not Linux (platform {sys.platform})")
    if os.geteuid() != 0:
        return NetemProbe(False, "not root: creating a network namespace needs root")
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return NetemProbe(False, f"no {' or '.join(missing)} binary on PATH")

    namespace = f"foglab-probe-{secrets.token_hex(4)}"
    undo: list[list[str]] = []
    try:
        created = _run(["ip", "netns", "add", namespace])
        if created.returncode != 0:
            return NetemProbe(False, _failure(created))
        undo.append(["ip", "netns", "delete", namespace])

        device = "probe0"
        if _run(["ip", "-n", namespace, "link", "add", device, "type", "dummy"]).returncode == 0:
            undo.append(["ip", "-n", namespace, "link", "delete", device])
        else:
            # No dummy driver: the namespace's own loopback is just as throw-away.
            device = "lo"

        netem = _run(
            ["tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "netem", "delay", "1ms"]
        )
        if netem.returncode != 0:
            return NetemProbe(False, _failure(netem))
        undo.append(["tc", "-n", namespace, "qdisc", "delete", "dev", device, "root"])
        return NetemProbe(True, f"created a netem qdisc on {device} in a throw-away namespace")
    except (OSError, subprocess.TimeoutExpired) as error:
        return NetemProbe(False, f"probe failed: {error}")
    finally:
        for command in reversed(undo):
            _run(command)


def choose_shaper(probe: NetemProbe | None = None) -> ShaperChoice:
    """Kernel netem where it works and pyroute2 is installed to drive it, else the relay."""
    probe = probe or probe_netem()
    if not probe.available:
        return ShaperChoice("relay", f"kernel netem unavailable: {probe.reason}")
    if importlib.util.find_spec("pyroute2") is None:
        return ShaperChoice("relay", "kernel netem works but pyroute2 is not installed")
    return ShaperChoice("netem", probe.reason)
