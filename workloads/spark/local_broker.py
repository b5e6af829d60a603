"""A throwaway Mosquitto broker on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

MOSQUITTO = "mosquitto"
# Debian installs the broker outside a normal user's PATH.
FALLBACK_PATHS = ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto")


def find_mosquitto() -> str | None:
    """Path of the mosquitto binary, or None when it is not installed."""
    found = shutil.which(MOSQUITTO)
    if found:
        return found
    return next((p for p in FALLBACK_PATHS if os.access(p, os.X_OK)), None)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LocalMosquitto:
    """`with LocalMosquitto() as broker:` a real broker at `broker.host:broker.port`.

    Sessions and their queues persist to a temporary directory, and each persistent session
    may hold up to `max_queued` messages, so a subscriber that is down (a stopped query) loses
    nothing. The process and the directory are removed on exit.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        max_queued: int = 1_000_000,
        max_inflight: int = 1000,
        start_timeout: float = 10.0,
    ) -> None:
        self.host = host
        self.port = 0
        self.max_queued = max_queued
        self.max_inflight = max_inflight
        self.start_timeout = start_timeout
        self.workdir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LocalMosquitto:
        binary = find_mosquitto()
        if binary is None:
            raise FileNotFoundError(
                "mosquitto is not installed: install the Debian package 'mosquitto' "
                "(apt-get install mosquitto)"
            )
        self.workdir = Path(tempfile.mkdtemp(prefix="foglab-mosquitto-"))
        try:
            # A port picked free can be taken before mosquitto binds it: try a few.
            for _ in range(3):
                self.port = _free_port(self.host)
                if self._start(binary):
                    return self
            log = self.workdir / "mosquitto.log"
            text = log.read_text(errors="replace") if log.exists() else "(empty)"
            raise RuntimeError(f"mosquitto did not start; its log:\n{text}")
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _start(self, binary: str) -> bool:
        assert self.workdir is not None
        conf = self.workdir / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} {self.host}\n"
            "allow_anonymous true\n"
            # Nagle's algorithm holds a small reply until the last one is acknowledged: about
            # 40 ms on every request and answer.
            "set_tcp_nodelay true\n"
            "persistence true\n"
            f"persistence_location {self.workdir}/\n"
            f"max_queued_messages {self.max_queued}\n"
            f"max_inflight_messages {self.max_inflight}\n"
            # As root, mosquitto would drop to user 'mosquitto', who cannot write our temp dir.
            f"user {pwd.getpwuid(os.getuid()).pw_name}\n"
            f"log_dest file {self.workdir / 'mosquitto.log'}\n"
        )
        self.process = subprocess.Popen(
            [binary, "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.process = None
                return False
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.05)
        self._terminate()
        return False

    def _terminate(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def stop(self) -> None:
        """Stop the broker process and remove its directory (idempotent)."""
        self._terminate()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
