"""A node's Spark processes: the jobs of its `engine: spark` operators (emu.agent.spark) and
its daemon of a Spark standalone cluster (emu.agent.spark_cluster), started with the agent and
stopped after everything else.

Only a node that runs Spark loads those modules (they start child processes: an idle gateway
under QEMU pays for every module it imports), hence their imports inside the functions here.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emu.agent.config import AgentConfig, OperatorConfig
    from emu.agent.spark import SparkJob


class SparkProcesses:
    """The node's Spark jobs (`jobs`, by work directory; a moved query's standby joins them:
    emu.agent.spark.SparkMigrations) and this VM's part of a standalone cluster, if any."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.jobs: dict[str, SparkJob] = {}
        self.daemon: Any = None
        if config.spark:
            from emu.agent.spark_cluster import SparkDaemon, spark_role

            self.daemon = SparkDaemon(spark_role(config.spark, config.node), config.records)

    def job_beside(self, operator: OperatorConfig) -> OperatorConfig:
        """The job of an operator whose engine runs beside the agent (it reads through a
        session of its own); the config of the passthrough the agent runs in its place, which
        records the arrivals."""
        from emu.agent.spark import SparkJob

        config = self.config
        self.jobs[operator.name] = SparkJob(
            operator, config.node, config.mqtt, config.spark_work or config.records,
            len(os.sched_getaffinity(0)), dilation=config.dilation,
            master=config.spark_master or None,
            driver_host=config.node if config.spark_master else None)
        return replace(operator, engine="python", task="passthrough", params={}, writes=None)

    def start(self) -> None:
        """Start the jobs; on a cluster, the daemon first and the jobs once the master answers,
        on a thread of their own (the daemons come up in their own time, the master first)."""
        if self.daemon is not None or self.config.spark_master:
            threading.Thread(target=self._start_cluster, name="foglab-spark",
                             daemon=True).start()
        else:
            for job in self.jobs.values():
                job.start()

    def _start_cluster(self) -> None:
        from emu.agent.spark_cluster import wait_master

        try:
            if self.daemon is not None:
                self.daemon.start()
            if self.jobs:
                wait_master(self.config.spark_master)
        except (OSError, RuntimeError, TimeoutError) as error:
            # The host sees the jobs not start (emu.run.spark_jobs names them and their logs).
            print(f"foglab agent {self.config.node}: Spark cluster: {error}", file=sys.stderr,
                  flush=True)
            return
        for job in self.jobs.values():
            job.start()

    def stop(self) -> None:
        for job in self.jobs.values():
            job.stop()
        if self.daemon is not None:
            self.daemon.stop()
