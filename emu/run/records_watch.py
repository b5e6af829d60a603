"""A watch on the size of a run's records while it runs: every node's records folder is a host
folder its container writes (/records), where whatever the experiment runs may write without
end and fill the host's disk.

Cheap, so that it can run all along: at most every WATCH_INTERVAL_S host seconds, the folders
are listed (never following a link) and their files' allocated blocks (st_blocks) added up,
no file read. Past WARN_SHARE of the limit it warns once; past the limit it stops the run
(RecordsOverLimit, an EmuError: the run's cleanup takes the cluster down). The limit is
`limit` when given, else the FOGLAB_RECORDS_LIMIT variable (bytes, or with a unit: 500M,
2G), else FREE_DISK_SHARE of the disk free under the records when the watch starts.

On a swarm of several nodes the tasks keep their records in their containers until the
end (emu.engines.swarm.records): the watch sees what is on this host only.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from emu.errors import EmuError

WATCH_INTERVAL_S = 5.0
WARN_SHARE = 0.8
FREE_DISK_SHARE = 0.5
LIMIT_VARIABLE = "FOGLAB_RECORDS_LIMIT"
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


class RecordsOverLimit(EmuError):
    """The run's records passed their limit; the message names the folder and the figures."""


class RecordsWarning(UserWarning):
    """The run's records passed WARN_SHARE of their limit."""


def parse_size(text: str, where: str = LIMIT_VARIABLE) -> int:
    """Bytes from `500M`, `2G`, `1048576` (units of 1024); ValueError naming `where`."""
    match = _SIZE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"{where}: a size above 0 in bytes or with K, M, G or T, e.g. 500M "
                         f"(got {text!r})")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def default_limit(root: Path) -> tuple[int, str]:
    """The limit and where it came from: FOGLAB_RECORDS_LIMIT, else a share of the free disk."""
    if (text := os.environ.get(LIMIT_VARIABLE)) is not None:
        return parse_size(text), LIMIT_VARIABLE
    free = shutil.disk_usage(root).free
    return int(free * FREE_DISK_SHARE), (f"{FREE_DISK_SHARE:.0%} of the {free / 1024**3:.1f} GiB "
                                         f"free on its disk")


def records_size(root: Path) -> int:
    """Bytes allocated to the files under `root` (st_blocks), links not followed."""
    total = 0
    pending = [str(root)]
    while pending:
        try:
            entries = os.scandir(pending.pop())
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        with entries:
            for entry in entries:
                try:
                    found = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                total += found.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
    return total


class RecordsWatch:
    """Polled as the run goes (`poll`), it measures at most every `interval` host seconds."""

    def __init__(self, root: Path, limit: int | None = None,
                 interval: float = WATCH_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        if limit is None:
            self.limit, self.source = default_limit(self.root)
        else:
            self.limit, self.source = int(limit), "the run's records limit"
        self.interval = interval
        self.clock = clock
        self.largest = 0
        self._last = -float("inf")
        self._warned = False

    def poll(self) -> None:
        now = self.clock()
        if now - self._last < self.interval:
            return
        self._last = now
        size = records_size(self.root)
        self.largest = max(self.largest, size)
        if size > self.limit:
            raise RecordsOverLimit(
                f"the run's records under {self.root} take {_mib(size)}, over their limit of "
                f"{_mib(self.limit)} ({self.source}): the run is stopped. A node writing "
                f"without end fills the host's disk; set {LIMIT_VARIABLE} (e.g. 2G) for a run "
                "that needs more")
        if size > WARN_SHARE * self.limit and not self._warned:
            self._warned = True
            warnings.warn(f"the run's records under {self.root} take {_mib(size)}, "
                          f"{size / self.limit:.0%} of their limit of {_mib(self.limit)} "
                          f"({self.source})", RecordsWarning, stacklevel=2)

    def facts(self) -> dict[str, object]:
        return {"records_bytes": self.largest, "records_limit": self.limit}


def _mib(size: int) -> str:
    return f"{size / 1024**2:.1f} MiB"
