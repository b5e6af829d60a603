"""The seam between an experiment and what runs it: a run's plan, what a backend gives back,
and what a backend is (experiments.backends registers them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from experiments.spec import ExperimentSpec
from topologies.model import Topology
from workloads.placement.replace import Replanning


@dataclass
class RunPlan:
    """Everything one run needs, resolved: the spec of its sweep point and its own seed, and
    with placement.replace what its re-placement starts from."""

    spec: ExperimentSpec
    topology: Topology
    seed: int
    repetition: int
    replanning: Replanning | None = None


@dataclass
class RunOutput:
    """Columns per table (see experiments.schema), facts for the manifest, and the nodes that
    failed during the run (node -> what happened): a run with failed nodes still writes what
    it measured, and ends `degraded`."""

    tables: dict[str, dict]
    facts: dict = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def run(self, plan: RunPlan, progress) -> RunOutput:
        """Run; call `progress(seconds_done)` now and then; raise on failure after cleaning up."""
        ...
