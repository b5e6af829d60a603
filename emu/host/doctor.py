"""The emulation doctor: check (and with fix, prepare) this host for foglab's containers."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rich.markup import escape
from rich.table import Table

from emu.links.probe import NetemProbe, ShaperChoice, choose_shaper, probe_netem

Status = Literal["ok", "fixed", "missing", "failed"]
Report = Callable[[str], None]

BINFMT = Path("/proc/sys/fs/binfmt_misc")
QEMU_FORMAT = "qemu-aarch64"
# The file binfmt-support imports qemu-user-static's registration from.
QEMU_FORMAT_FILE = Path("/usr/share/binfmts") / QEMU_FORMAT
DOCKERD_LOG = Path("/var/log/foglab-dockerd.log")
DOCKERD_PID = Path("/run/foglab-dockerd.pid")
DOCKERD_READY_S = 90
APT_TIMEOUT_S = 1200
# Other engineers' apt runs hold the dpkg lock for minutes: wait for it rather than fail.
APT_LOCK_WAIT_S = 600


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report; a check not required only informs."""

    name: str
    status: Status
    detail: str
    required: bool = True

    @property
    def passed(self) -> bool:
        return self.status in ("ok", "fixed") or not self.required


@dataclass
class HostReport:
    """All checks, and the link shaper foglab will use on this host."""

    checks: list[Check] = field(default_factory=list)
    shaper: ShaperChoice | None = None

    @property
    def ready(self) -> bool:
        return all(check.passed for check in self.checks)

    def table(self) -> Table:
        colours = {"ok": "green", "fixed": "cyan", "missing": "yellow", "failed": "red"}
        table = Table(title="foglab emulation host", title_justify="left")
        for column in ("check", "status", "detail"):
            table.add_column(column)
        for check in self.checks:
            colour = colours[check.status] if check.required else "dim"
            status = check.status if check.required else f"{check.status} (optional)"
            table.add_row(check.name, f"[{colour}]{status}[/{colour}]", escape(check.detail))
        return table


def _run(command: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {result.returncode}"


class Apt:
    """apt-get install, with the package lists refreshed once per doctor run."""

    def __init__(self, report: Report):
        self.report = report
        self.updated = False

    def install(self, *packages: str) -> str | None:
        """Install the packages; return why not, or None on success."""
        if shutil.which("apt-get") is None:
            return "no apt-get: install " + " ".join(packages) + " by hand"
        lock = ["-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}"]
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        steps = [] if self.updated else [["apt-get", *lock, "update", "-q"]]
        steps.append(["apt-get", *lock, "install", "-y", "-q", "--no-install-recommends",
                      *packages])
        self.report(f"installing {' '.join(packages)} with apt-get")
        for step in steps:
            result = subprocess.run(step, capture_output=True, text=True, env=env,
                                    timeout=APT_TIMEOUT_S, check=False)
            if result.returncode != 0:
                return f"`{' '.join(step)}` failed: {_last_line(result)}"
        self.updated = True
        return None


def dockerd_pids() -> list[int]:
    """Every running Docker Engine of this host: its pid. An engine inside a container (a
    Docker-in-Docker swarm node, emu.engines.swarm.nodes) is in that container's pid namespace, not
    this host's, and is not counted."""
    own = os.readlink("/proc/self/ns/pid")
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if (comm.read_text().strip() == "dockerd"
                    and os.readlink(comm.parent / "ns" / "pid") == own):
                pids.append(int(comm.parent.name))
        except OSError:
            continue  # the process ended while we looked
    return sorted(pids)


def _docker_answers() -> str | None:
    """The engine's version if `docker info` answers, else None."""
    return _ask_docker()[0]


def _ask_docker() -> tuple[str | None, str]:
    """The engine's version if `docker info` answers, else None and why not."""
    if shutil.which("docker") is None:
        return None, "no docker command"
    try:
        result = _run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=20)
    except subprocess.TimeoutExpired:
        return None, "`docker info` did not answer within 20 s"
    version = result.stdout.strip()
    if result.returncode == 0 and version:
        return version, ""
    return None, _last_line(result)


def docker_state(answer: tuple[str | None, str], docker: str | None, dockerd: str | None,
                 running: list[int]) -> str:
    """What is wrong with the engine, told apart: no package, a client without an engine,
    an engine installed but not running, or one that runs and does not answer."""
    if running:
        return (f"dockerd runs (pid {', '.join(map(str, running))}) but `docker info` fails: "
                f"{answer[1]}")
    if dockerd:
        return f"Docker Engine is installed ({dockerd}) but no dockerd is running"
    if docker:
        return (f"a docker command exists ({docker}) but no Docker Engine (dockerd) is "
                "installed: docker.io is not installed")
    return "docker.io is not installed"


def _start_dockerd(report: Report) -> int:
    report(f"starting dockerd in the background, logging to {DOCKERD_LOG}")
    with DOCKERD_LOG.open("ab") as log:
        # A session of its own: the engine outlives this process and ignores its Ctrl-C.
        process = subprocess.Popen(["dockerd"], stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    DOCKERD_PID.write_text(f"{process.pid}\n")
    return process.pid


def _wait_for_docker(pids: list[int]) -> str | None:
    deadline = time.monotonic() + DOCKERD_READY_S
    while time.monotonic() < deadline:
        version = _docker_answers()
        if version or not any(Path(f"/proc/{pid}").exists() for pid in pids):
            return version
        time.sleep(1)
    return None


def check_docker(fix: bool, apt: Apt, report: Report) -> Check:
    """Docker Engine answers; with fix, install docker.io and start one dockerd."""
    name = "docker engine"
    answer = _ask_docker()
    if answer[0]:
        return Check(name, "ok", f"Docker Engine {answer[0]} answers")
    dockerd = shutil.which("dockerd")
    installed = dockerd is not None
    if not fix:
        return Check(name, "missing", docker_state(answer, shutil.which("docker"), dockerd,
                                                   dockerd_pids()))
    if not installed:
        error = apt.install("docker.io")
        if error:
            return Check(name, "failed", error)
    # Only one engine per host: one that runs but does not answer yet is waited for.
    pids = dockerd_pids() or [_start_dockerd(report)]
    version = _wait_for_docker(pids)
    if version:
        return Check(name, "fixed", f"Docker Engine {version} answers (dockerd pid "
                     f"{', '.join(map(str, pids))}, log {DOCKERD_LOG})")
    return Check(name, "failed", f"dockerd (pid {', '.join(map(str, pids))}) does not "
                 f"answer `docker info` within {DOCKERD_READY_S} s: see {DOCKERD_LOG}")


def check_docker_sdk() -> Check:
    """The docker Python SDK that emu drives the engine with is importable."""
    if importlib.util.find_spec("docker") is None:
        return Check("docker SDK", "missing", "pip install 'foglab[emu]' (the docker package)")
    from docker import __version__

    return Check("docker SDK", "ok", f"docker {__version__}")


def _qemu_state() -> tuple[bool, str]:
    entry = BINFMT / QEMU_FORMAT
    if not entry.exists():
        return False, f"{QEMU_FORMAT} is not registered"
    text = entry.read_text()
    fields = dict(line.split(" ", 1) for line in text.splitlines()[1:] if " " in line)
    if text.splitlines()[0] != "enabled":
        return False, f"{QEMU_FORMAT} is registered but disabled"
    # F (fix binary): the kernel holds the interpreter open, so containers need no copy of it.
    if "F" not in fields.get("flags:", ""):
        return False, f"{QEMU_FORMAT} lacks the F flag that containers need"
    return True, f"{QEMU_FORMAT} enabled, interpreter {fields.get('interpreter', '?')}"


def check_binfmt(fix: bool, apt: Apt, report: Report) -> Check:
    """arm64 binaries run through qemu-user-static and binfmt_misc."""
    name = "arm64 (qemu binfmt)"
    mounted = (BINFMT / "status").exists()
    enabled, detail = _qemu_state() if mounted else (False, f"binfmt_misc not mounted at {BINFMT}")
    if enabled:
        return Check(name, "ok", detail)
    if not fix:
        return Check(name, "missing", detail)
    if not QEMU_FORMAT_FILE.exists() or shutil.which("update-binfmts") is None:
        error = apt.install("qemu-user-static", "binfmt-support")
        if error:
            return Check(name, "failed", error)
    steps = [] if mounted else [["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)]]
    steps.append(["update-binfmts", "--enable", QEMU_FORMAT])
    failures = []
    for step in steps:
        report(f"running {' '.join(step)}")
        result = _run(step)
        # Not fatal by itself: --enable also fails on an entry the package already enabled.
        if result.returncode != 0:
            failures.append(f"`{' '.join(step)}` failed: {_last_line(result)}")
    enabled, detail = _qemu_state() if (BINFMT / "status").exists() else (False, "")
    if enabled:
        return Check(name, "fixed", detail)
    return Check(name, "failed", "; ".join([*failures, detail]).strip("; "))


def check_debootstrap(fix: bool, apt: Apt) -> Check:
    """debootstrap builds the images' root filesystems."""
    if shutil.which("debootstrap"):
        return Check("debootstrap", "ok", shutil.which("debootstrap") or "")
    if not fix:
        return Check("debootstrap", "missing", "apt-get install debootstrap")
    error = apt.install("debootstrap")
    if error:
        return Check("debootstrap", "failed", error)
    return Check("debootstrap", "fixed", "installed with apt-get")


def check_busybox(fix: bool, apt: Apt) -> Check:
    """A static busybox lets gateways' agents fork from a zygote (emu.engines.docker.zygote);
    without it each agent starts its own interpreter: slower, and more memory per gateway."""
    from emu.engines.docker.zygote import BUSYBOX, static_busybox

    why = static_busybox()
    if why is None:
        return Check("static busybox", "ok", f"{BUSYBOX}: agents fork from a zygote",
                     required=False)
    if not fix or BUSYBOX.exists():  # a dynamic busybox is the user's: not replaced here
        return Check("static busybox", "missing", f"{why}; agents start one by one",
                     required=False)
    error = apt.install("busybox-static")
    if error or static_busybox() is not None:
        return Check("static busybox", "failed", error or str(static_busybox()),
                     required=False)
    return Check("static busybox", "fixed", "installed busybox-static with apt-get",
                 required=False)


def check_registry(fix: bool, apt: Apt) -> Check:
    """Debian's docker-registry serves images to a swarm's nodes (emu.engines.swarm.image_registry);
    only a swarm needs it, and a user may name a registry of their own instead."""
    name = "docker-registry"
    if shutil.which(name):
        return Check(name, "ok", f"{shutil.which(name)}: images for swarm nodes", required=False)
    if not fix:
        return Check(name, "missing", "apt-get install docker-registry (for a swarm without a "
                     "registry of its own)", required=False)
    error = apt.install(name)
    if error or not shutil.which(name):
        return Check(name, "failed", error or "installed, but not on PATH", required=False)
    # The package's service is not wanted: foglab starts the registry where the nodes reach it.
    return Check(name, "fixed", "installed with apt-get", required=False)


def check_links(probe: NetemProbe, shaper: ShaperChoice) -> list[Check]:
    """Kernel netem is optional: without it links go through the user-space relay."""
    return [
        Check("kernel netem", "ok" if probe.available else "missing", probe.reason,
              required=False),
        # The reason repeats the probe's, already on the line above.
        Check("link shaper", "ok",
              f"{shaper.shaper}: {shaper.reason.removesuffix(': ' + probe.reason)}"),
    ]


def check(fix: bool = False, report: Report = print) -> HostReport:
    """Check this host for emulation; with fix, install and start what is missing.

    Fixing is idempotent and unattended: on a fresh Debian 12 host (root, apt reachable) it
    installs docker.io, qemu-user-static, binfmt-support, debootstrap, busybox-static and
    docker-registry, starts dockerd and enables arm64 emulation. `report` hears one line per
    action taken.
    """
    result = HostReport()
    if not sys.platform.startswith("linux"):
        result.checks.append(Check("platform", "failed", f"needs Linux, not {sys.platform}"))
        return result
    result.checks.append(Check("platform", "ok", f"Linux {os.uname().release}"))
    root = os.geteuid() == 0
    result.checks.append(Check("root", "ok" if root else "failed",
                               "running as root" if root else "run as root (sudo)"))
    fix = fix and root
    apt = Apt(report)
    result.checks += [
        check_docker(fix, apt, report),
        check_docker_sdk(),
        check_binfmt(fix, apt, report),
        check_debootstrap(fix, apt),
        check_busybox(fix, apt),
        check_registry(fix, apt),
    ]
    probe = probe_netem()
    result.shaper = choose_shaper(probe)
    result.checks += check_links(probe, result.shaper)
    return result


def main(argv: list[str]) -> int:
    from rich.console import Console

    console = Console()
    outcome = check(fix="--fix" in argv, report=lambda line: console.print(f"[dim]{line}[/dim]"))
    console.print(outcome.table())
    return 0 if outcome.ready else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
