"""An operator that names a RIoTBench task and gives no cost is charged the calibrated cost."""

import pytest

from foundation.helpers import run
from topologies.errors import SpecError
from workloads.riot.costs import task_cost

ONE_MESSAGE = """
name: calibrated
topology:
  name: calibrated
  nodes:
    - {{name: dev, kind: device}}
    - {{name: vm, kind: cloud_vm, profile: vm.small}}
    - {{name: broker, kind: broker, broker: {{service_time: 0s}}}}
  links:
    - {{from: dev, to: broker, latency: 1ms}}
    - {{from: broker, to: vm, latency: 1ms}}
workload:
  name: w
  streams: [{{name: s, sources: dev, rate: 1/20s, arrivals: periodic}}]
pipeline:
  - {{name: sink, task: {task}, on: vm, reads: s{cost}}}
run: {{duration: 20s, seed: 1, driver_cost: 0s}}
"""


@pytest.mark.parametrize("task", ["senml_parse", "kalman_filter"])
def test_a_known_task_without_a_cost_takes_its_calibrated_cost(task: str) -> None:
    table = run(ONE_MESSAGE.format(task=task, cost="")).tables["messages"]
    assert len(table["id"]) == 1
    # vm.small has speed 1.0: the cost is the calibrated one, on top of two 1 ms links.
    assert table["latency"][0] == pytest.approx(2e-3 + task_cost(task), abs=1e-12)


def test_a_given_cost_wins_over_the_calibrated_one() -> None:
    table = run(ONE_MESSAGE.format(task="senml_parse", cost=", cost: 5ms")).tables["messages"]
    assert table["latency"][0] == pytest.approx(7e-3, abs=1e-12)


def test_the_task_less_operator_without_a_cost_costs_nothing() -> None:
    table = run(ONE_MESSAGE.format(task="passthrough", cost="")).tables["messages"]
    assert table["latency"][0] == pytest.approx(2e-3, abs=1e-12)


def test_an_unknown_task_is_refused_rather_than_run_for_free() -> None:
    with pytest.raises(SpecError, match=r"pipeline\[0\]\.task: unknown task 'my_own_task'"):
        run(ONE_MESSAGE.format(task="my_own_task", cost=""))
