"""Catalogs of description files: a name finds `<folder>/<name>.yaml`, a path finds itself.

The topology catalog is this package's folder; `load` reads a topology by name or path, as the
command lines take it. `experiments.catalog` uses the same rule for workloads and experiments.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from topologies.errors import SpecError, first_error

FOLDER = Path(__file__).parent


def names(folder: Path = FOLDER) -> list[str]:
    """The catalog entries in `folder`, by name."""
    return sorted(path.stem for path in folder.glob("*.yaml"))


def find(name: str, folder: Path = FOLDER, base: Path | None = None) -> Path | None:
    """A path as given (relative to `base`), or the catalog entry of that name."""
    candidates = [Path(name)]
    if base is not None:
        candidates.insert(0, base / name)
    if "/" not in name and not name.endswith((".yaml", ".yml")):
        candidates.append(folder / f"{name}.yaml")
    return next((path for path in candidates if _is_file(path)), None)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for the file system, or with a NUL
        return False


def load(name: str):
    """The expanded topology of a catalog name or a file; a SpecError names the file, line
    and field of what is wrong."""
    from topologies.documents import read
    from topologies.fields import WRITTEN
    from topologies.model import expand
    from topologies.spec import TopologySpec

    path = find(name)
    if path is None:
        raise SpecError((), name, "a topology file or a catalog topology ("
                        + ", ".join(names()) + ")", name)
    document = read(path)
    if not isinstance(document.data, dict):
        raise SpecError((), document.data, "a topology: a mapping with name, nodes and links",
                        str(path), 1)
    try:
        return expand(TopologySpec.model_validate(document.data, context=WRITTEN))
    except SpecError as error:
        raise document.error(error) from None
    except ValidationError as exc:
        raise document.error(first_error(exc, document.data)) from None
    except ValueError as exc:
        raise SpecError((), name, f"a valid topology: {exc}".splitlines()[0],
                        str(path)) from None
