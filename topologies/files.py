"""Which files an experiment may read: those in its own folder, and in folders the user allows.

An experiment file is often not the user's own: a student's on a lab's shared host, a pull
request's in CI. The files it names (includes of jobs, a topology or workload file, a
calibration profile or price list named as a file, a mobility trace) are therefore read only
from the experiment file's folder: a path is resolved against the folder of the file that
names it (an include's own folder for the includes it names), `~` expanded and symbolic
links followed, and refused unless the result lies inside the experiment's folder. The user
widens that, never the file (a file cannot allow itself more): `--allow-files DIR` on the
command line (repeatable), FOGLAB_ALLOW_FILES (folders separated by the system's path
separator, `:` on Linux) for scripts, `allow_files=` from Python (experiments.loader.load).

What a refusal says is the path as written, where it resolved and the rule, never the file's
content (topologies.errors.Withheld keeps the content of the files that are read out of
messages too). Catalog names (`topology: smart-city`, `calibration: reference`) are foglab's
own files and stay allowed: only paths are confined.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

VARIABLE = "FOGLAB_ALLOW_FILES"
FLAG = "--allow-files"


class Refused(ValueError):
    """A path the rule does not let the experiment read; its message says why, and how the
    user may allow it."""


def allowed_from_environment() -> list[Path]:
    """The folders FOGLAB_ALLOW_FILES names (empty entries skipped)."""
    return [Path(entry) for entry in os.environ.get(VARIABLE, "").split(os.pathsep)
            if entry.strip()]


@dataclass(frozen=True)
class Files:
    """The folders an experiment may read from: its own (`folder`, None when not confined:
    text handed over from Python, whose paths are the caller's), and those the user allows."""

    folder: Path | None
    allowed: tuple[Path, ...] = ()

    @classmethod
    def confined(cls, folder: str | Path, allow: Iterable[str | Path] = ()) -> Files:
        """Confined to `folder`, widened by `allow` and FOGLAB_ALLOW_FILES."""
        extra = [*allow, *allowed_from_environment()]
        return cls(Path(folder).resolve(), tuple(Path(p).expanduser().resolve() for p in extra))

    @classmethod
    def anywhere(cls) -> Files:
        return cls(None)

    def permits(self, resolved: Path) -> bool:
        return self.folder is None or any(
            resolved.is_relative_to(root) for root in (self.folder, *self.allowed))

    def resolve(self, written: str, base: Path) -> Path:
        """`written` (relative to `base`, the folder of the file that names it) as the resolved
        path of a regular file the experiment may read; Refused says why not. The rule is
        checked before the file's existence, so that a refusal tells nothing of what is
        outside."""
        path = Path(written).expanduser()
        path = path if path.is_absolute() else Path(base) / path
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError) as exc:  # a loop of links, a name too long
            raise Refused(f"a path that resolves ({written!r} does not: {exc})") from None
        if not self.permits(resolved):
            raise Refused(self._outside(written, resolved))
        try:
            mode = resolved.stat().st_mode
        except OSError:
            raise Refused(f"an existing file: {written!r} resolves to {str(resolved)!r}, "
                          "which is not there") from None
        if not stat.S_ISREG(mode):
            raise Refused(f"a regular file: {written!r} resolves to {str(resolved)!r}, "
                          "which is not one (a folder, a device or a pipe)")
        return resolved

    def _outside(self, written: str, resolved: Path) -> str:
        how = ("a path in a home folder" if written.startswith("~") else
               "an absolute path" if Path(written).is_absolute() else "a relative path")
        allowed = (f" (or the allowed {', '.join(str(root) for root in self.allowed)})"
                   if self.allowed else "")
        return (f"a file inside the experiment's folder {self.folder}{allowed}, but {written!r}"
                f" ({how}) resolves, links followed, to {str(resolved)!r}, outside it; to "
                f"allow it, pass {FLAG} {resolved.parent} (or set {VARIABLE})")
