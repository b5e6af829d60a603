"""Build a Debian root filesystem with debootstrap, apt and pip, and pack it as a tarball."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SUITE = "bookworm"
VARIANT = "minbase"
# A command's last lines of output, kept to explain its failure.
ERROR_LINES = 15
# About how many "I: ..." lines a minbase debootstrap prints: turns them into a fraction.
DEBOOTSTRAP_LINES = 455

Progress = Callable[[str, float | None], None]
"""Hears a build stage's name and how far it is (0 to 1), or None where that is unknown."""

# No docs, man pages or translations: nobody reads them in a container.
DPKG_SLIM = """\
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
path-exclude=/usr/share/lintian/*
"""
SLIMMED = ("usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian")
# Left over by the build (folders are emptied, files removed) or supplied by Docker at run time.
BUILD_LEFTOVERS = (
    "var/lib/apt/lists", "var/cache/apt", "tmp", "root/.cache", "etc/resolv.conf",
    "etc/hostname", "usr/sbin/policy-rc.d", "var/cache/debconf/templates.dat-old",
    "var/cache/debconf/config.dat-old",
)
PROXY_VARIABLES = {"http_proxy", "https_proxy", "no_proxy"}


class BuildError(RuntimeError):
    """A build step failed; the message ends with the step's last lines of output."""


@dataclass(frozen=True)
class Recipe:
    """What goes into a root filesystem: Debian packages, then pip requirements."""

    arch: str
    packages: tuple[str, ...]
    pip: tuple[str, ...] = ()


def host_arch() -> str:
    """This host's Debian architecture name."""
    machine = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _chroot_env() -> dict[str, str]:
    # Not the host's: its PIP_* and PYTHON* settings point at host paths the rootfs lacks.
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": "/root", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
    env.update({k: v for k, v in os.environ.items() if k.lower() in PROXY_VARIABLES})
    return env


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _run(command: list[str], on_line: Callable[[str], None] | None = None,
         env: dict[str, str] | None = None, apt_status: bool = False) -> None:
    """Run a command; on_line hears its output lines, or with apt_status apt's status lines.

    Raise BuildError with the command's last lines of output if it fails.
    """
    read_end, write_end = os.pipe()
    if apt_status:
        # A pipe of its own: with the status on the output pipe, maintainer scripts' writes
        # to stdout fail ("echo: I/O error" from ca-certificates).
        command = [*command, "-o", f"APT::Status-Fd={write_end}"]
    with tempfile.TemporaryFile("w+", errors="replace") as log, \
            open(read_end, errors="replace") as lines:
        try:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                       stdout=log if apt_status else write_end,
                                       stderr=subprocess.STDOUT, pass_fds=(write_end,), env=env)
        finally:
            os.close(write_end)
        with process:
            try:
                for line in lines:
                    if not apt_status:
                        log.write(line)
                    if on_line:
                        on_line(line)
            except BaseException:
                process.kill()  # Ctrl-C: stop the child before the rootfs is removed under it
                raise
        if process.returncode != 0:
            log.seek(0)
            tail = "".join(deque(log, maxlen=ERROR_LINES))
            raise BuildError(f"`{' '.join(command)}` failed (exit {process.returncode}):\n{tail}")


def _mounts_under(root: Path) -> list[Path]:
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # The mount point is the fifth field, with spaces and the like octal-escaped.
        point = Path(line.split()[4].encode().decode("unicode_escape"))
        if point == root or root in point.parents:
            mounts.append(point)
    return mounts


def remove_rootfs(root: Path) -> None:
    """Unmount whatever is mounted under root, then delete it; never delete through a mount."""
    for point in sorted(_mounts_under(root), key=lambda p: len(p.parts), reverse=True):
        subprocess.run(["umount", "--lazy", str(point)], check=False)
    if _mounts_under(root):
        raise BuildError(f"{root} still has mounts; not deleting it")
    shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _proc_mounted(root: Path) -> Iterator[None]:
    # Java's and some maintainer scripts' set-up needs /proc.
    _run(["mount", "-t", "proc", "proc", str(root / "proc")])
    try:
        yield
    finally:
        subprocess.run(["umount", "--lazy", str(root / "proc")], check=False)


def _debootstrap(recipe: Recipe, root: Path, progress: Progress) -> None:
    lines = 0

    def on_line(line: str) -> None:
        nonlocal lines
        if line.startswith("I: "):
            lines += 1
            progress("debootstrap", min(lines / DEBOOTSTRAP_LINES, 0.99))

    progress("debootstrap", 0.0)
    # No mirror given: debootstrap's default Debian mirror.
    _run(["debootstrap", f"--arch={recipe.arch}", f"--variant={VARIANT}", SUITE, str(root)],
         on_line)


def _slim(root: Path) -> None:
    config = root / "etc/dpkg/dpkg.cfg.d/foglab-slim"
    config.write_text(DPKG_SLIM)
    for folder in SLIMMED:
        shutil.rmtree(root / folder, ignore_errors=True)
    docs = root / "usr/share/doc"
    for path in docs.glob("*/*"):
        if path.name != "copyright":
            _remove(path)
    # The JRE's postinst fails to register its man pages without this folder.
    (root / "usr/share/man/man1").mkdir(parents=True, exist_ok=True)
    # Packages' services must not start inside the build.
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)


def _apt_install(recipe: Recipe, root: Path, progress: Progress) -> None:
    def on_line(line: str) -> None:
        # APT::Status-Fd lines: "dlstatus:<n>:<percent>:<text>" then "pmstatus:...".
        kind, _, rest = line.partition(":")
        if kind in ("dlstatus", "pmstatus"):
            percent = float(rest.split(":")[1]) / 100
            progress("apt", 0.4 * percent if kind == "dlstatus" else 0.4 + 0.6 * percent)

    # No pty for dpkg: the chroot has no /dev/pts, and scripts writing to one fail with EIO.
    # The sandbox user _apt cannot write to a rootfs built by root.
    apt = ["chroot", str(root), "apt-get", "-q", "-o", "Dpkg::Use-Pty=0",
           "-o", "APT::Sandbox::User=root"]
    progress("apt", 0.0)
    _run([*apt, "update"], env=_chroot_env())
    _run([*apt, "install", "-y", "--no-install-recommends", *recipe.packages], on_line,
         env=_chroot_env(), apt_status=True)
    _run([*apt, "clean"], env=_chroot_env())


def _pip_install(recipe: Recipe, root: Path, progress: Progress) -> None:
    """Build wheels with the host's pip (its index settings), install them offline in root."""
    if recipe.arch != host_arch():
        raise BuildError("pip requirements are built on the host: only for its architecture")
    wheels = root / "tmp/foglab-wheels"
    progress("pip wheels", None)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels),
          *recipe.pip])
    progress("pip install", None)
    # The rootfs is the image's own: Debian's guard against pip in /usr does not apply.
    _run(["chroot", str(root), "python3", "-m", "pip", "install", "--quiet", "--no-index",
          "--no-cache-dir", "--break-system-packages", "--find-links", "/tmp/foglab-wheels",
          *recipe.pip], env=_chroot_env())


def _remove_leftovers(root: Path) -> None:
    for name in BUILD_LEFTOVERS:
        path = root / name
        for leftover in path.iterdir() if path.is_dir() else [path]:
            _remove(leftover)
    # Logs go, their folders stay: some daemons expect to find them.
    for log in (root / "var/log").rglob("*"):
        if not log.is_dir():
            log.unlink()


def _pack(root: Path, tarball: Path, progress: Progress) -> None:
    progress("pack", None)
    # Docker mounts its own /dev, /proc and /sys over these.
    _run(["tar", "--numeric-owner", "--create", "--file", str(tarball), "--directory", str(root),
          "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*", "."])


def build_tarball(recipe: Recipe, tarball: Path, progress: Progress) -> None:
    """Build the recipe's root filesystem and pack it into tarball (written whole or not at all).

    The rootfs is built in a temporary folder beside the tarball and always removed, whatever
    happens, Ctrl-C included.
    """
    root = Path(tempfile.mkdtemp(prefix="rootfs-", dir=tarball.parent))
    root.chmod(0o755)  # it becomes the image's /, which daemons that drop root must traverse
    partial = tarball.with_name(tarball.name + ".part")
    try:
        _debootstrap(recipe, root, progress)
        _slim(root)
        with _proc_mounted(root):
            _apt_install(recipe, root, progress)
            if recipe.pip:
                _pip_install(recipe, root, progress)
        _remove_leftovers(root)
        _pack(root, partial, progress)
        partial.replace(tarball)
    finally:
        partial.unlink(missing_ok=True)
        remove_rootfs(root)
