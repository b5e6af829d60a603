"""A user's placement policy, loaded as `tests.placement.example_policy:FirstCandidate`."""

from __future__ import annotations

from workloads.placement.policy import Policy
from workloads.placement.problem import Decision, Problem


class FirstCandidate(Policy):
    """Every operator on its first candidate."""

    def place(self, problem: Problem) -> Decision:
        return Decision({op.name: op.candidates[:1] for op in problem.operators},
                        {op.name: "first candidate" for op in problem.operators})


class NotAPolicy:
    """A class that is not a Policy."""
