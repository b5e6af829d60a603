"""The Task interface every RIoTBench operator implements, and the registry that builds them."""

from __future__ import annotations

import inspect
import json
from typing import Any, ClassVar, TypeAlias, TypeVar

from workloads.riot.senml import Reading

# Parse tasks take the wire form (SenML text, a CSV line) and the rest take Readings.
Message: TypeAlias = Reading | str | bytes


class Task:
    """One operator instance: `process` maps one input message to zero or more outputs.

    `selectivity` is the declared average number of outputs per input, which the simulator
    uses as the operator's gain; stateful tasks save and reload their state as JSON bytes, so
    a migrated instance continues exactly where the old one stopped.
    """

    name: ClassVar[str]
    stateful: ClassVar[bool] = False
    selectivity: float = 1.0

    def process(self, message: Message) -> list[Message]:
        raise NotImplementedError

    def snapshot(self) -> bytes:
        return json.dumps(self.get_state(), sort_keys=True, separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        self.set_state(json.loads(data))

    def get_state(self) -> dict[str, Any]:
        """The JSON-ready state; stateful tasks override this and set_state."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"task {self.name!r} is stateless and cannot restore {state!r}")


TASKS: dict[str, type[Task]] = {}
T = TypeVar("T", bound=type[Task])


def register(cls: T) -> T:
    """Class decorator: make a task buildable by its name."""
    TASKS[cls.name] = cls
    return cls


def make_task(name: str, **params: Any) -> Task:
    """Build the task registered as `name`; a bad name or parameter is a ValueError naming it."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    cls = TASKS[name]
    signature = inspect.signature(cls)
    accepted = ", ".join(signature.parameters) or "none"
    for param in params:
        if param not in signature.parameters:
            raise ValueError(f"task {name!r} has no parameter {param!r}; "
                             f"its parameters: {accepted}")
    try:
        signature.bind(**params)
    except TypeError as error:
        raise ValueError(f"task {name!r}: {error}; its parameters: {accepted}") from None
    return cls(**params)


def require_reading(task: Task, message: Message) -> Reading:
    if not isinstance(message, Reading):
        raise TypeError(f"task {task.name!r} takes Readings, got {type(message).__name__}")
    return message
