"""A cloud VM's side of a cluster, without Spark: its role's config, its jobs' command line."""

from __future__ import annotations

import pytest

from emu.agent.config import OperatorConfig
from emu.agent.spark import BLOCK_MANAGER_PORT, DRIVER_PORT, SparkJob
from emu.agent.spark_cluster import spark_role

STATS = OperatorConfig(name="stats", task="stats", reads=["clean/#"], engine="spark")


def test_a_job_on_a_cluster_is_its_driver_at_the_node_address() -> None:
    job = SparkJob(STATS, "cloud-1", "10.0.0.2:1883", "/records",
                   master="spark://10.0.3.2:7077", driver_host="10.0.3.4")
    command = job.command
    assert command[command.index("--master") + 1] == "spark://10.0.3.2:7077"
    assert command[command.index("--driver-host") + 1] == "10.0.3.4"
    assert command[command.index("--driver-port") + 1] == str(DRIVER_PORT)
    assert command[command.index("--block-manager-port") + 1] == str(BLOCK_MANAGER_PORT)
    local = SparkJob(STATS, "cloud-1", "10.0.0.2:1883", "/records", cores=2).command
    assert local[local.index("--master") + 1] == "local[2]" and "--driver-host" not in local


@pytest.mark.parametrize(("master", "host", "message"), [
    ("spark:/10.0.3.2:7077", "10.0.3.4", "spark:/10.0.3.2:7077"),
    ("local[2]", "10.0.3.4", "spark://host:port"),
    ("spark://10.0.3.2:7077", None, "driver_host")])
def test_a_bad_cluster_job_is_refused_naming_the_operator(master: str, host: str | None,
                                                          message: str) -> None:
    with pytest.raises(ValueError, match="operator 'stats'") as error:
        SparkJob(STATS, "cloud-1", "10.0.0.2:1883", "/records", master=master,
                 driver_host=host)
    assert message in str(error.value)


def test_roles_take_their_defaults_and_refuse_bad_fields() -> None:
    master = spark_role({"role": "master", "host": "10.0.3.2"})
    assert (master.port, master.ui_port, master.master_url) == (7077, 8080,
                                                               "spark://10.0.3.2:7077")
    worker = spark_role({"role": "worker", "host": "10.0.3.3", "master": master.master_url,
                         "cores": 2, "memory": "1g"})
    assert (worker.port, worker.cores, worker.memory) == (7078, 2, "1g")
    bad = [({"role": "driver", "host": "h"}, "spark.role"),
           ({"role": "master", "host": "0.0.0.0"}, "spark.host"),
           ({"role": "master", "host": "h", "port": 0}, "spark.port"),
           ({"role": "worker", "host": "h", "master": "h:7077"}, "spark.master"),
           ({"role": "worker", "host": "h", "master": "spark://m:7077", "memory": "lots"},
            "spark.memory"),
           ({"role": "master", "host": "h", "cpus": 2}, "cpus")]
    for raw, field in bad:
        with pytest.raises(ValueError, match="node 'cloud-2'") as error:
            spark_role(raw, "cloud-2")
        assert field in str(error.value)
