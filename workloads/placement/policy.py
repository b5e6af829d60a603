"""The placement policy interface, the registry of policies by name, and `decide`.

A policy is a class registered under a name (`@register("edge-ward")`) or given in an
experiment as `module:Class`; it gets its settings (the experiment's `placement.settings`) as
keyword arguments. `place(problem)` returns a Decision naming each operator's nodes and why;
it must be deterministic for one problem (ties by the node order, randomness from
`problem.seed` only). `replace(problem, observation, current)` is asked at run time (with
`placement.replace`) on the problem as observed (workloads.placement.replace): by default
the policy places again with what was seen; one that overrides it to return None keeps its
first answer.

`decide(policy, problem)` is how anyone calls a policy: pins kept (an operator with `pinned`
runs where `on` says, whatever the policy), every operator placed on its candidates only,
the wall time taken and the common objective (workloads.placement.evaluate) filled in.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping
from dataclasses import replace as with_fields
from typing import Any

from workloads.placement.base import POLICIES, Policy, register
from workloads.placement.evaluate import objective
from workloads.placement.problem import PINNED, Decision, Problem, Unplaceable

# Policy, register and POLICIES live in workloads.placement.base, which the shipped policies
# import (this module imports them in turn, to register them): here for anyone writing one.
__all__ = ["POLICIES", "Policy", "PolicyError", "asked", "decide", "make_policy", "policy_class",
           "register"]


class PolicyError(ValueError):
    """A policy that cannot be had: an unknown name, a module that does not import, a class
    that is not a Policy, settings it refuses. The message names which and why."""


def policy_class(name: str) -> type[Policy]:
    """The registered policy `name`, or a user's `module:Class` (a Policy subclass)."""
    _load_shipped()
    if ":" not in name:
        if name not in POLICIES:
            raise PolicyError(f"unknown placement policy {name!r}; known: "
                              f"{', '.join(sorted(POLICIES))}, or module:Class")
        return POLICIES[name]
    module_name, _, class_name = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any error of the user's module is the user's to read
        raise PolicyError(f"placement policy {name!r}: module {module_name} does not import "
                          f"({type(exc).__name__}: {exc})") from exc
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise PolicyError(f"placement policy {name!r}: {module_name} has no Policy subclass "
                          f"named {class_name}")
    return cls


def make_policy(name: str, settings: Mapping[str, Any] | None = None) -> Policy:
    cls = policy_class(name)
    try:
        return cls(**dict(settings or {}))
    except TypeError as exc:
        raise PolicyError(f"placement policy {name!r}: {exc}") from exc


def decide(policy: Policy, problem: Problem) -> Decision:
    """The policy's decision with the pins kept, checked against the candidates, timed and
    scored (workloads.placement.evaluate.objective). An operator that fits nowhere stays
    Unplaceable; any other refusal of the policy's (a problem beyond it, a solver out of
    time) becomes a PolicyError in its own words."""
    return asked(policy, problem, lambda: policy.place(problem))


def asked(policy: Policy, problem: Problem,
          ask: Callable[[], Decision | None]) -> Decision | None:
    """`ask()`'s answer (the policy's place, or its replace at run time) for `problem` as
    `decide` gives it: pins kept, candidates checked, timed and scored; None when the policy
    answers None (it keeps what it has)."""
    name = policy.name or type(policy).__name__
    start = time.perf_counter()
    try:
        decision = ask()
    except Unplaceable:
        raise
    except (ValueError, TimeoutError) as refused:
        raise PolicyError(f"placement policy {name}: {refused}") from refused
    seconds = time.perf_counter() - start
    if decision is None:
        return None
    nodes = dict(decision.nodes)
    reasons = dict(decision.reasons)
    order = problem.index()
    for op in problem.operators:
        if op.pinned is not None:
            nodes[op.name] = tuple(op.pinned)
            reasons[op.name] = PINNED
            continue
        chosen = nodes.get(op.name)
        if not chosen:
            raise PolicyError(f"placement policy {name} placed no instance of operator "
                              f"{op.name}")
        outside = [n for n in chosen if n not in op.candidates]
        if outside:
            raise PolicyError(f"placement policy {name} put operator {op.name} on "
                              f"{', '.join(outside)}, outside its candidates "
                              f"({', '.join(op.candidates)})")
        nodes[op.name] = tuple(sorted(set(chosen), key=order.__getitem__))
    decided = Decision(nodes, reasons)
    return with_fields(decided, policy=name, objective=objective(problem, decided),
                       seconds=seconds, gap=decision.gap)


def _load_shipped() -> None:
    """The shipped policies register themselves when their modules are imported."""
    importlib.import_module("workloads.placement.policies")
    importlib.import_module("workloads.placement.optimal")
