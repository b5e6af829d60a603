"""A topology's Spark standalone cluster (`spark:`), planned: each VM's daemon, the drivers'
master and shared work folder, and the refusals that name the field."""

from __future__ import annotations

from dataclasses import replace

import pytest

from emu.agent.config import OperatorConfig
from emu.agent.spark_cluster import spark_role
from emu.cluster.deployment import agent_configs
from emu.cluster.plan import SPARK_WORK, plan_cluster
from topologies.errors import SpecError
from topologies.model import expand
from topologies.spec import TopologySpec


def topology(spark: dict, sites: dict[str, str] | None = None):
    sites = sites or {}
    return expand(TopologySpec.model_validate({
        "name": "sc", "sites": [{"name": "cloud"}, {"name": "edge"}],
        "nodes": [{"name": name, "kind": "cloud_vm", "site": sites.get(name, "cloud")}
                  for name in ("vm-1", "vm-2", "vm-3")]
        + [{"name": "broker", "kind": "broker", "site": "cloud"}],
        "links": [{"from": "vm-*", "to": "broker", "latency": "1ms"}],
        "spark": spark}))


def planned(spark: dict, sites: dict[str, str] | None = None):
    found = topology(spark, sites)
    configs = agent_configs(found)
    stats = OperatorConfig("stats", task="stats", reads=["clean/#"], engine="spark")
    configs["vm-1"] = replace(configs["vm-1"], operators=[stats])
    return plan_cluster(found, "sc", agents=configs)


def test_the_master_workers_and_drivers_get_their_parts() -> None:
    plan = planned({"master": "vm-2", "workers": ["vm-3"], "cores": 2, "memory": "1g"})
    configs = plan.agent_configs()
    master, worker = spark_role(configs["vm-2"].spark), spark_role(configs["vm-3"].spark)
    assert (master.role, master.host, master.port) == ("master", "vm-2", 7077)
    assert (worker.role, worker.master, worker.cores, worker.memory) == (
        "worker", "spark://vm-2:7077", 2, "1g")
    driver = configs["vm-1"]
    assert driver.spark == {} and driver.spark_master == "spark://vm-2:7077"
    assert driver.spark_work == f"{SPARK_WORK}/vm-1"
    # every VM of the cluster sees the driver's work at one path
    for node in ("vm-1", "vm-2", "vm-3"):
        assert plan.containers[node].shared_records == ("vm-1",)
    assert plan.containers["broker"].shared_records == ()


def test_without_a_cluster_jobs_run_in_local_mode() -> None:
    found = expand(TopologySpec.model_validate({
        "name": "sc", "nodes": [{"name": "vm", "kind": "cloud_vm"},
                                {"name": "broker", "kind": "broker"}],
        "links": [{"from": "vm", "to": "broker", "latency": "1ms"}]}))
    plan = plan_cluster(found, "sc")
    config = plan.agent_configs()["vm"]
    assert (config.spark, config.spark_master, config.spark_work) == ({}, "", "")


@pytest.mark.parametrize(("spark", "sites", "where", "value"), [
    ({"master": "broker", "workers": ["vm-2"]}, {}, r"spark\.master", "broker"),
    ({"master": "vm-1", "workers": ["vm-2", "vm-9"]}, {}, r"spark\.workers\[1\]", "vm-9"),
    ({"master": "vm-1", "workers": ["vm-2", "vm-2"]}, {}, r"spark\.workers", "vm-2"),
    ({"master": "vm-2", "workers": ["vm-3"]}, {"vm-3": "edge"}, r"spark\.workers\[0\]", "vm-3"),
    ({"master": "vm-2", "workers": ["vm-3"]}, {"vm-1": "edge"}, r"pipeline", "vm-1"),
])
def test_a_bad_cluster_is_refused_naming_the_field(spark, sites, where, value) -> None:
    with pytest.raises(SpecError, match=f"{where}.*{value}"):
        planned(spark, sites)


def test_the_swarm_engine_refuses_a_spark_cluster_before_making_anything() -> None:
    from emu.engines.docker.engine import ClusterError
    from emu.engines.swarm.engine import SwarmCluster

    plan = planned({"master": "vm-2", "workers": ["vm-3"]})
    with pytest.raises(ClusterError, match=r"topology\.spark on run\.engine swarm"):
        SwarmCluster(plan, client=object()).up()  # no engine call before the refusal
