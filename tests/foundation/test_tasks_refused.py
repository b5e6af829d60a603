"""An operator's task must be one its engine knows: a misspelt name is refused when the file is
validated, on every backend, instead of running as a free operator on sim."""

from __future__ import annotations

import re

import pytest

from experiments.loader import load, parse_text
from topologies.errors import SpecError
from workloads.pipeline import PASSTHROUGH, SPARK_APPS, known_tasks
from workloads.riot.tasks import TASKS

FILE = """\
name: tasks
topology: smart-city
workload: city-sensors
pipeline:
  - {name: filter, task: range_filter, on: gateways, reads: city, writes: clean}
  - {name: sink, OPERATOR, on: cloud-1, reads: clean}
run: {backend: BACKEND, duration: 10s}
"""
SINK_LINE = 6


def load_text(operator: str, backend: str = "sim"):
    return parse_text(FILE.replace("OPERATOR", operator).replace("BACKEND", backend),
                      file="tasks.yaml")


@pytest.mark.parametrize("backend", ["sim", "emu", "hybrid"])
def test_an_unknown_task_is_refused_with_file_line_field_and_the_known_tasks(backend) -> None:
    with pytest.raises(SpecError) as caught:
        load_text("task: magic", backend)
    error = caught.value
    assert (error.file, error.line, error.path) == ("tasks.yaml", SINK_LINE,
                                                     ("pipeline", 1, "task"))
    assert error.value == "magic"
    message = str(error)
    assert message.startswith("tasks.yaml:6: pipeline[1].task: unknown task 'magic' for "
                              "engine python; known tasks: ")
    listed = message.split("known tasks: ", 1)[1].split(" (got", 1)[0].split(", ")
    assert listed == [*sorted(TASKS), "passthrough"]
    assert len(listed) == 14


def test_a_spark_operator_names_one_of_the_spark_apps() -> None:
    with pytest.raises(SpecError, match=re.escape(
            "pipeline[1].task: unknown task 'range_filter' for engine spark; known tasks: "
            "etl, stats, pred")):
        load_text("task: range_filter, engine: spark")
    # and a Spark app is no task of the python engine (the README's old example)
    with pytest.raises(SpecError, match=re.escape("unknown task 'stats' for engine python")):
        load_text("task: stats")


@pytest.mark.parametrize(("operator", "task"), [
    ("task: passthrough", "passthrough"), ("task: kalman_filter", "kalman_filter"),
    ("task: stats, engine: spark", "stats"),
    ("window: {size: 2s}", "passthrough"),  # no task given: the task-less operator
])
def test_known_tasks_and_the_task_less_operator_load(operator: str, task: str) -> None:
    (point,) = load_text(operator).points
    assert point.spec.pipeline[1].task == task


def test_the_spark_apps_named_for_validation_are_the_jobs_apps() -> None:
    job = pytest.importorskip("workloads.spark.job")
    assert tuple(job.APPS) == SPARK_APPS
    assert known_tasks("spark") == list(job.APPS)


def test_the_emulations_built_in_task_is_the_task_less_value() -> None:
    from emu.agent.operators import BUILTINS
    assert BUILTINS == (PASSTHROUGH,)


@pytest.mark.parametrize("name", ["quickstart", "iotcloud-brokers", "thesis-ch5-rate",
                                  "thesis-ch5-window", "thesis-ch6-rate", "thesis-ch6-sync",
                                  "thesis-ch6-window"])
def test_every_shipped_experiment_names_known_tasks(name: str) -> None:
    for operator in load(name).spec.pipeline:
        assert operator.task in known_tasks(operator.engine)
