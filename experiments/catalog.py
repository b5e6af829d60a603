"""The catalogs: YAML files shipped in the topologies, workloads and experiments packages."""

from __future__ import annotations

import re
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Entry:
    """A catalog entry as `foglab list` shows it: its name, its description's first sentence, and
    for an experiment its topology (a name, or `inline` when the file describes it)."""

    kind: str
    name: str
    description: str
    topology: str | None = None
    backend: str | None = None  # an experiment's run.backend as its file writes it (sim)


def entries(kind: str) -> list[Entry]:
    """The catalog entries of one kind, with what their files say of themselves."""
    from topologies.documents import read

    found = []
    for name in names(kind):
        try:
            data = read(FOLDERS[kind] / f"{name}.yaml").data
        except SpecError as failure:  # shown, not hidden: a broken entry is worth knowing of
            found.append(Entry(kind, name, f"(unreadable: {failure})"))
            continue
        data = data if isinstance(data, dict) else {}
        topology = data.get("topology") if kind == "experiment" else None
        run = data.get("run") if isinstance(data.get("run"), dict) else {}
        found.append(Entry(kind, name, first_sentence(str(data.get("description") or "")),
                           None if topology is None else
                           topology if isinstance(topology, str) else "inline",
                           str(run.get("backend", "sim")) if kind == "experiment" else None))
    return found


def first_sentence(text: str) -> str:
    """A description's first sentence on one line (a full stop before a capital ends it, so
    that "Fig. 5" does not)."""
    return re.split(r"(?<=\.)\s+(?=[A-Z])", " ".join(text.split()), maxsplit=1)[0]


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
