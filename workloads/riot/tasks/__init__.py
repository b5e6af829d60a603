"""RIoTBench tasks, one module per family; importing this package fills the TASKS registry."""

# Imported for their @register side effect: every family module adds its tasks to TASKS.
from workloads.riot.tasks import filters, io, parse, predict, statistics  # noqa: F401
from workloads.riot.tasks.base import TASKS, Message, Task, make_task

__all__ = ["TASKS", "Message", "Task", "make_task"]
