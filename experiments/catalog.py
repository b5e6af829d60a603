"""The catalogs: YAML files shipped in the topologies, workloads and experiments packages."""

from __future__ import annotations

from pathlib import Path

import experiments
import workloads
from topologies import catalog as topology_catalog
from topologies.errors import SpecError

FOLDERS = {
    "topology": topology_catalog.FOLDER,
    "workload": Path(workloads.__file__).parent,
    "experiment": Path(experiments.__file__).parent,
}


def names(kind: str) -> list[str]:
    """The catalog entries of one kind, by name."""
    return topology_catalog.names(FOLDERS[kind])


def find(kind: str, name: str, base: Path | None = None) -> Path | None:
    """A path as given (relative to `base`), or the catalog entry of that name."""
    return topology_catalog.find(name, FOLDERS[kind], base)


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
