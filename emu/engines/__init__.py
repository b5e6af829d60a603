"""Where an emulation's containers run: the engines, in one registry.

An engine takes a cluster plan (emu.cluster.plan) and brings it up as running containers on
some container engine, and down again (the protocol: emu.engines.base.Engine). The registry
below is the one list of engines: the experiment schema (`run.engine`), the command line
(`foglab emu up --engine`), `foglab emu down` (which finds a cluster's engine by the label
its networks carry, ENGINE_LABEL) and a run (emu.run.emulate) read it. A third engine is a module
with its class, and one `register` line here (or in the user's own code before a run).

This module imports nothing heavy: the schema reads the names without the Docker SDK. A class
is imported on first use (`EngineEntry.load`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from topologies.errors import SpecError

if TYPE_CHECKING:
    from emu.engines.base import Engine

# The label a cluster's networks and containers carry with their engine's name; without it,
# the default engine (plain Docker: clusters made before engines labelled theirs).
ENGINE_LABEL = "foglab.engine"
DEFAULT = "docker"


@dataclass(frozen=True)
class EngineEntry:
    """One engine: its name (`run.engine`), a line saying where it runs containers, and its
    class as `module:Class` (imported on first use)."""

    name: str
    summary: str
    where: str

    def load(self) -> type[Engine]:
        module, _, attribute = self.where.partition(":")
        return getattr(importlib.import_module(module), attribute)


ENGINES: dict[str, EngineEntry] = {}


def register(name: str, summary: str, where: str) -> EngineEntry:
    """Add an engine; a name taken already is refused (an engine is replaced by no one)."""
    if name in ENGINES:
        raise ValueError(f"engine {name!r} is registered already ({ENGINES[name].where})")
    if ":" not in where:
        raise ValueError(f"engine {name!r}: where {where!r} is not module:Class")
    ENGINES[name] = entry = EngineEntry(name, summary, where)
    return entry


register("docker", "plain Docker on this host", "emu.engines.docker.engine:Cluster")
register("swarm", "Swarm services through this engine as a swarm manager (docs/swarm.md)",
         "emu.engines.swarm.engine:SwarmCluster")


def engine_names() -> tuple[str, ...]:
    return tuple(ENGINES)


def engine_entry(name: object, where: str = "run.engine") -> EngineEntry:
    """The engine a run's `engine` names (None: the default); a clear error naming the field
    and the value otherwise."""
    if name is None:
        name = DEFAULT
    if not isinstance(name, str) or name not in ENGINES:
        raise SpecError(where, name, f"an engine is one of {', '.join(ENGINES)}")
    return ENGINES[name]


def engine_class(name: object, where: str = "run.engine") -> type[Engine]:
    """The engine class a run's `engine` names."""
    return engine_entry(name, where).load()


def engine_of(labels: Mapping[str, str] | None) -> EngineEntry:
    """The engine of a cluster found on the host, by its networks' labels (`foglab emu down`)."""
    name = (labels or {}).get(ENGINE_LABEL, DEFAULT)
    return ENGINES.get(name, ENGINES[DEFAULT])


def engine_options(name: object, where: str = "run.engine", **settings: object) -> dict:
    """The options a run's spec sets for its engine besides its plan, by run field: each
    engine class declares the fields it takes (`Engine.run_options`). A field set for an
    engine that does not take it is refused, naming the field and the engines that do."""
    entry = engine_entry(name, where)
    taken = entry.load().run_options
    options: dict[str, object] = {}
    for field, value in settings.items():
        if not value:
            continue
        if field in taken:
            options[taken[field].keyword] = value
            continue
        takers = {e.name: e.load().run_options for e in ENGINES.values()}
        what = next((o[field].what for o in takers.values() if field in o), field)
        takers = [n for n, o in takers.items() if field in o]
        raise SpecError(f"run.{field}", value,
                        f"{what} is not engine {entry.name}'s: set run.engine "
                        f"{' or '.join(takers) or '(none takes it)'}, or drop run.{field}")
    return options
