"""The netem probe: consistent with this host's tc, clean after itself, graceful without means."""

import os
import shutil
import subprocess
import sys

import pytest

from emu.links import probe
from emu.links.probe import NetemProbe, ShaperChoice, choose_shaper, probe_netem


def _probe_namespaces() -> set[str]:
    if shutil.which("ip") is None:
        return set()
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listing.splitlines() if line.startswith("foglab-probe-")}


def test_probe_agrees_with_tc_and_leaves_nothing_behind() -> None:
    before = _probe_namespaces()
    result = probe_netem()
    assert _probe_namespaces() == before
    assert result.reason
    if result.available:
        # Creating a netem qdisc took root, Linux and tc: all must be there.
        assert sys.platform.startswith("linux") and os.geteuid() == 0
        assert shutil.which("tc") is not None
    elif sys.platform.startswith("linux") and os.geteuid() == 0 and shutil.which("tc"):
        # With every means at hand, the refusal must come from tc or ip themselves.
        assert "failed" in result.reason


def test_not_root_is_unavailable_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe.sys, "platform", "linux")
    monkeypatch.setattr(probe.os, "geteuid", lambda: 1000)
    assert probe_netem() == NetemProbe(False, "not root: creating a network namespace needs root")


def test_missing_binaries_are_unavailable_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe.sys, "platform", "linux")
    monkeypatch.setattr(probe.os, "geteuid", lambda: 0)
    monkeypatch.setattr(probe.shutil, "which", lambda tool: None if tool == "tc" else "/bin/ip")
    assert probe_netem() == NetemProbe(False, "no tc binary on PATH")


def test_other_platforms_are_unavailable_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe.sys, "platform", "darwin")
    result = probe_netem()
    assert not result.available and "not Linux" in result.reason


def test_choose_shaper_records_why(monkeypatch: pytest.MonkeyPatch) -> None:
    relay = choose_shaper(NetemProbe(False, "no tc binary on PATH"))
    assert relay.shaper == "relay" and "no tc binary" in relay.reason
    monkeypatch.setattr(probe.importlib.util, "find_spec", lambda name: object())
    assert choose_shaper(NetemProbe(True, "created")) == ShaperChoice("netem", "created")


def test_choose_shaper_needs_pyroute2_for_netem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe.importlib.util, "find_spec", lambda name: None)
    choice = choose_shaper(NetemProbe(True, "created"))
    assert choice.shaper == "relay" and "pyroute2" in choice.reason
