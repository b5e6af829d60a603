"""What lets another process find and end a cluster's owner, and remove only its own scratch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from emu.cluster.hold import notify
from emu.engines.docker.inventory import end_owner, owner_pid, owner_token, remove_scratch


def test_an_owner_token_names_this_very_process() -> None:
    token = owner_token()
    assert token.startswith(f"{socket.gethostname()}:{os.getpid()}:")
    assert owner_pid(token) == os.getpid()


def test_a_token_of_another_start_time_host_or_garbage_names_nobody() -> None:
    host, pid, start = owner_token().rsplit(":", 2)
    assert owner_pid(f"{host}:{pid}:{int(start) + 1}") is None  # the pid was reused
    assert owner_pid(f"elsewhere:{pid}:{start}") is None
    assert owner_pid("") is None and owner_pid("a:b:c") is None


def test_ending_an_owner_signals_it_and_waits() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        token = owner_token(process.pid)
        assert owner_pid(token) == process.pid
        assert end_owner(token, timeout_s=10)
        process.wait(timeout=10)
        assert owner_pid(token) is None
        assert not end_owner(owner_token())  # never this process itself
    finally:
        process.kill()
        process.wait()


def test_only_a_foglab_scratch_folder_under_the_temp_dir_is_removed(tmp_path: Path) -> None:
    mine = Path(tempfile.mkdtemp(prefix="foglab-test-"))
    assert remove_scratch(str(mine)) and not mine.exists()
    other = tmp_path / "foglab-keep"
    other.mkdir()
    assert not remove_scratch(str(other)) and other.exists()
    plain = Path(tempfile.mkdtemp(prefix="keep-"))
    try:
        assert not remove_scratch(str(plain)) and plain.exists()
    finally:
        plain.rmdir()


def test_a_notice_appears_whole(tmp_path: Path) -> None:
    notice = tmp_path / "up.notice"
    notify(notice, ok=True, pid=1, facts={"up_s": 1.5})
    assert notice.read_text() == '{"ok": true, "pid": 1, "facts": {"up_s": 1.5}}'
    assert not notice.with_suffix(".part").exists()
    notify(None, ok=True)  # nobody to tell


class _StuckEngine:
    """The part of the docker API `remove` uses, with a network the engine will not remove
    (the code around a real engine's refusal; the real fault cannot be made on purpose)."""

    def __init__(self, scratch: str) -> None:
        self.api = self
        self.tries = 0
        self.scratch = scratch

    def networks(self, filters=None) -> list[dict]:
        from emu.engines.docker.inventory import SCRATCH

        return [{"Id": "abc123", "Name": "foglab-c9-edge", "Labels": {SCRATCH: self.scratch}}]

    def containers(self, all=False, filters=None) -> list[dict]:  # noqa: A002 - the API's name
        return []

    def remove_network(self, network: str) -> None:
        from docker.errors import APIError

        self.tries += 1
        raise APIError("error while removing network: has active endpoints")


def test_a_network_the_engine_keeps_is_named_with_the_remedy(monkeypatch) -> None:
    from emu.engines.docker import inventory

    monkeypatch.setattr(inventory, "NETWORK_RELEASE_S", 0.6)
    engine = _StuckEngine(tempfile.mkdtemp(prefix="foglab-c9-"))
    with pytest.raises(inventory.StuckNetwork) as caught:
        inventory.remove(engine, "c9", end_owner_process=False)
    assert engine.tries >= 2  # it tried again before giving up
    assert not Path(engine.scratch).exists()  # the scratch folder goes all the same
    assert caught.value.network == "foglab-c9-edge"
    assert "restarting dockerd" in str(caught.value).lower()
    assert "foglab emu down --cluster c9" in str(caught.value)
