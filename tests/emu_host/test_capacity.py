"""emu.cluster.capacity: the capacity planner's placement, pressure, hosts needed, start-up and
memory, worked by hand on the quickstart's containers; its refusals naming the figures; the demand
it shares with `run.dilation: auto`; and `foglab emu plan` through typer's runner. No Docker."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from emu.cluster.capacity import (
    GIB,
    MIB,
    TARGET_PRESSURE,
    CapacityRefused,
    plan_capacity,
    plan_experiment,
)
from emu.cluster.deployment import agent_configs
from emu.cluster.plan import plan_cluster
from experiments import dilation
from experiments.loader import load

# A demand written by hand (host cores at K = 1), not the model's, so the figures below can be
# worked out on paper.
DEMAND = {"gw-1": 0.3, "gw-2": 0.3, "gw-3": 0.3, "gw-4": 0.3, "broker-1": 0.1, "cloud-1": 0.8,
          "relays": 0.2, "engine": 0.01}


@pytest.fixture(scope="module")
def quickstart():
    point = load("experiments/quickstart.yaml", ["run.backend=emu"]).points[0]
    return point.spec, point.topology


@pytest.fixture(scope="module")
def cluster(quickstart):
    spec, topology = quickstart
    agents = agent_configs(topology, spec.workload, spec.pipeline, spec.run.seed, 0.0)
    return plan_cluster(topology, "capacity", agents=agents, host_cpus=4)


def test_a_small_case_worked_by_hand(cluster) -> None:
    """Budget per host 0.5 x 4 = 2.0 cores; each agent carries 0.2 / 5 of the relays. The cloud
    site (cloud-1 0.84, broker-1 0.1, ZooKeeper 0) goes first (0.94 + 0.01 engine), then the
    districts of 0.34 by name: east, north, south fit beside it (1.97), west goes to host 2."""
    plan = plan_capacity(cluster, DEMAND, hosts=2, cores=4, memory=8 * GIB)
    one, two = plan.hosts
    assert one.sites == ("cloud", "east", "north", "south") and two.sites == ("west",)
    assert one.demand == pytest.approx(0.1 + 0.8 + 0.9 + 0.2 * 4 / 5 + 0.01)
    assert two.demand == pytest.approx(0.3 + 0.2 / 5 + 0.01)
    assert (one.pressure, two.pressure) == pytest.approx((1.97 / 4, 0.35 / 4))
    assert not plan.saturated and plan.hosts_needed == 2 and plan.dilation == 1.0
    # resident: cloud-1's agent and Spark job 816 MiB, Mosquitto 8, ZooKeeper 160, three
    # forked gateways 24 each, the zygote 48 and 1 a gateway it forked; host 2 one gateway and
    # its own zygote
    assert (one.memory, two.memory) == (1107 * MIB, 73 * MIB)
    # the engine's CPU: three services 0.5 s, three forked agents 0.2 s, the zygote 1.1 s
    assert one.start_s == pytest.approx(3.2 / 4) and plan.start_s == one.start_s
    assert two.start_s == pytest.approx(1.3 / 4)


def test_one_host_is_saturated_and_more_hosts_lower_the_pressure(cluster) -> None:
    alone = plan_capacity(cluster, DEMAND, hosts=1, cores=4, memory=8 * GIB)
    assert alone.max_pressure == pytest.approx(2.31 / 4) and alone.saturated
    assert alone.hosts_needed == 2
    pressures = [plan_capacity(cluster, DEMAND, hosts=n, cores=4, memory=8 * GIB).max_pressure
                 for n in (1, 2, 3)]
    assert pressures[0] > pressures[1] >= pressures[2]
    assert pressures[1] <= TARGET_PRESSURE


def test_a_plan_that_cannot_fit_is_refused_with_its_figures(cluster) -> None:
    # 816 + 8 + 160 + 4 x 24 MiB of containers and one zygote's 48 + 4: 1132 MiB
    with pytest.raises(CapacityRefused, match=r"needs 1\.11 GiB of memory for 7 containers; "
                                              r"1 host\(s\) of 1\.00 GiB have 1\.00 GiB"):
        plan_capacity(cluster, DEMAND, hosts=1, cores=4, memory=GIB)
    # 2.31 / 2 = 1.155; on 2-core hosts (budget 1.0) the cloud site takes one, the districts
    # two each: 3 hosts
    with pytest.raises(CapacityRefused, match=r"host 1 needs 2\.31 cores at K=1 and has 2: "
                                              r"pressure 1\.1[56] > 1 .*needed at pressure "
                                              r"0\.5: 3\)"):
        plan_capacity(cluster, DEMAND, hosts=1, cores=2, memory=8 * GIB)
    # dilated, the same host holds it: 2.31 / (2 x 2)
    assert plan_capacity(cluster, DEMAND, hosts=1, cores=2, memory=8 * GIB,
                         dilation=2.0).max_pressure == pytest.approx(2.31 / 4)


def test_auto_plans_at_the_k_the_run_would_choose(quickstart) -> None:
    """One host: the planner's K is experiments.dilation's `auto` (one demand, one bound)."""
    spec, topology = quickstart
    auto = load("experiments/quickstart.yaml",
                ["run.backend=emu", "run.dilation=auto"]).points[0].spec
    for cores in (2, 4):
        choice = dilation.choose(auto, topology, cores=cores)
        plan = plan_experiment(topology, spec.workload, spec.pipeline, spec.run.seed,
                               choice.demand, 1, cores, 8 * GIB, "auto")
        assert plan.dilation == choice.dilation
        assert plan.total_demand == pytest.approx(sum(choice.demand.values()))
        assert plan.max_pressure <= TARGET_PRESSURE


def test_foglab_emu_plan_prints_the_figures_and_refuses_what_cannot_fit() -> None:
    from emu.cli.plan_command import use_demand
    from experiments.cli import app
    from experiments.planning import prediction

    use_demand(prediction)  # as experiments.emu_commands hands it over
    runner = CliRunner()
    shown = runner.invoke(app, ["emu", "plan", "quickstart", "--hosts", "2", "--cores", "4",
                                "--memory", "24GiB", "--plain"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    figures = dict(line.split("=", 1) for line in shown.output.splitlines() if "=" in line)
    assert figures["hosts"] == "2" and figures["dilation"] == "1.0"
    assert 1.0 < float(figures["predicted_cores"]) < 4.0  # Spark's batches, 4 gateways
    assert float(figures["max_pressure"]) <= 1.0
    refused = runner.invoke(app, ["emu", "plan", "quickstart", "--memory", "512MiB"],
                            env={"COLUMNS": "200"})
    lines = refused.output.strip().splitlines()
    assert refused.exit_code == 3 and len(lines) == 1, refused.output
    assert lines[0].startswith("error: quickstart: cloud-1 needs 0.80 GiB of memory")
