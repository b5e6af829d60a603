"""The catalogs: YAML files shipped in the topologies, workloads and experiments packages."""

from __future__ import annotations

from pathlib import Path

import experiments
import topologies
import workloads
from topologies.errors import SpecError

FOLDERS = {
    "topology": Path(topologies.__file__).parent,
    "workload": Path(workloads.__file__).parent,
    "experiment": Path(experiments.__file__).parent,
}


def names(kind: str) -> list[str]:
    """The catalog entries of one kind, by name."""
    return sorted(path.stem for path in FOLDERS[kind].glob("*.yaml"))


def find(kind: str, name: str, base: Path | None = None) -> Path | None:
    """A path as given (relative to `base`), or the catalog entry of that name."""
    candidates = [Path(name)]
    if base is not None:
        candidates.insert(0, base / name)
    if "/" not in name and not name.endswith((".yaml", ".yml")):
        candidates.append(FOLDERS[kind] / f"{name}.yaml")
    return next((path for path in candidates if _is_file(path)), None)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for the file system, or with a NUL
        return False


def experiment_path(source: str | Path) -> Path:
    path = find("experiment", str(source))
    if path is None:
        raise SpecError((), str(source), "an experiment file or a catalog experiment ("
                        + ", ".join(names("experiment")) + ")", str(source))
    return path


def reference_path(kind: str, name: str, base: Path, error: SpecError) -> Path:
    path = find(kind, name, base)
    if path is None:
        raise error
    return path
