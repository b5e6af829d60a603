"""The placement policy base class and the registry of policies by name (re-exported by
workloads.placement.policy, where the interface is described; the shipped policies import it
from here, so that the module that loads them is not one they import)."""

from __future__ import annotations

from typing import Any, ClassVar

from workloads.placement.problem import Decision, Problem


class Policy:
    """Decides where each operator's instances run."""

    name: ClassVar[str] = ""
    # An exact solver: it takes the experiment's `placement.solver` limits as its settings
    # `time_limit` and `gap` (experiments.placement).
    exact: ClassVar[bool] = False

    def __init__(self, **settings: Any) -> None:
        if settings:
            raise TypeError(f"placement policy {self.name or type(self).__name__} takes no "
                            f"settings, given {', '.join(sorted(settings))}")

    def place(self, problem: Problem) -> Decision:
        raise NotImplementedError

    def replace(self, problem: Problem, observation: Any,
                current: Decision) -> Decision | None:
        """At run time: a new decision for `problem` as observed (its flows at the rates
        measured over the last period, its down nodes out of the candidates; the
        observation itself, workloads.placement.replace.Observation), or None to keep
        `current`. By default, `place` again: whether the answer is taken (the hysteresis)
        and how much of it moves at once is the re-placement's, not the policy's."""
        return self.place(problem)


POLICIES: dict[str, type[Policy]] = {}


def register(name: str):
    """Class decorator: the policy under `name` in POLICIES (and as its `name`)."""

    def add(cls: type[Policy]) -> type[Policy]:
        if name in POLICIES and POLICIES[name] is not cls:
            raise ValueError(f"placement policy {name!r} registered twice")
        cls.name = name
        POLICIES[name] = cls
        return cls

    return add
