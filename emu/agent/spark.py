"""An `engine: spark` operator: the PySpark job (`workloads.spark.job`) as a child process.

Only the cloud image has Spark. The job reads the operator's topic filter through its own
broker session, so the agent meanwhile records each message's arrival at the node as a sink
does (see Agent): the messages table measures delivery to the node where Spark reads, and the
job's own micro-batch progress (`<records>/<operator>/progress.jsonl`) measures Spark.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from emu.agent.config import OperatorConfig

APPS = ("etl", "stats", "pred")
STOP_WAIT_S = 15.0


def _unblocked() -> None:
    # The agent blocks its stop signals for sigwait, and a child inherits the mask.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})


class SparkJob:
    """The running job of one operator; `stop` ends it with SIGTERM (the job stops its query)."""

    def __init__(self, config: OperatorConfig, node: str, mqtt: str, records: str,
                 cores: int = 2, standby: bool = False, client_id: str | None = None) -> None:
        if config.task not in APPS:
            raise ValueError(f"operator {config.name!r}: engine spark runs the apps "
                             f"{', '.join(APPS)}, not {config.task!r}")
        if len(config.reads) != 1:
            raise ValueError(f"operator {config.name!r}: a Spark job reads one topic filter, "
                             f"not {config.reads}")
        self.name = config.name
        self.work = Path(records) / config.name
        self.command = [sys.executable, "-m", "workloads.spark.job", "--app", config.task,
                        "--mqtt", mqtt, "--reads", config.reads[0], "--work", str(self.work),
                        "--master", f"local[{cores}]", "--params", json.dumps(config.params)]
        if config.writes:
            self.command += ["--writes", f"{config.writes}/{node}"]
        # A move's target (`workloads.spark.migration`): warm, waiting for `<work>/handover`;
        # with the source's session id it builds the query before the handover comes.
        if standby:
            self.command.append("--standby")
        if client_id:
            self.command += ["--client-id", client_id]
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        with (self.work / "job.log").open("ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            preexec_fn=_unblocked, env=os.environ.copy())

    def stop(self, timeout: float = STOP_WAIT_S) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; the job's exit code."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()
